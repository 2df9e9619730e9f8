#include "tests/reference/layer_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

namespace lumen_test {

// ---------------------------------------------------------------------------------------------
// RefLayer
// ---------------------------------------------------------------------------------------------

bool RefLayer::HasG() const {
  return family == LUMEN_FAMILY_SSD || family == LUMEN_FAMILY_GLA ||
         family == LUMEN_FAMILY_GATED_DELTA_NET || family == LUMEN_FAMILY_KDA;
}
bool RefLayer::VectorGate() const {
  return family == LUMEN_FAMILY_GLA || family == LUMEN_FAMILY_KDA;
}
bool RefLayer::HasBeta() const {
  return family == LUMEN_FAMILY_DELTA_NET || family == LUMEN_FAMILY_GATED_DELTA_NET ||
         family == LUMEN_FAMILY_KDA;
}
bool RefLayer::DeltaRule() const { return HasBeta(); }
bool RefLayer::HasNormalizer() const {
  return family == LUMEN_FAMILY_LINEAR_ATTN && normalize;
}
int64_t RefLayer::QPerToken() const { return int64_t{num_heads} * key_dim; }
int64_t RefLayer::VPerToken() const { return int64_t{num_value_heads} * value_dim; }
int64_t RefLayer::GPerToken() const {
  if (!HasG()) return 0;
  return VectorGate() ? int64_t{num_value_heads} * key_dim : num_value_heads;
}
int64_t RefLayer::BetaPerToken() const { return HasBeta() ? num_value_heads : 0; }
int64_t RefLayer::MatrixCount() const {
  return int64_t{num_value_heads} * key_dim * value_dim;
}
int64_t RefLayer::NormalizerCount() const {
  return HasNormalizer() ? int64_t{num_value_heads} * key_dim : 0;
}

int64_t RefLayer::ConvChannels(int part) const {
  return part == 2 ? int64_t{num_value_heads} * value_dim : int64_t{num_heads} * key_dim;
}
int64_t RefLayer::ConvCount(int part) const {
  return conv_size == 0 ? 0 : ConvChannels(part) * (conv_size - 1);
}

std::string RefLayer::Describe() const {
  static const char* const kNames[] = {"?",   "linear_attn", "retention",       "ssd",
                                       "gla", "delta_net",   "gated_delta_net", "kda"};
  std::ostringstream s;
  s << (family >= 1 && family <= 7 ? kNames[family] : "?") << " H=" << num_heads
    << " HV=" << num_value_heads << " K=" << key_dim << " V=" << value_dim;
  if (scale != 0.0f) s << " scale=" << scale;
  if (feature_map != 0) s << " feature_map=" << feature_map;
  if (normalize) s << " normalize";
  if (qk_l2norm) s << " qk_l2norm";
  if (beta_sigmoid) s << " beta_sigmoid";
  if (allow_neg_eigval) s << " allow_neg_eigval";
  if (gate_raw) s << " gate_raw";
  if (gate_lower_bound != 0.0f) s << " gate_lower_bound=" << gate_lower_bound;
  if (!decay.empty()) s << " decay=given";
  if (state_dtype != LUMEN_DTYPE_FLOAT32) s << " state_dtype=" << state_dtype;
  if (conv_size != 0) {
    s << " conv_size=" << conv_size
      << (conv_activation == LUMEN_CONV_ACTIVATION_SILU ? " silu" : " no-activation");
    if (!conv_bias[0].empty()) s << " conv_bias";
  }
  if (!d_skip.empty()) s << " D";
  return s.str();
}

RefState ZeroState(const RefLayer& layer) {
  RefState state;
  state.matrix.assign(layer.MatrixCount(), 0.0);
  state.normalizer.assign(layer.NormalizerCount(), 0.0);
  for (int part = 0; part < 3; ++part) state.conv[part].assign(layer.ConvCount(part), 0.0);
  return state;
}

// ---------------------------------------------------------------------------------------------
// The recurrence (docs/spec.md §2), one token and one value head at a time, in double.
// ---------------------------------------------------------------------------------------------

namespace {

double Softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// A raw gate's log-decay: -exp(A_log) softplus(g + dt_bias), or fla's lower-bounded gate
// (naive_kda_lowerbound_gate) bound * sigmoid(exp(A_log) (g + dt_bias)).
double RawGateLogDecay(const RefLayer& layer, double g, double a_log, double dt_bias) {
  if (layer.gate_lower_bound != 0.0f) {
    return double{layer.gate_lower_bound} * Sigmoid(std::exp(a_log) * (g + dt_bias));
  }
  return -std::exp(a_log) * Softplus(g + dt_bias);
}

double FeatureMap(int32_t map, double x) {
  switch (map) {
    case LUMEN_FEATURE_MAP_ELU1: return x > 0.0 ? x + 1.0 : std::exp(x);  // elu(x) + 1
    case LUMEN_FEATURE_MAP_RELU: return x > 0.0 ? x : 0.0;
    default: return x;
  }
}

void L2Normalize(std::vector<double>* x) {
  double sum = 0.0;
  for (double e : *x) sum += e * e;
  const double inv = 1.0 / std::sqrt(sum + 1e-6);
  for (double& e : *x) e *= inv;
}

// docs/spec.md §6 for one token of one part: y[c] = act(b[c] + sum_j w[c, j] x_{t-W+1+j}[c]),
// the window holding x_{t-W+1} .. x_{t-1}; then the window moves on by x_t.
void Convolve(const RefLayer& layer, int part, const double* x, std::vector<double>* window,
              double* y) {
  const int64_t W = layer.conv_size;
  const std::vector<float>& w = layer.conv_weight[part];
  const std::vector<float>& b = layer.conv_bias[part];
  for (int64_t c = 0; c < layer.ConvChannels(part); ++c) {
    double* past = window->data() + c * (W - 1);
    double acc = b.empty() ? 0.0 : double{b[c]};
    for (int64_t j = 0; j < W - 1; ++j) acc += double{w[c * W + j]} * past[j];
    acc += double{w[c * W + W - 1]} * x[c];
    y[c] = layer.conv_activation == LUMEN_CONV_ACTIVATION_SILU ? acc * Sigmoid(acc) : acc;
    for (int64_t j = 0; j + 1 < W - 1; ++j) past[j] = past[j + 1];
    if (W > 1) past[W - 2] = x[c];
  }
}

}  // namespace

void RunReference(const RefLayer& layer, int64_t num_tokens, const RefInputs& in,
                  RefState* state, std::vector<double>* o) {
  const int64_t H = layer.num_heads, HV = layer.num_value_heads;
  const int64_t K = layer.key_dim, V = layer.value_dim;
  const int64_t group = HV / H;  // value heads per q/k head
  const double scale =
      layer.scale != 0.0f ? double{layer.scale} : 1.0 / std::sqrt(static_cast<double>(K));
  const double eps = layer.normalize_eps != 0.0f ? double{layer.normalize_eps} : 1e-6;
  const bool linear_attn = layer.family == LUMEN_FAMILY_LINEAR_ATTN;

  std::vector<double> q(K), k(K), v(V), decay(K), u(V);
  // One token's q, k [H * K] and v [HV * V] after the convolution (the raw inputs without).
  std::vector<double> q_row(H * K), k_row(H * K), v_row(HV * V);
  o->reserve(o->size() + num_tokens * HV * V);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const double* raw[3] = {in.q.data() + t * H * K, in.k.data() + t * H * K,
                            in.v.data() + t * HV * V};
    std::vector<double>* rows[3] = {&q_row, &k_row, &v_row};
    for (int part = 0; part < 3; ++part) {
      if (layer.conv_size > 0) {
        Convolve(layer, part, raw[part], &state->conv[part], rows[part]->data());
      } else {
        std::copy(raw[part], raw[part] + rows[part]->size(), rows[part]->begin());
      }
    }
    for (int64_t hv = 0; hv < HV; ++hv) {
      const int64_t h = hv / group;
      for (int64_t i = 0; i < K; ++i) {
        q[i] = q_row[h * K + i];
        k[i] = k_row[h * K + i];
      }
      for (int64_t j = 0; j < V; ++j) v[j] = v_row[hv * V + j];
      if (layer.qk_l2norm) {
        L2Normalize(&q);
        L2Normalize(&k);
      }
      if (linear_attn) {
        for (int64_t i = 0; i < K; ++i) {
          q[i] = FeatureMap(layer.feature_map, q[i]);
          k[i] = FeatureMap(layer.feature_map, k[i]);
        }
      }
      for (int64_t i = 0; i < K; ++i) q[i] *= scale;

      // The multiplicative decay of each state row before this token's write, and what
      // scales the write (Mamba-2's dt).
      double write_scale = 1.0;
      switch (layer.family) {
        case LUMEN_FAMILY_RETENTION: {
          const double gamma = layer.decay.empty()
                                   ? 1.0 - std::ldexp(1.0, static_cast<int>(-5 - hv))
                                   : double{layer.decay[hv]};
          decay.assign(K, gamma);
          break;
        }
        case LUMEN_FAMILY_SSD:
        case LUMEN_FAMILY_GATED_DELTA_NET: {
          double g = in.g[t * HV + hv];
          if (layer.gate_raw) {
            const double dt = Softplus(g + double{layer.dt_bias[hv]});
            if (layer.family == LUMEN_FAMILY_SSD) write_scale = dt;
            g = RawGateLogDecay(layer, g, layer.a_log[hv], layer.dt_bias[hv]);
          }
          decay.assign(K, std::exp(g));
          break;
        }
        case LUMEN_FAMILY_GLA:
        case LUMEN_FAMILY_KDA:
          for (int64_t i = 0; i < K; ++i) {
            double g = in.g[(t * HV + hv) * K + i];
            if (layer.gate_raw) {
              g = RawGateLogDecay(layer, g, layer.a_log[hv], layer.dt_bias[hv * K + i]);
            }
            decay[i] = std::exp(g);
          }
          break;
        default:
          decay.assign(K, 1.0);
          break;
      }

      double* S = state->matrix.data() + hv * K * V;  // [K, V]
      for (int64_t i = 0; i < K; ++i) {
        for (int64_t j = 0; j < V; ++j) S[i * V + j] *= decay[i];
      }
      if (layer.DeltaRule()) {
        double beta = in.beta[t * HV + hv];
        // fla's allow_neg_eigval: beta = 2 * sigmoid(logit), or a given beta in [0, 2].
        if (layer.beta_sigmoid) beta = (layer.allow_neg_eigval ? 2.0 : 1.0) * Sigmoid(beta);
        // u = beta (v - S'^T k), read from the decayed state.
        for (int64_t j = 0; j < V; ++j) {
          double sk = 0.0;
          for (int64_t i = 0; i < K; ++i) sk += S[i * V + j] * k[i];
          u[j] = beta * (v[j] - sk);
        }
      } else {
        for (int64_t j = 0; j < V; ++j) u[j] = v[j] * write_scale;
      }
      for (int64_t i = 0; i < K; ++i) {
        for (int64_t j = 0; j < V; ++j) S[i * V + j] += k[i] * u[j];
      }

      double denominator = 1.0;
      if (layer.HasNormalizer()) {
        double* z = state->normalizer.data() + hv * K;
        double qz = 0.0;
        for (int64_t i = 0; i < K; ++i) {
          z[i] += k[i];
          qz += q[i] * z[i];
        }
        denominator = qz + eps;
      }
      for (int64_t j = 0; j < V; ++j) {
        double acc = 0.0;
        for (int64_t i = 0; i < K; ++i) acc += S[i * V + j] * q[i];
        const double skip = layer.d_skip.empty() ? 0.0 : double{layer.d_skip[hv]} * v[j];
        o->push_back(acc / denominator + skip);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Metric
// ---------------------------------------------------------------------------------------------

bool ErrorReport::Passes(double bound) const {
  if (non_finite != 0) return false;
  return rel_rms <= bound || max_abs <= 1e-6;
}

std::string ErrorReport::Describe() const {
  std::ostringstream s;
  s << "rel_rms=" << rel_rms << " max_abs=" << max_abs << " non_finite=" << non_finite
    << " of " << count;
  return s.str();
}

ErrorReport Measure(const float* out, const double* ref, int64_t count) {
  ErrorReport r;
  r.count = count;
  double diff2 = 0.0, ref2 = 0.0;
  for (int64_t i = 0; i < count; ++i) {
    const double x = out[i];
    if (!std::isfinite(x)) {
      ++r.non_finite;
      continue;
    }
    const double d = x - ref[i];
    diff2 += d * d;
    ref2 += ref[i] * ref[i];
    r.max_abs = std::max(r.max_abs, std::fabs(d));
  }
  if (r.non_finite != 0) {
    r.rel_rms = r.max_abs = std::numeric_limits<double>::infinity();
  } else if (ref2 > 0.0) {
    r.rel_rms = std::sqrt(diff2 / ref2);
  } else {
    r.rel_rms = diff2 > 0.0 ? std::numeric_limits<double>::infinity() : 0.0;
  }
  return r;
}

ErrorReport Measure(const std::vector<float>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) {
    ErrorReport r;
    r.count = static_cast<int64_t>(out.size());
    r.non_finite = -1;  // never passes
    r.rel_rms = r.max_abs = std::numeric_limits<double>::infinity();
    return r;
  }
  return Measure(out.data(), ref.data(), static_cast<int64_t>(out.size()));
}

// ---------------------------------------------------------------------------------------------
// bf16 / fp16
// ---------------------------------------------------------------------------------------------

namespace {
uint32_t Bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}
float FromBits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}
}  // namespace

uint16_t FloatToBf16(float x) {
  const uint32_t b = Bits(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40);  // NaN
  const uint32_t rounding = 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>((b + rounding) >> 16);
}

float Bf16ToFloat(uint16_t h) { return FromBits(uint32_t{h} << 16); }

uint16_t FloatToHalf(float x) {
  const uint32_t b = Bits(x);
  const uint32_t sign = (b >> 16) & 0x8000u;
  const uint32_t ax = b & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (ax < 0x38800000u) {  // |x| < 2^-14: subnormal half (or zero); units of 2^-24
    const float units = std::nearbyint(std::fabs(x) * 16777216.0f);  // exact scaling, RNE
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(units));
  }
  const uint32_t mantissa = ax & 0x7fffffu;
  const uint32_t exponent = (ax >> 23) - 127 + 15;
  uint32_t h = (exponent << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry bumps the exponent
  return static_cast<uint16_t>(sign | h);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (uint32_t{h} & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float v = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -v : v;
  }
  if (exponent == 31) return FromBits(sign | 0x7f800000u | (mantissa << 13));
  return FromBits(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

float RoundTo(float x, int32_t dtype) {
  switch (dtype) {
    case LUMEN_DTYPE_BFLOAT16: return Bf16ToFloat(FloatToBf16(x));
    case LUMEN_DTYPE_FLOAT16: return HalfToFloat(FloatToHalf(x));
    default: return x;
  }
}

std::vector<float> RoundAll(const std::vector<float>& x, int32_t dtype) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = RoundTo(x[i], dtype);
  return r;
}

int64_t DTypeBytes(int32_t dtype) { return dtype == LUMEN_DTYPE_FLOAT32 ? 4 : 2; }

std::vector<uint8_t> Encode(const std::vector<float>& x, int32_t dtype) {
  std::vector<uint8_t> bytes(x.size() * DTypeBytes(dtype));
  for (size_t i = 0; i < x.size(); ++i) {
    if (dtype == LUMEN_DTYPE_FLOAT32) {
      std::memcpy(bytes.data() + 4 * i, &x[i], 4);
    } else {
      const uint16_t h =
          dtype == LUMEN_DTYPE_BFLOAT16 ? FloatToBf16(x[i]) : FloatToHalf(x[i]);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  return bytes;
}

std::vector<float> Decode(const void* data, int64_t count, int32_t dtype) {
  std::vector<float> x(count);
  const uint8_t* p = static_cast<const uint8_t*>(data);
  for (int64_t i = 0; i < count; ++i) {
    if (dtype == LUMEN_DTYPE_FLOAT32) {
      std::memcpy(&x[i], p + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      x[i] = dtype == LUMEN_DTYPE_BFLOAT16 ? Bf16ToFloat(h) : HalfToFloat(h);
    }
  }
  return x;
}

std::vector<double> ToDouble(const std::vector<float>& x) {
  return std::vector<double>(x.begin(), x.end());
}

// ---------------------------------------------------------------------------------------------
// Random data
// ---------------------------------------------------------------------------------------------

namespace {
std::vector<float> Normal(int64_t n, double sigma, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, static_cast<float>(sigma));
  std::vector<float> x(n);
  for (float& e : x) e = d(rng);
  return x;
}
std::vector<float> Uniform(int64_t n, double lo, double hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(static_cast<float>(lo), static_cast<float>(hi));
  std::vector<float> x(n);
  for (float& e : x) e = d(rng);
  return x;
}
}  // namespace

TokenData RandomTokens(const RefLayer& layer, int64_t num_tokens, std::mt19937& rng) {
  TokenData d;
  d.num_tokens = num_tokens;
  d.q = Normal(num_tokens * layer.QPerToken(), 1.0, rng);
  d.k = Normal(num_tokens * layer.QPerToken(), 1.0, rng);
  d.v = Normal(num_tokens * layer.VPerToken(), 1.0, rng);
  if (layer.DeltaRule() && !layer.qk_l2norm) {
    const int64_t K = layer.key_dim;
    for (int64_t r = 0; r < num_tokens * layer.num_heads; ++r) {
      double sum = 0.0;
      for (int64_t i = 0; i < K; ++i) sum += double{d.k[r * K + i]} * d.k[r * K + i];
      const double inv = 1.0 / std::sqrt(sum);
      for (int64_t i = 0; i < K; ++i) d.k[r * K + i] = static_cast<float>(d.k[r * K + i] * inv);
    }
  }
  if (layer.HasG()) {
    const int64_t n = num_tokens * layer.GPerToken();
    if (layer.gate_raw) {
      d.g = Normal(n, 1.0, rng);
    } else {
      d.g = Uniform(n, 0.8, 1.0, rng);
      for (float& e : d.g) e = std::log(e);
    }
  }
  if (layer.HasBeta()) {
    const int64_t n = num_tokens * layer.BetaPerToken();
    d.beta = layer.beta_sigmoid       ? Normal(n, 1.5, rng)
             : layer.allow_neg_eigval ? Uniform(n, 0.05, 1.95, rng)
                                      : Uniform(n, 0.05, 0.95, rng);
  }
  return d;
}

void RandomState(const RefLayer& layer, std::mt19937& rng, std::vector<float>* matrix,
                 std::vector<float>* normalizer) {
  *matrix = Normal(layer.MatrixCount(), 0.3, rng);
  *normalizer = Uniform(layer.NormalizerCount(), 0.5, 2.0, rng);
}

void RandomParams(RefLayer* layer, std::mt19937& rng) {
  if (layer->conv_size > 0) {
    // PyTorch's Conv1d initialisation: U(-1/sqrt(W), 1/sqrt(W)) (fan-in W per channel).
    const double bound = 1.0 / std::sqrt(static_cast<double>(layer->conv_size));
    for (int part = 0; part < 3; ++part) {
      layer->conv_weight[part] =
          Uniform(layer->ConvChannels(part) * layer->conv_size, -bound, bound, rng);
      if (!layer->conv_bias[part].empty()) {
        layer->conv_bias[part] = Uniform(layer->ConvChannels(part), -bound, bound, rng);
      }
    }
  }
  if (!layer->d_skip.empty()) layer->d_skip = Uniform(layer->num_value_heads, 0.5, 1.5, rng);
  if (!layer->gate_raw) return;
  const int64_t HV = layer->num_value_heads;
  layer->a_log = Uniform(HV, 0.0, std::log(16.0), rng);  // A in [1, 16]
  const int64_t n = layer->family == LUMEN_FAMILY_KDA ? HV * layer->key_dim : HV;
  // dt_bias = softplus^-1(dt), dt in [0.001, 0.1] (Mamba-2's initialisation).
  layer->dt_bias = Uniform(n, 0.001, 0.1, rng);
  for (float& e : layer->dt_bias) e = static_cast<float>(std::log(std::expm1(double{e})));
}

void RandomConvState(const RefLayer& layer, std::mt19937& rng, std::vector<float> conv[3]) {
  for (int part = 0; part < 3; ++part) conv[part] = Normal(layer.ConvCount(part), 1.0, rng);
}

namespace {
std::vector<float> SliceRows(const std::vector<float>& x, int64_t per_token, int64_t t0,
                             int64_t n) {
  if (per_token == 0) return {};
  return std::vector<float>(x.begin() + t0 * per_token, x.begin() + (t0 + n) * per_token);
}
void AppendRows(std::vector<float>* to, const std::vector<float>& from) {
  to->insert(to->end(), from.begin(), from.end());
}
}  // namespace

TokenData Slice(const RefLayer& layer, const TokenData& data, int64_t t0, int64_t n) {
  TokenData s;
  s.num_tokens = n;
  s.q = SliceRows(data.q, layer.QPerToken(), t0, n);
  s.k = SliceRows(data.k, layer.QPerToken(), t0, n);
  s.v = SliceRows(data.v, layer.VPerToken(), t0, n);
  s.g = SliceRows(data.g, layer.GPerToken(), t0, n);
  s.beta = SliceRows(data.beta, layer.BetaPerToken(), t0, n);
  return s;
}

void Append(TokenData* to, const TokenData& from) {
  to->num_tokens += from.num_tokens;
  AppendRows(&to->q, from.q);
  AppendRows(&to->k, from.k);
  AppendRows(&to->v, from.v);
  AppendRows(&to->g, from.g);
  AppendRows(&to->beta, from.beta);
}

RefInputs ToRefInputs(const TokenData& data, int32_t dtype) {
  RefInputs in;
  in.q = ToDouble(RoundAll(data.q, dtype));
  in.k = ToDouble(RoundAll(data.k, dtype));
  in.v = ToDouble(RoundAll(data.v, dtype));
  in.g = ToDouble(RoundAll(data.g, dtype));
  in.beta = ToDouble(RoundAll(data.beta, dtype));
  return in;
}

// ---------------------------------------------------------------------------------------------
// C API glue
// ---------------------------------------------------------------------------------------------

lumen_layer_options ToOptions(const RefLayer& layer) {
  lumen_layer_options o;
  lumen_layer_options_init(&o);
  o.family = layer.family;
  o.num_heads = layer.num_heads;
  o.num_value_heads = layer.num_value_heads;
  o.key_dim = layer.key_dim;
  o.value_dim = layer.value_dim;
  o.scale = layer.scale;
  o.feature_map = layer.feature_map;
  o.normalize = layer.normalize ? 1 : 0;
  o.normalize_eps = layer.normalize_eps;
  o.qk_l2norm = layer.qk_l2norm ? 1 : 0;
  o.beta_sigmoid = layer.beta_sigmoid ? 1 : 0;
  o.allow_neg_eigval = layer.allow_neg_eigval ? 1 : 0;
  o.gate_raw = layer.gate_raw ? 1 : 0;
  o.gate_lower_bound = layer.gate_lower_bound;
  o.state_dtype = layer.state_dtype;
  o.conv_size = layer.conv_size;
  o.conv_activation = layer.conv_activation;
  return o;
}

std::string LastError(lumen_status status) {
  return std::string(lumen_status_string(status)) + ": " + lumen_last_error_message();
}

ModelPtr BuildModel(const std::vector<RefLayer>& layers, std::string* error) {
  lumen_model_builder* raw_builder = nullptr;
  lumen_status st = lumen_model_builder_create(&raw_builder);
  if (st != LUMEN_OK) {
    *error = "builder_create: " + LastError(st);
    return nullptr;
  }
  BuilderPtr builder(raw_builder);
  for (const RefLayer& layer : layers) {
    const lumen_layer_options options = ToOptions(layer);
    int32_t index = -1;
    st = lumen_model_builder_add_layer(builder.get(), &options, &index);
    if (st != LUMEN_OK) {
      *error = "add_layer(" + layer.Describe() + "): " + LastError(st);
      return nullptr;
    }
    const struct {
      lumen_param param;
      const std::vector<float>* values;
    } params[] = {{LUMEN_PARAM_A_LOG, &layer.a_log},
                  {LUMEN_PARAM_DT_BIAS, &layer.dt_bias},
                  {LUMEN_PARAM_DECAY, &layer.decay},
                  {LUMEN_PARAM_CONV_Q_WEIGHT, &layer.conv_weight[0]},
                  {LUMEN_PARAM_CONV_K_WEIGHT, &layer.conv_weight[1]},
                  {LUMEN_PARAM_CONV_V_WEIGHT, &layer.conv_weight[2]},
                  {LUMEN_PARAM_CONV_Q_BIAS, &layer.conv_bias[0]},
                  {LUMEN_PARAM_CONV_K_BIAS, &layer.conv_bias[1]},
                  {LUMEN_PARAM_CONV_V_BIAS, &layer.conv_bias[2]},
                  {LUMEN_PARAM_D, &layer.d_skip}};
    for (const auto& p : params) {
      if (p.values->empty()) continue;
      st = lumen_model_builder_set_param(builder.get(), index, p.param, p.values->data(),
                                         static_cast<int64_t>(p.values->size()));
      if (st != LUMEN_OK) {
        *error = "set_param(" + std::to_string(p.param) + "): " + LastError(st);
        return nullptr;
      }
    }
  }
  lumen_model* model = nullptr;
  st = lumen_model_builder_build(builder.get(), &model);
  if (st != LUMEN_OK) {
    *error = "build: " + LastError(st);
    return nullptr;
  }
  return ModelPtr(model);
}

int32_t TestBackend() {
  const char* name = std::getenv("LUMEN_TEST_BACKEND");
  if (name != nullptr && std::string(name) == "CUDA") return LUMEN_BACKEND_CUDA;
  return LUMEN_BACKEND_CPU;
}

EnginePtr MakeEngine(const lumen_model* model, int32_t num_threads, std::string* error) {
  lumen_engine_options options;
  lumen_engine_options_init(&options);
  options.backend = TestBackend();
  options.num_threads = num_threads;
  lumen_engine* engine = nullptr;
  const lumen_status st = lumen_engine_create(model, &options, &engine);
  if (st != LUMEN_OK) {
    *error = "engine_create: " + LastError(st);
    return nullptr;
  }
  return EnginePtr(engine);
}

SessionPtr MakeSession(lumen_engine* engine, std::string* error) {
  lumen_session* session = nullptr;
  const lumen_status st = lumen_session_create(engine, &session);
  if (st != LUMEN_OK) {
    *error = "session_create: " + LastError(st);
    return nullptr;
  }
  return SessionPtr(session);
}

EncodedTokens EncodeTokens(const TokenData& data, int32_t dtype) {
  EncodedTokens e;
  e.dtype = dtype;
  e.num_tokens = data.num_tokens;
  e.q = Encode(data.q, dtype);
  e.k = Encode(data.k, dtype);
  e.v = Encode(data.v, dtype);
  e.g = Encode(data.g, dtype);
  e.beta = Encode(data.beta, dtype);
  return e;
}

lumen_layer_inputs InputsFor(const RefLayer& layer, const EncodedTokens& tokens, int64_t t0,
                             int64_t n) {
  lumen_layer_inputs in;
  lumen_layer_inputs_init(&in);
  in.dtype = tokens.dtype;
  const int64_t esize = DTypeBytes(tokens.dtype);
  auto at = [&](const std::vector<uint8_t>& buffer, int64_t per_token) -> const void* {
    return per_token == 0 ? nullptr : buffer.data() + t0 * per_token * esize;
  };
  in.q = at(tokens.q, layer.QPerToken());
  in.q_count = n * layer.QPerToken();
  in.k = at(tokens.k, layer.QPerToken());
  in.k_count = n * layer.QPerToken();
  in.v = at(tokens.v, layer.VPerToken());
  in.v_count = n * layer.VPerToken();
  in.g = at(tokens.g, layer.GPerToken());
  in.g_count = n * layer.GPerToken();
  in.beta = at(tokens.beta, layer.BetaPerToken());
  in.beta_count = n * layer.BetaPerToken();
  return in;
}

void OutputBuffer::Reset(int64_t count, int32_t out_dtype) {
  dtype = out_dtype;
  const std::vector<float> nan(count, std::numeric_limits<float>::quiet_NaN());
  bytes = Encode(nan, dtype);
}

lumen_layer_output OutputBuffer::Output(int64_t t0_elements, int64_t count) {
  lumen_layer_output out;
  lumen_layer_output_init(&out);
  out.dtype = dtype;
  out.o = bytes.data() + t0_elements * DTypeBytes(dtype);
  out.o_count = count;
  return out;
}

std::vector<float> OutputBuffer::Values() const {
  return Decode(bytes.data(), static_cast<int64_t>(bytes.size()) / DTypeBytes(dtype), dtype);
}

lumen_status RunSession(lumen_session* session, int32_t layer_index, const RefLayer& layer,
                        const EncodedTokens& tokens, Path path,
                        const std::vector<int64_t>& splits, int32_t out_dtype,
                        OutputBuffer* out, std::string* error) {
  const int64_t T = tokens.num_tokens;
  const int64_t per_token = layer.VPerToken();
  out->Reset(T * per_token, out_dtype);
  std::vector<int64_t> calls;
  if (path == Path::kStep) {
    calls.assign(T, 1);
  } else if (splits.empty()) {
    calls.push_back(T);
  } else {
    calls = splits;
  }
  int64_t t0 = 0;
  for (int64_t n : calls) {
    const lumen_layer_inputs in = InputsFor(layer, tokens, t0, n);
    lumen_layer_output o = out->Output(t0 * per_token, n * per_token);
    const lumen_status st =
        path == Path::kStep
            ? lumen_session_step(session, layer_index, &in, &o)
            : lumen_session_prefill(session, layer_index, static_cast<int32_t>(n), &in, &o);
    if (st != LUMEN_OK) {
      *error = std::string(path == Path::kStep ? "step" : "prefill") + " at token " +
               std::to_string(t0) + " (n=" + std::to_string(n) + "): " + LastError(st);
      return st;
    }
    t0 += n;
  }
  if (t0 != T) {
    *error = "splits do not sum to T";
    return LUMEN_ERROR_INTERNAL;
  }
  return LUMEN_OK;
}

lumen_status ReadConvState(const lumen_session* session, int32_t layer_index,
                           const RefLayer& layer, std::vector<float> conv[3]) {
  for (int part = 0; part < 3; ++part) {
    conv[part].assign(layer.ConvCount(part), std::numeric_limits<float>::quiet_NaN());
    if (conv[part].empty()) continue;  // no convolution, or W = 1: no window
    const lumen_status st =
        lumen_session_read_state(session, layer_index, LUMEN_STATE_CONV_Q + part,
                                 conv[part].data(), layer.ConvCount(part));
    if (st != LUMEN_OK) return st;
  }
  return LUMEN_OK;
}

lumen_status WriteConvState(lumen_session* session, int32_t layer_index, const RefLayer& layer,
                            const std::vector<float> conv[3]) {
  for (int part = 0; part < 3 && layer.conv_size > 0; ++part) {
    if (conv[part].empty()) continue;  // W = 1: no window
    const lumen_status st =
        lumen_session_write_state(session, layer_index, LUMEN_STATE_CONV_Q + part,
                                  conv[part].data(), static_cast<int64_t>(conv[part].size()));
    if (st != LUMEN_OK) return st;
  }
  return LUMEN_OK;
}

lumen_status ReadState(const lumen_session* session, int32_t layer_index,
                       const RefLayer& layer, std::vector<float>* matrix,
                       std::vector<float>* normalizer) {
  matrix->assign(layer.MatrixCount(), std::numeric_limits<float>::quiet_NaN());
  normalizer->assign(layer.NormalizerCount(), std::numeric_limits<float>::quiet_NaN());
  lumen_status st = lumen_session_read_state(session, layer_index, LUMEN_STATE_MATRIX,
                                             matrix->data(), layer.MatrixCount());
  if (st != LUMEN_OK || !layer.HasNormalizer()) return st;
  return lumen_session_read_state(session, layer_index, LUMEN_STATE_NORMALIZER,
                                  normalizer->data(), layer.NormalizerCount());
}

lumen_status WriteState(lumen_session* session, int32_t layer_index, const RefLayer& layer,
                        const std::vector<float>& matrix, const std::vector<float>& normalizer) {
  lumen_status st = lumen_session_write_state(session, layer_index, LUMEN_STATE_MATRIX,
                                              matrix.data(),
                                              static_cast<int64_t>(matrix.size()));
  if (st != LUMEN_OK || !layer.HasNormalizer()) return st;
  return lumen_session_write_state(session, layer_index, LUMEN_STATE_NORMALIZER,
                                   normalizer.data(), static_cast<int64_t>(normalizer.size()));
}

uint32_t TestSeed() {
  static const uint32_t seed = [] {
    if (const char* env = std::getenv("LUMEN_TEST_SEED")) {
      return static_cast<uint32_t>(std::strtoul(env, nullptr, 10));
    }
    return std::random_device{}();
  }();
  return seed;
}

}  // namespace lumen_test
