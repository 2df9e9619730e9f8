#include "src/fla_layout.h"

#include <algorithm>

#include "lumen/lumen.h"

namespace lumen {
namespace {

bool IsConvPart(int32_t part) {
  return part == LUMEN_STATE_CONV_Q || part == LUMEN_STATE_CONV_K || part == LUMEN_STATE_CONV_V;
}

// Swaps the last two axes of `heads` matrices of rows x columns.
void TransposeEach(int64_t heads, int64_t rows, int64_t columns, const float* from, float* to) {
  for (int64_t h = 0; h < heads; ++h) {
    const float* src = from + h * rows * columns;
    float* dst = to + h * rows * columns;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < columns; ++c) dst[c * rows + r] = src[r * columns + c];
    }
  }
}

}  // namespace

int64_t CanonicalPartCount(const LayerSpec& spec, int32_t part) {
  if (part == LUMEN_STATE_MATRIX) return spec.matrix_count();
  if (part == LUMEN_STATE_NORMALIZER) return spec.normalizer_count();
  if (IsConvPart(part)) return spec.conv_count(part - LUMEN_STATE_CONV_Q);
  return 0;
}

int64_t FlaPartCount(const LayerSpec& spec, int32_t part) {
  if (IsConvPart(part)) {
    return spec.conv_size == 0 ? 0
                               : spec.conv_channels(part - LUMEN_STATE_CONV_Q) * spec.conv_size;
  }
  return CanonicalPartCount(spec, part);
}

void CanonicalToFla(const LayerSpec& spec, int32_t part, const float* canonical, float* fla) {
  if (part == LUMEN_STATE_MATRIX) {
    TransposeEach(spec.num_value_heads, spec.key_dim, spec.value_dim, canonical, fla);
  } else if (IsConvPart(part)) {
    const int64_t channels = spec.conv_channels(part - LUMEN_STATE_CONV_Q);
    const int64_t kept = spec.conv_size - 1;
    for (int64_t c = 0; c < channels; ++c) {
      fla[c * spec.conv_size] = 0.0f;
      std::copy_n(canonical + c * kept, kept, fla + c * spec.conv_size + 1);
    }
  } else {
    std::copy_n(canonical, CanonicalPartCount(spec, part), fla);
  }
}

void FlaToCanonical(const LayerSpec& spec, int32_t part, const float* fla, float* canonical) {
  if (part == LUMEN_STATE_MATRIX) {
    TransposeEach(spec.num_value_heads, spec.value_dim, spec.key_dim, fla, canonical);
  } else if (IsConvPart(part)) {
    const int64_t channels = spec.conv_channels(part - LUMEN_STATE_CONV_Q);
    const int64_t kept = spec.conv_size - 1;
    for (int64_t c = 0; c < channels; ++c) {
      std::copy_n(fla + c * spec.conv_size + 1, kept, canonical + c * kept);
    }
  } else {
    std::copy_n(fla, CanonicalPartCount(spec, part), canonical);
  }
}

}  // namespace lumen
