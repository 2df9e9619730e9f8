// Checks the chunkwise prefill kernel against a float64 recurrence computed on the host, and
// times it beside a device-to-device copy. Needs only the CUDA runtime:
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -I. tests/backends/cuda/chunkwise_kernel_test.cu \
//        backends/cuda/kernels/chunkwise.cu -o chunkwise_kernel_test
//   ./chunkwise_kernel_test [--quick | --large-only] [--no-bench] [--bench-only] [--no-bench-check]
//                           [--family NAME] [--seed N]
//
// --quick leaves out the large checks (200 sequences, T = 65536), --large-only runs only
// them; --family benchmarks one family and runs its T = 65536 check alone; --no-bench-check
// times without checking the benchmark shape first.
//
// Checks (fresh random inputs per run, the seed printed): every family at odd sizes with
// grouped value heads and varlen batches holding empty sequences, prefills split inside a
// chunk, strong decays, many sequences (several rounds), T = 65536 at HV = 32, K = V = 128,
// and the benchmark shape itself; the reservation's largest scratch against every sequence
// count. States start non-zero; outputs are poisoned with NaN.
// Pass: relative RMS <= 1e-4 against float64 (or max-abs <= 1e-6), no NaN (docs/spec.md §4).
// Exit status 0 only if every check passes.

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/kernels/chunkwise.cuh"

namespace {

using lumen::cuda::ChunkwiseArgs;
using lumen::GateKind;

#define CHECK_CUDA(call)                                                                   \
  do {                                                                                     \
    const cudaError_t status_ = (call);                                                    \
    if (status_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                   \
                   cudaGetErrorString(status_));                                           \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

struct Family {
  const char* name;
  GateKind decay;
  bool delta;
  bool normalize;
  double reference_ms;  // fla's Triton on the H200, B = 4 x T = 8192 (0: none given)
};

constexpr Family kFamilies[] = {
    {"linear_attn", GateKind::kNone, false, false, 0.0},
    {"linear_attn+norm", GateKind::kNone, false, true, 0.0},
    {"retention", GateKind::kScalar, false, false, 0.0},
    {"ssd", GateKind::kScalar, false, false, 0.86},
    {"gla", GateKind::kPerChannel, false, false, 2.98},
    {"delta_net", GateKind::kNone, true, false, 2.10},
    {"gated_delta_net", GateKind::kScalar, true, false, 1.90},
    {"kda", GateKind::kPerChannel, true, false, 3.88},
};

const Family& FamilyNamed(const std::string& name) {
  for (const Family& f : kFamilies) {
    if (name == f.name) return f;
  }
  std::fprintf(stderr, "no family %s\n", name.c_str());
  std::exit(2);
}

struct Problem {
  Family family;
  int heads = 1;        // H
  int value_heads = 1;  // HV
  int key_dim = 1;
  int value_dim = 1;
  std::vector<int> lengths;  // tokens per sequence, 0 allowed
  float decay_strength = 0.5f;  // log-decays drawn from [-strength, 0]
  std::vector<int> splits;  // single sequence only: the prefill is cut into calls here
};

struct Inputs {
  std::vector<int32_t> cu_seqlens;
  std::vector<float> q, k, v, g, beta;
  std::vector<float> states;      // [N, HV, K, V], initial
  std::vector<float> normalizers;  // [N, HV, K], initial
  int tokens = 0;
};

struct Results {
  std::vector<double> o, states, normalizers;
};

Inputs MakeInputs(const Problem& p, std::mt19937_64& rng) {
  Inputs in;
  in.cu_seqlens.push_back(0);
  for (int n : p.lengths) in.cu_seqlens.push_back(in.cu_seqlens.back() + n);
  in.tokens = in.cu_seqlens.back();
  const int64_t t = in.tokens, h = p.heads, hv = p.value_heads, kd = p.key_dim, vd = p.value_dim;
  std::uniform_real_distribution<float> sym(-1.0f, 1.0f), unit(0.0f, 1.0f);
  const bool positive = p.family.normalize;  // phi(x) >= 0 for the normalizer's maps
  in.q.resize(t * h * kd);
  in.k.resize(t * h * kd);
  const float scale = 1.0f / std::sqrt(static_cast<float>(kd));
  for (auto& x : in.q) x = (positive ? unit(rng) : sym(rng)) * scale;
  for (auto& x : in.k) x = positive ? unit(rng) : sym(rng);
  if (p.family.delta) {  // unit-norm keys
    for (int64_t r = 0; r < t * h; ++r) {
      double norm = 0.0;
      for (int64_t i = 0; i < kd; ++i) norm += double(in.k[r * kd + i]) * in.k[r * kd + i];
      const float inv = static_cast<float>(1.0 / std::sqrt(norm + 1e-12));
      for (int64_t i = 0; i < kd; ++i) in.k[r * kd + i] *= inv;
    }
  }
  in.v.resize(t * hv * vd);
  for (auto& x : in.v) x = sym(rng);
  if (p.family.decay == GateKind::kScalar) {
    in.g.resize(t * hv);
    const bool retention = std::strcmp(p.family.name, "retention") == 0;
    for (int64_t r = 0; r < t; ++r) {
      for (int64_t j = 0; j < hv; ++j) {
        in.g[r * hv + j] = retention ? std::log1p(-std::ldexp(1.0f, -5 - static_cast<int>(j % 8)))
                                     : -p.decay_strength * unit(rng);
      }
    }
  } else if (p.family.decay == GateKind::kPerChannel) {
    in.g.resize(t * hv * kd);
    for (auto& x : in.g) x = -p.decay_strength * unit(rng);
  }
  if (p.family.delta) {
    in.beta.resize(t * hv);
    for (auto& x : in.beta) x = unit(rng);
  }
  const int64_t n = p.lengths.size();
  in.states.resize(n * hv * kd * vd);
  for (auto& x : in.states) x = 0.5f * sym(rng);
  if (p.family.normalize) {
    in.normalizers.resize(n * hv * kd);
    for (auto& x : in.normalizers) x = unit(rng);
  }
  return in;
}

// The recurrence of docs/spec.md §2, token by token, in float64; heads on all host threads.
Results Reference(const Problem& p, const Inputs& in) {
  const int64_t h = p.heads, hv = p.value_heads, kd = p.key_dim, vd = p.value_dim;
  const int64_t n = p.lengths.size();
  Results r;
  r.o.assign(static_cast<size_t>(in.tokens) * hv * vd, 0.0);
  r.states.assign(in.states.begin(), in.states.end());
  r.normalizers.assign(in.normalizers.begin(), in.normalizers.end());
  auto run_head = [&](int64_t seq, int64_t head) {
    double* s = r.states.data() + (seq * hv + head) * kd * vd;
    double* z = p.family.normalize ? r.normalizers.data() + (seq * hv + head) * kd : nullptr;
    const int64_t qk_head = head / (hv / h);
    std::vector<double> decay(kd, 1.0), u(vd), out(vd);
    for (int64_t t = in.cu_seqlens[seq]; t < in.cu_seqlens[seq + 1]; ++t) {
      const float* q = in.q.data() + (t * h + qk_head) * kd;
      const float* k = in.k.data() + (t * h + qk_head) * kd;
      const float* v = in.v.data() + (t * hv + head) * vd;
      if (p.family.decay == GateKind::kScalar) {
        std::fill(decay.begin(), decay.end(), std::exp(double(in.g[t * hv + head])));
      } else if (p.family.decay == GateKind::kPerChannel) {
        for (int64_t i = 0; i < kd; ++i) decay[i] = std::exp(double(in.g[(t * hv + head) * kd + i]));
      }
      for (int64_t i = 0; i < kd; ++i) {
        for (int64_t j = 0; j < vd; ++j) s[i * vd + j] *= decay[i];
      }
      if (p.family.delta) {
        const double beta = in.beta[t * hv + head];
        for (int64_t j = 0; j < vd; ++j) u[j] = v[j];
        for (int64_t i = 0; i < kd; ++i) {
          for (int64_t j = 0; j < vd; ++j) u[j] -= s[i * vd + j] * k[i];
        }
        for (int64_t j = 0; j < vd; ++j) u[j] *= beta;
      } else {
        for (int64_t j = 0; j < vd; ++j) u[j] = v[j];
      }
      std::fill(out.begin(), out.end(), 0.0);
      for (int64_t i = 0; i < kd; ++i) {
        const double ki = k[i], qi = q[i];
        double* row = s + i * vd;
        for (int64_t j = 0; j < vd; ++j) {
          row[j] += ki * u[j];
          out[j] += row[j] * qi;
        }
      }
      double den = 1.0;
      if (z) {
        den = 1e-6;
        for (int64_t i = 0; i < kd; ++i) {
          z[i] += k[i];
          den += q[i] * z[i];
        }
      }
      for (int64_t j = 0; j < vd; ++j) r.o[(t * hv + head) * vd + j] = out[j] / den;
    }
  };
  const int64_t tasks = n * hv;
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (int w = 0; w < threads; ++w) {
    pool.emplace_back([&, w] {
      for (int64_t task = w; task < tasks; task += threads) run_head(task / hv, task % hv);
    });
  }
  for (auto& th : pool) th.join();
  return r;
}

template <typename T>
T* ToDevice(const std::vector<T>& host) {
  if (host.empty()) return nullptr;
  T* device = nullptr;
  CHECK_CUDA(cudaMalloc(&device, host.size() * sizeof(T)));
  CHECK_CUDA(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return device;
}

// Device copies of one problem's inputs; state blocks in reverse order, as a pool scatters them.
struct DeviceProblem {
  float *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr, *o = nullptr;
  float *states = nullptr, *normalizers = nullptr;
  float** state_ptrs = nullptr;
  float** normalizer_ptrs = nullptr;
  int32_t* cu_seqlens = nullptr;
  void* scratch = nullptr;
  int64_t scratch_bytes = 0;

  DeviceProblem(const Problem& p, const Inputs& in) {
    q = ToDevice(in.q);
    k = ToDevice(in.k);
    v = ToDevice(in.v);
    g = ToDevice(in.g);
    beta = ToDevice(in.beta);
    const size_t o_count = static_cast<size_t>(in.tokens) * p.value_heads * p.value_dim;
    CHECK_CUDA(cudaMalloc(&o, std::max<size_t>(1, o_count) * sizeof(float)));
    const int n = p.lengths.size();
    const int64_t state_size = int64_t{p.value_heads} * p.key_dim * p.value_dim;
    const int64_t norm_size = int64_t{p.value_heads} * p.key_dim;
    CHECK_CUDA(cudaMalloc(&states, std::max<int64_t>(1, n * state_size) * sizeof(float)));
    std::vector<float*> sp(n), np(n);
    for (int i = 0; i < n; ++i) sp[i] = states + (n - 1 - i) * state_size;
    state_ptrs = ToDevice(sp);
    if (p.family.normalize) {
      CHECK_CUDA(cudaMalloc(&normalizers, n * norm_size * sizeof(float)));
      for (int i = 0; i < n; ++i) np[i] = normalizers + (n - 1 - i) * norm_size;
      normalizer_ptrs = ToDevice(np);
    }
    cu_seqlens = ToDevice(in.cu_seqlens);
    Reset(p, in);
  }

  // Initial states back in place and the output poisoned with NaN.
  void Reset(const Problem& p, const Inputs& in) {
    const int n = p.lengths.size();
    const int64_t state_size = int64_t{p.value_heads} * p.key_dim * p.value_dim;
    const int64_t norm_size = int64_t{p.value_heads} * p.key_dim;
    for (int i = 0; i < n; ++i) {
      CHECK_CUDA(cudaMemcpy(states + (n - 1 - i) * state_size, in.states.data() + i * state_size,
                            state_size * sizeof(float), cudaMemcpyHostToDevice));
      if (p.family.normalize) {
        CHECK_CUDA(cudaMemcpy(normalizers + (n - 1 - i) * norm_size,
                              in.normalizers.data() + i * norm_size, norm_size * sizeof(float),
                              cudaMemcpyHostToDevice));
      }
    }
    const size_t o_count = static_cast<size_t>(in.tokens) * p.value_heads * p.value_dim;
    CHECK_CUDA(cudaMemset(o, 0xFF, std::max<size_t>(1, o_count) * sizeof(float)));
  }

  ChunkwiseArgs Args(const Problem& p, const Inputs& in) const {
    ChunkwiseArgs a;
    a.q = q;
    a.k = k;
    a.v = v;
    a.log_decay = g;
    a.beta = beta;
    a.o = o;
    a.states = state_ptrs;
    a.normalizers = normalizer_ptrs;
    a.cu_seqlens = cu_seqlens;
    a.num_sequences = p.lengths.size();
    a.max_seqlen = p.lengths.empty() ? 0 : *std::max_element(p.lengths.begin(), p.lengths.end());
    a.num_heads = p.heads;
    a.num_value_heads = p.value_heads;
    a.key_dim = p.key_dim;
    a.value_dim = p.value_dim;
    a.decay = p.family.decay;
    a.delta_rule = p.family.delta;
    a.normalize = p.family.normalize;
    return a;
  }

  void EnsureScratch(int64_t bytes) {
    if (bytes <= scratch_bytes) return;
    if (scratch) CHECK_CUDA(cudaFree(scratch));
    CHECK_CUDA(cudaMalloc(&scratch, bytes));
    scratch_bytes = bytes;
  }

  // One call over everything, or (p.splits) one call per piece of the single sequence.
  void Run(const Problem& p, const Inputs& in, cudaStream_t stream) {
    ChunkwiseArgs a = Args(p, in);
    if (p.splits.empty()) {
      EnsureScratch(lumen::cuda::ChunkwiseScratchBytes(a));
      CHECK_CUDA(lumen::cuda::LaunchChunkwise(a, scratch, stream));
      return;
    }
    std::vector<int> cuts = p.splits;
    cuts.insert(cuts.begin(), 0);
    cuts.push_back(in.tokens);
    const int64_t h = p.heads, hv = p.value_heads;
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      const int begin = cuts[c], length = cuts[c + 1] - cuts[c];
      ChunkwiseArgs piece = a;
      piece.q = q + begin * h * p.key_dim;
      piece.k = k + begin * h * p.key_dim;
      piece.v = v + begin * hv * p.value_dim;
      if (g) piece.log_decay = g + begin * hv * (p.family.decay == GateKind::kPerChannel ? p.key_dim : 1);
      if (beta) piece.beta = beta + begin * hv;
      piece.o = o + begin * hv * p.value_dim;
      piece.max_seqlen = length;
      const std::vector<int32_t> offsets = {0, length};
      int32_t* piece_offsets = ToDevice(offsets);
      piece.cu_seqlens = piece_offsets;
      EnsureScratch(lumen::cuda::ChunkwiseScratchBytes(piece));
      CHECK_CUDA(lumen::cuda::LaunchChunkwise(piece, scratch, stream));
      CHECK_CUDA(cudaStreamSynchronize(stream));
      CHECK_CUDA(cudaFree(piece_offsets));
    }
  }

  ~DeviceProblem() {
    for (void* ptr : {static_cast<void*>(q), static_cast<void*>(k), static_cast<void*>(v),
                      static_cast<void*>(g), static_cast<void*>(beta), static_cast<void*>(o),
                      static_cast<void*>(states), static_cast<void*>(normalizers),
                      static_cast<void*>(state_ptrs), static_cast<void*>(normalizer_ptrs),
                      static_cast<void*>(cu_seqlens), scratch}) {
      if (ptr) cudaFree(ptr);
    }
  }
};

struct Error {
  double relative_rms = 0.0;
  double max_abs = 0.0;
  int64_t non_finite = 0;
  bool Pass() const { return non_finite == 0 && (relative_rms <= 1e-4 || max_abs <= 1e-6); }
};

Error Compare(const std::vector<float>& got, const std::vector<double>& want) {
  Error e;
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++e.non_finite;
      continue;
    }
    const double d = got[i] - want[i];
    diff += d * d;
    norm += want[i] * want[i];
    e.max_abs = std::max(e.max_abs, std::abs(d));
  }
  e.relative_rms = norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  return e;
}

std::vector<float> FromDevice(const float* device, size_t count) {
  std::vector<float> host(count);
  if (count) CHECK_CUDA(cudaMemcpy(host.data(), device, count * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

// Reads back the states in sequence order (they sit in reverse order on the device).
std::vector<float> StatesInOrder(const float* device, int n, int64_t size) {
  std::vector<float> all = FromDevice(device, n * size), ordered(all.size());
  for (int i = 0; i < n; ++i) {
    std::copy(all.begin() + (n - 1 - i) * size, all.begin() + (n - i) * size,
              ordered.begin() + i * size);
  }
  return ordered;
}

std::string Format(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

int g_checks = 0;
int g_failures = 0;

std::string Describe(const Problem& p) {
  char text[256];
  std::snprintf(text, sizeof(text), "%-16s H=%d HV=%d K=%d V=%d seqs=%zu", p.family.name,
                p.heads, p.value_heads, p.key_dim, p.value_dim, p.lengths.size());
  std::string s = text;
  int total = 0;
  for (int n : p.lengths) total += n;
  s += " T=" + std::to_string(total);
  if (!p.splits.empty()) {
    s += " split@";
    for (int c : p.splits) s += std::to_string(c) + ",";
  }
  if (p.decay_strength != 0.5f) s += " g>=-" + std::to_string(p.decay_strength).substr(0, 4);
  return s;
}

void Check(const Problem& p, std::mt19937_64& rng, cudaStream_t stream) {
  const Inputs in = MakeInputs(p, rng);
  DeviceProblem d(p, in);
  d.Run(p, in, stream);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaGetLastError());
  const Results want = Reference(p, in);
  const int n = p.lengths.size();
  const Error eo = Compare(FromDevice(d.o, want.o.size()), want.o);
  const Error es =
      Compare(StatesInOrder(d.states, n, int64_t{p.value_heads} * p.key_dim * p.value_dim),
              want.states);
  Error ez;
  if (p.family.normalize) {
    ez = Compare(StatesInOrder(d.normalizers, n, int64_t{p.value_heads} * p.key_dim),
                 want.normalizers);
  }
  const bool pass = eo.Pass() && es.Pass() && ez.Pass();
  ++g_checks;
  if (!pass) ++g_failures;
  std::printf("%s %s | o rms %.1e max %.1e nan %lld | S rms %.1e max %.1e nan %lld%s\n",
              pass ? "PASS" : "FAIL", Describe(p).c_str(), eo.relative_rms, eo.max_abs,
              static_cast<long long>(eo.non_finite), es.relative_rms, es.max_abs,
              static_cast<long long>(es.non_finite),
              p.family.normalize ? Format(" | z rms %.1e", ez.relative_rms).c_str() : "");
  std::fflush(stdout);
}

// MostChunkwiseScratchBytes against the most ChunkwiseScratchBytes over every sequence count
// it covers, for every family at shapes whose unit of scratch is small and large against the
// budget (so that the count crosses the units the budget holds), and lengths of one chunk to
// many. Host code only: it reads the shapes.
void CheckMostScratch() {
  for (const Family& f : kFamilies) {
    for (auto [value_heads, dim] : {std::pair{1, 8}, {4, 64}, {32, 128}, {64, 256}}) {
      for (int32_t length : {1, 64, 1000, 65536}) {
        ChunkwiseArgs a{};
        a.num_heads = 1;
        a.num_value_heads = value_heads;
        a.key_dim = a.value_dim = dim;
        a.decay = f.decay;
        a.delta_rule = f.delta;
        a.normalize = f.normalize;
        a.max_seqlen = length;
        a = lumen::cuda::SizingArgs(a);
        int64_t most = 0;
        bool pass = true;
        for (int32_t n = 1; n <= 3000; ++n) {
          a.num_sequences = n;
          most = std::max(most, lumen::cuda::ChunkwiseScratchBytes(a));
          if (n % 97 == 1 || n == 3000) {
            pass = pass && lumen::cuda::MostChunkwiseScratchBytes(a) == most;
          }
        }
        ++g_checks;
        if (!pass) ++g_failures;
        std::printf("%s most scratch %-16s HV=%d K=V=%d T=%d: %lld bytes, up to 3000 sequences\n",
                    pass ? "PASS" : "FAIL", f.name, value_heads, dim, length,
                    static_cast<long long>(most));
      }
    }
  }
  std::fflush(stdout);
}

// The same kind of call captured in a CUDA graph and replayed: the launch neither
// allocates nor synchronises, and the replay computes what a direct call does.
void CheckGraphReplay(const Problem& p, std::mt19937_64& rng, cudaStream_t stream) {
  const Inputs in = MakeInputs(p, rng);
  DeviceProblem d(p, in);
  const ChunkwiseArgs a = d.Args(p, in);
  d.EnsureScratch(lumen::cuda::ChunkwiseScratchBytes(a));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  cudaGraph_t graph = nullptr;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const cudaError_t launch = lumen::cuda::LaunchChunkwise(a, d.scratch, stream);
  const cudaError_t capture = cudaStreamEndCapture(stream, &graph);
  bool pass = launch == cudaSuccess && capture == cudaSuccess;
  Error eo, es;
  if (pass) {
    cudaGraphExec_t exec = nullptr;
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    CHECK_CUDA(cudaGraphLaunch(exec, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    CHECK_CUDA(cudaGraphExecDestroy(exec));
    const Results want = Reference(p, in);
    eo = Compare(FromDevice(d.o, want.o.size()), want.o);
    es = Compare(StatesInOrder(d.states, p.lengths.size(),
                               int64_t{p.value_heads} * p.key_dim * p.value_dim),
                 want.states);
    pass = eo.Pass() && es.Pass();
  }
  if (graph) CHECK_CUDA(cudaGraphDestroy(graph));
  cudaGetLastError();  // a refused capture leaves its error behind
  ++g_checks;
  if (!pass) ++g_failures;
  std::printf("%s graph replay: %s | launch %s, capture %s | o rms %.1e nan %lld | S rms %.1e\n",
              pass ? "PASS" : "FAIL", Describe(p).c_str(), cudaGetErrorString(launch),
              cudaGetErrorString(capture), eo.relative_rms,
              static_cast<long long>(eo.non_finite), es.relative_rms);
  std::fflush(stdout);
}

// FLOPs of the chunkwise algorithm (2 per multiply-add, triangular products counted half).
double ChunkwiseFlops(const Family& f, int64_t tokens, int64_t hv, int64_t kd, int64_t vd) {
  const double c = 64.0;
  double per_token = c * kd / 2 + kd * vd + c * vd / 2 + kd * vd;  // P, Q S0, P U, state
  if (f.delta) per_token += c * kd / 2 + c * kd / 2 + c * vd / 2 + kd * vd;  // A, W, U, W S0
  return 2.0 * per_token * tokens * hv;
}

void Benchmark(const Family& f, std::mt19937_64& rng, cudaStream_t stream, double copy_tbps,
               bool check) {
  Problem p{f, 32, 32, 128, 128, {8192, 8192, 8192, 8192}};
  const Inputs in = MakeInputs(p, rng);
  DeviceProblem d(p, in);
  // First run checked against the reference, then timed.
  d.Run(p, in, stream);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  Error eo, es;
  if (check) {
    const Results want = Reference(p, in);
    eo = Compare(FromDevice(d.o, want.o.size()), want.o);
    es = Compare(StatesInOrder(d.states, 4, int64_t{32} * 128 * 128), want.states);
    ++g_checks;
    if (!eo.Pass() || !es.Pass()) ++g_failures;
  }
  const char* verdict = !check ? "unchecked" : eo.Pass() && es.Pass() ? "PASS" : "FAIL";
  const ChunkwiseArgs a = d.Args(p, in);
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int i = 0; i < 12; ++i) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    CHECK_CUDA(lumen::cuda::LaunchChunkwise(a, d.scratch, stream));
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (i >= 2) times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  const double ms = times[times.size() / 2];
  const double tflops = ChunkwiseFlops(f, 4 * 8192, 32, 128, 128) / (ms * 1e-3) / 1e12;
  // Fewest bytes: q, k, v, o, the gate and beta once, the states read and written once.
  double bytes = 4.0 * 4 * 8192 * 32 * (128 * 3 + 128);
  if (f.decay == GateKind::kScalar) bytes += 4.0 * 4 * 8192 * 32;
  if (f.decay == GateKind::kPerChannel) bytes += 4.0 * 4 * 8192 * 32 * 128;
  if (f.delta) bytes += 4.0 * 4 * 8192 * 32;
  bytes += 2 * 4.0 * 4 * 32 * 128 * 128;
  char ref[64] = "      -";
  if (f.reference_ms > 0) std::snprintf(ref, sizeof(ref), "%5.2f ms (x%.2f)", f.reference_ms, ms / f.reference_ms);
  std::printf("BENCH %-16s B=4 T=8192 HV=32 K=V=128: %7.3f ms  %5.1f TFLOP/s  bytes at copy rate %.3f ms  fla %s  [%s o rms %.1e S rms %.1e]\n",
              f.name, ms, tflops, bytes / (copy_tbps * 1e12) * 1e3, ref, verdict,
              eo.relative_rms, es.relative_rms);
  std::fflush(stdout);
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
}

// Device-to-device copy bandwidth, bytes read plus written, the anchor of the timings.
double CopyBandwidthTbps(cudaStream_t stream) {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  CHECK_CUDA(cudaMalloc(&a, bytes));
  CHECK_CUDA(cudaMalloc(&b, bytes));
  CHECK_CUDA(cudaMemset(a, 1, bytes));
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int i = 0; i < 12; ++i) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (i >= 2) times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  const double ms = times[times.size() / 2];
  CHECK_CUDA(cudaFree(a));
  CHECK_CUDA(cudaFree(b));
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  return 2.0 * bytes / (ms * 1e-3) / 1e12;
}

// Which checks run: the quick ones, the large ones (200 sequences, T = 65536), or both.
struct CheckSet {
  bool quick = true;
  bool large = true;
  std::string family;  // the T = 65536 checks for this family alone (empty: every family)
};

void RunChecks(const CheckSet& set, std::mt19937_64& rng, cudaStream_t stream);

}  // namespace

int main(int argc, char** argv) {
  bool bench = true, checks = true, bench_check = true;
  CheckSet set;
  std::string only;  // benchmark this family alone
  uint64_t seed = std::random_device{}();
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) set.large = false;
    else if (!std::strcmp(argv[i], "--large-only")) set.quick = false;
    else if (!std::strcmp(argv[i], "--no-bench")) bench = false;
    else if (!std::strcmp(argv[i], "--bench-only")) checks = false;
    else if (!std::strcmp(argv[i], "--no-bench-check")) bench_check = false;
    else if (!std::strcmp(argv[i], "--family") && i + 1 < argc) only = argv[++i];
    else if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
  }
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));

  set.family = only;
  if (checks) RunChecks(set, rng, stream);
  if (bench) {
    const double copy = CopyBandwidthTbps(stream);
    std::printf("BENCH device-to-device copy: %.2f TB/s (read + write)\n", copy);
    for (const Family& f : kFamilies) {
      if (only.empty() || only == f.name) Benchmark(f, rng, stream, copy, bench_check);
    }
  }
  std::printf("%d of %d checks passed\n", g_checks - g_failures, g_checks);
  CHECK_CUDA(cudaStreamDestroy(stream));
  return g_failures == 0 ? 0 : 1;
}

namespace {

void RunQuickChecks(std::mt19937_64& rng, cudaStream_t stream) {
  // Every family at odd sizes: grouped value heads, empty sequences, chunk-boundary lengths.
  const std::vector<std::pair<int, int>> dims = {{1, 1},    {19, 19},  {64, 64},  {65, 65},
                                                 {128, 128}, {130, 130}, {256, 256}, {19, 130},
                                                 {130, 19},  {256, 1},   {1, 256}};
  const std::vector<int> lengths = {0, 1, 63, 64, 65, 130, 0, 200};
  for (const Family& f : kFamilies) {
    for (auto [kd, vd] : dims) Check({f, 2, 4, kd, vd, lengths}, rng, stream);
  }
  // Splits anywhere, including inside chunks: the state carries the whole history.
  for (const Family& f : kFamilies) {
    Check({f, 1, 2, 65, 33, {300}, 0.5f, {37, 38, 101, 229}}, rng, stream);
  }
  // Strong decays: per-channel and scalar gates far beyond exp's fp32 range within a chunk.
  for (const char* name : {"gla", "kda", "ssd", "gated_delta_net"}) {
    for (float strength : {5.0f, 40.0f}) {
      Check({FamilyNamed(name), 2, 2, 64, 64, {0, 150, 64, 7}, strength}, rng, stream);
    }
  }
  // No tokens at all: nothing runs, nothing changes.
  Check({FamilyNamed("kda"), 1, 1, 8, 8, {0, 0}}, rng, stream);
  // The reservation's sizing.
  CheckMostScratch();
  // Captured in a CUDA graph and replayed.
  CheckGraphReplay({FamilyNamed("gated_delta_net"), 4, 8, 128, 128, {0, 3000, 70}}, rng, stream);
}

void RunLargeChecks(const std::string& family, std::mt19937_64& rng, cudaStream_t stream) {
  // Many sequences: the scratch window takes several rounds of sequence groups.
  std::vector<int> many(200);
  std::uniform_int_distribution<int> len(0, 300);
  for (int& n : many) n = len(rng);
  Check({FamilyNamed("gated_delta_net"), 16, 32, 128, 128, many}, rng, stream);
  Check({FamilyNamed("linear_attn+norm"), 16, 32, 128, 128, many}, rng, stream);
  // Long prefills: T = 65536 at HV = 32, K = V = 128, one sequence, several rounds of chunks.
  for (const Family& f : kFamilies) {
    if (family.empty() || family == f.name) Check({f, 16, 32, 128, 128, {65536}}, rng, stream);
  }
}

void RunChecks(const CheckSet& set, std::mt19937_64& rng, cudaStream_t stream) {
  if (set.quick) RunQuickChecks(rng, stream);
  if (set.large) RunLargeChecks(set.family, rng, stream);
}

}  // namespace
