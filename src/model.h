#pragma once
// An immutable, validated stack of layers. Shared by engines and sessions.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "src/layer_spec.h"

namespace lumen {

class Model {
 public:
  // Checks that there are 1 to kMaxLayers layers, that each has its parameters, and that a
  // session's state fits in kMaxSessionBytes, both as stored and at 4 bytes per element
  // (an fp32 snapshot's payload), so that no size or offset derived from the model overflows.
  static absl::StatusOr<Model> Create(std::vector<LayerSpec> layers);

  int32_t num_layers() const { return static_cast<int32_t>(layers_.size()); }
  const LayerSpec& layer(int32_t index) const { return layers_[index]; }
  // OK, or LUMEN_ERROR_OUT_OF_RANGE naming the index and the number of layers.
  absl::Status CheckLayer(int32_t index) const;

  // Byte offset of each layer's state inside a session's state block, and the total.
  int64_t state_offset(int32_t index) const { return offsets_[index]; }
  int64_t state_bytes() const { return offsets_.back(); }
  // Elements of every layer's state, both parts: the payload of a snapshot in elements.
  int64_t state_elements() const { return state_elements_; }

  // XXH3-64 of every layer's family, dims, options and parameters (not its state dtype, a
  // storage choice that snapshots convert across). Snapshots carry it to name their model.
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  Model(std::vector<LayerSpec> layers, std::vector<int64_t> offsets, int64_t state_elements);

  std::vector<LayerSpec> layers_;
  std::vector<int64_t> offsets_;  // [num_layers + 1]
  int64_t state_elements_ = 0;
  uint64_t fingerprint_ = 0;
};

// OK when 0 <= layer < num_layers, else an out-of-range error that says so.
absl::Status CheckLayerIndex(int32_t layer, int32_t num_layers);

// Layer states start on this alignment inside a session's block (a cache line, and a
// multiple of every SIMD width the kernels use).
inline constexpr int64_t kStateAlignment = 64;

// Limits that keep every size and offset computed from a model far inside int64_t: a
// snapshot adds 48 bytes per layer and 40 more to a payload of at most kMaxSessionBytes.
inline constexpr int32_t kMaxLayers = 1 << 20;
inline constexpr int64_t kMaxSessionBytes = int64_t{1} << 62;  // 4 EiB

}  // namespace lumen
