#pragma once
// An immutable, validated stack of layers. Shared by engines and sessions.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "src/layer_spec.h"

namespace lumen {

class Model {
 public:
  // Checks that there is at least one layer and that each has its parameters.
  static absl::StatusOr<Model> Create(std::vector<LayerSpec> layers);

  int32_t num_layers() const { return static_cast<int32_t>(layers_.size()); }
  const LayerSpec& layer(int32_t index) const { return layers_[index]; }
  // OK, or LUMEN_ERROR_OUT_OF_RANGE naming the index and the number of layers.
  absl::Status CheckLayer(int32_t index) const;

  // Byte offset of each layer's state inside a session's state block, and the total.
  int64_t state_offset(int32_t index) const { return offsets_[index]; }
  int64_t state_bytes() const { return offsets_.back(); }

  // XXH3-64 of every layer's family, dims, options and parameters (not its state dtype, a
  // storage choice that snapshots convert across). Snapshots carry it to name their model.
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  explicit Model(std::vector<LayerSpec> layers);

  std::vector<LayerSpec> layers_;
  std::vector<int64_t> offsets_;  // [num_layers + 1]
  uint64_t fingerprint_ = 0;
};

// OK when 0 <= layer < num_layers, else an out-of-range error that says so.
absl::Status CheckLayerIndex(int32_t layer, int32_t num_layers);

// Layer states start on this alignment inside a session's block (a cache line, and a
// multiple of every SIMD width the kernels use).
inline constexpr int64_t kStateAlignment = 64;

}  // namespace lumen
