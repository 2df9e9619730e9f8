// Snapshot throughput against its anchors, in one run:
//
//   memcpy           the same number of bytes between two warm buffers (the anchor for memory)
//   xxh3             XXH3-64 over the snapshot (what restore verifies before it copies; shown
//                    to explain restore, compared with memcpy)
//   snapshot         lumen_session_snapshot into a warm buffer (fp32)
//   restore          lumen_session_restore from that buffer
//   snapshot bf16    lumen_session_snapshot with state_dtype BFLOAT16
//   restore bf16     lumen_session_restore from the bf16 snapshot
//   write+fsync      open, write, fsync, close of the same bytes (the anchor for files)
//   save             lumen_session_save (temporary file, fsync, rename, directory fsync)
//   read             open, read, close of the saved file (the anchor for loading)
//   load             lumen_session_load
//
// The session is realistic: 4 gated_delta_net layers, H=16, HV=32, K=V=128, i.e. 8 MiB of
// fp32 state. Each operation runs N times (default 20) after a warm-up; the table shows the
// best and the median time, GB/s (10^9 bytes of fp32 state per second, so bf16 rows count
// the state they carry, not the bytes they write) and the ratio of throughput to the anchor.
//
//   lumen_snapshot_benchmark [--dir DIR] [--reps N] [--layers L]
//
// Not a test: it asserts nothing beyond every call succeeding.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "lumen/lumen.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace {

void Check(lumen_status status, const char* what) {
  if (status != LUMEN_OK) {
    std::fprintf(stderr, "%s: %s: %s\n", what, lumen_status_string(status),
                 lumen_last_error_message());
    std::exit(1);
  }
}

void CheckSys(bool ok, const char* what, const std::string& path) {
  if (!ok) {
    std::perror((std::string(what) + " " + path).c_str());
    std::exit(1);
  }
}

struct Timing {
  std::string name;
  double best_s = 0, median_s = 0;
  std::string anchor;  // row whose throughput this one is compared with ("" for anchors)
};

// Runs `body` once to warm up, then `reps` times; best and median seconds.
Timing Measure(const std::string& name, int reps, const std::function<void()>& body,
               const std::string& anchor = "") {
  body();
  std::vector<double> seconds;
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    body();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  Timing t;
  t.name = name;
  t.best_s = seconds.front();
  t.median_s = seconds[seconds.size() / 2];
  t.anchor = anchor;
  return t;
}

void WriteAndSync(const std::string& path, const void* data, size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CheckSys(fd >= 0, "open", path);
  const char* p = static_cast<const char*>(data);
  size_t left = size;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    CheckSys(n > 0, "write", path);
    p += n;
    left -= static_cast<size_t>(n);
  }
  CheckSys(::fsync(fd) == 0, "fsync", path);
  CheckSys(::close(fd) == 0, "close", path);
}

void ReadAll(const std::string& path, void* data, size_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  CheckSys(fd >= 0, "open", path);
  char* p = static_cast<char*>(data);
  size_t left = size;
  while (left > 0) {
    const ssize_t n = ::read(fd, p, left);
    CheckSys(n > 0, "read", path);
    p += n;
    left -= static_cast<size_t>(n);
  }
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = std::filesystem::temp_directory_path().string();
  int reps = 20;
  int32_t num_layers = 4;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (arg == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--layers" && i + 1 < argc) {
      num_layers = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--dir DIR] [--reps N] [--layers L]\n", argv[0]);
      return 2;
    }
  }

  // The model: gated_delta_net as in Qwen3-Next.
  const int32_t H = 16, HV = 32, K = 128, V = 128;
  lumen_model_builder* builder = nullptr;
  Check(lumen_model_builder_create(&builder), "builder");
  std::vector<float> a_log(HV), dt_bias(HV);
  for (int32_t h = 0; h < HV; ++h) {
    a_log[h] = 0.1f * h;
    dt_bias[h] = 0.01f * h;
  }
  for (int32_t l = 0; l < num_layers; ++l) {
    lumen_layer_options o;
    lumen_layer_options_init(&o);
    o.family = LUMEN_FAMILY_GATED_DELTA_NET;
    o.num_heads = H;
    o.num_value_heads = HV;
    o.key_dim = K;
    o.value_dim = V;
    o.gate_raw = 1;
    o.qk_l2norm = 1;
    o.beta_sigmoid = 1;
    Check(lumen_model_builder_add_layer(builder, &o, nullptr), "add layer");
    Check(lumen_model_builder_set_param(builder, l, LUMEN_PARAM_A_LOG, a_log.data(), HV), "A_log");
    Check(lumen_model_builder_set_param(builder, l, LUMEN_PARAM_DT_BIAS, dt_bias.data(), HV),
          "dt_bias");
  }
  lumen_model* model = nullptr;
  Check(lumen_model_builder_build(builder, &model), "build");
  lumen_model_builder_destroy(builder);
  lumen_engine* engine = nullptr;
  Check(lumen_engine_create(model, nullptr, &engine), "engine");
  lumen_session* session = nullptr;
  lumen_session* target = nullptr;
  Check(lumen_session_create(engine, &session), "session");
  Check(lumen_session_create(engine, &target), "session");

  // Random state (the copy does not care, but nothing is all zeros by accident).
  int64_t matrix_count = 0, state_bytes = 0;
  Check(lumen_model_state_count(model, 0, LUMEN_STATE_MATRIX, &matrix_count), "count");
  Check(lumen_model_state_bytes(model, -1, &state_bytes), "bytes");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  std::vector<float> values(static_cast<size_t>(matrix_count));
  for (int32_t l = 0; l < num_layers; ++l) {
    for (float& x : values) x = normal(rng);
    Check(lumen_session_write_state(session, l, LUMEN_STATE_MATRIX, values.data(), matrix_count),
          "write state");
  }

  lumen_snapshot_options fp32, bf16;
  lumen_snapshot_options_init(&fp32);
  lumen_snapshot_options_init(&bf16);
  bf16.state_dtype = LUMEN_DTYPE_BFLOAT16;
  int64_t size = 0, size_bf16 = 0;
  Check(lumen_session_snapshot_size(session, &fp32, &size), "size");
  Check(lumen_session_snapshot_size(session, &bf16, &size_bf16), "size");

  // Warm buffers: written once before timing so no page faults are measured.
  std::vector<char> src(static_cast<size_t>(state_bytes), 1);
  std::vector<char> dst(static_cast<size_t>(state_bytes), 2);
  std::vector<char> snapshot(static_cast<size_t>(size), 3);
  std::vector<char> snapshot_bf16(static_cast<size_t>(size_bf16), 4);
  std::vector<char> file_buffer(static_cast<size_t>(size), 5);

  std::vector<Timing> rows;
  rows.push_back(Measure("memcpy", reps, [&] {
    std::memcpy(dst.data(), src.data(), src.size());
    asm volatile("" : : "r"(dst.data()) : "memory");
  }));
  volatile uint64_t sink = 0;
  rows.push_back(Measure("xxh3", reps, [&] {
    sink = sink + XXH3_64bits(snapshot.data(), snapshot.size());
  }, "memcpy"));
  rows.push_back(Measure("snapshot", reps, [&] {
    Check(lumen_session_snapshot(session, &fp32, snapshot.data(), size, nullptr), "snapshot");
  }, "memcpy"));
  rows.push_back(Measure("restore", reps, [&] {
    Check(lumen_session_restore(target, snapshot.data(), size), "restore");
  }, "memcpy"));
  rows.push_back(Measure("snapshot bf16", reps, [&] {
    Check(lumen_session_snapshot(session, &bf16, snapshot_bf16.data(), size_bf16, nullptr),
          "snapshot bf16");
  }, "memcpy"));
  rows.push_back(Measure("restore bf16", reps, [&] {
    Check(lumen_session_restore(target, snapshot_bf16.data(), size_bf16), "restore bf16");
  }, "memcpy"));

  const std::string anchor_path = dir + "/lumen_snapshot_benchmark.anchor";
  const std::string save_path = dir + "/lumen_snapshot_benchmark.lumen";
  rows.push_back(Measure("write+fsync", reps, [&] {
    WriteAndSync(anchor_path, snapshot.data(), snapshot.size());
  }));
  rows.push_back(Measure("save", reps, [&] {
    Check(lumen_session_save(session, save_path.c_str(), &fp32), "save");
  }, "write+fsync"));
  rows.push_back(Measure("read", reps, [&] {
    ReadAll(save_path, file_buffer.data(), file_buffer.size());
  }));
  rows.push_back(Measure("load", reps, [&] {
    Check(lumen_session_load(target, save_path.c_str()), "load");
  }, "read"));
  std::remove(anchor_path.c_str());
  std::remove(save_path.c_str());

  std::printf("lumen %s snapshot benchmark: %d gated_delta_net layers, H=%d HV=%d K=%d V=%d\n",
              lumen_version_string(), num_layers, H, HV, K, V);
  std::printf("state %.2f MiB fp32; snapshot %lld bytes (fp32), %lld bytes (bf16); best and "
              "median of %d; files in %s\n",
              state_bytes / 1048576.0, static_cast<long long>(size),
              static_cast<long long>(size_bf16), reps, dir.c_str());
  std::printf("GB/s counts 10^9 bytes of fp32 state per second; ratio = throughput / anchor's\n\n");
  std::printf("%-14s %10s %10s %9s %9s %-12s %8s %8s\n", "operation", "best ms", "median ms",
              "best GB/s", "med GB/s", "vs", "best", "median");
  auto find = [&](const std::string& name) -> const Timing& {
    for (const Timing& t : rows) {
      if (t.name == name) return t;
    }
    std::abort();
  };
  const double bytes = static_cast<double>(state_bytes);
  for (const Timing& t : rows) {
    std::printf("%-14s %10.3f %10.3f %9.2f %9.2f", t.name.c_str(), t.best_s * 1e3,
                t.median_s * 1e3, bytes / t.best_s / 1e9, bytes / t.median_s / 1e9);
    if (t.anchor.empty()) {
      std::printf(" %-12s %8s %8s\n", "(anchor)", "", "");
    } else {
      const Timing& a = find(t.anchor);
      std::printf(" %-12s %7.0f%% %7.0f%%\n", t.anchor.c_str(), 100.0 * a.best_s / t.best_s,
                  100.0 * a.median_s / t.median_s);
    }
  }

  lumen_session_destroy(target);
  lumen_session_destroy(session);
  lumen_engine_destroy(engine);
  lumen_model_destroy(model);
  return 0;
}
