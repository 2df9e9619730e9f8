#include "src/model.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/checked_int.h"
#include "src/checksum.h"

namespace lumen {
namespace {

// Appends the little-endian bytes of a 32-bit value (ints and float bit patterns).
template <typename T>
void Append(std::string& out, T value) {
  static_assert(sizeof(T) == 4);
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(bits >> (8 * i)));
}

void AppendArray(std::string& out, const std::vector<float>& values) {
  Append(out, static_cast<uint32_t>(values.size()));
  for (float value : values) Append(out, value);
}

// "CONV" in ASCII, little-endian.
constexpr uint32_t kExtensionTag = 0x564e4f43;
// "FLAO" in ASCII, little-endian: fla's layer options that change the math.
constexpr uint32_t kFlaOptionsTag = 0x4f414c46;

uint64_t Fingerprint(const std::vector<LayerSpec>& layers) {
  std::string bytes;
  for (const LayerSpec& layer : layers) {
    Append(bytes, static_cast<int32_t>(layer.family));
    Append(bytes, layer.num_heads);
    Append(bytes, layer.num_value_heads);
    Append(bytes, layer.key_dim);
    Append(bytes, layer.value_dim);
    Append(bytes, layer.scale);
    Append(bytes, static_cast<int32_t>(layer.feature_map));
    Append(bytes, static_cast<int32_t>(layer.normalize));
    Append(bytes, layer.normalize_eps);
    Append(bytes, static_cast<int32_t>(layer.qk_l2norm));
    Append(bytes, static_cast<int32_t>(layer.beta_sigmoid));
    Append(bytes, static_cast<int32_t>(layer.gate_raw));
    AppendArray(bytes, layer.a_log);
    AppendArray(bytes, layer.dt_bias);
    AppendArray(bytes, layer.decay);
    // A layer with a convolution or a skip adds a tagged extension. Layers without one hash
    // exactly as in format-1 snapshots, which therefore still restore; the tag is never a
    // family value, so where a layer's fields end stays unambiguous.
    if (layer.conv_size > 0 || !layer.d_skip.empty()) {
      Append(bytes, kExtensionTag);
      Append(bytes, layer.conv_size);
      Append(bytes, static_cast<int32_t>(layer.conv_activation));
      for (const std::vector<float>& weight : layer.conv_weight) AppendArray(bytes, weight);
      for (const std::vector<float>& bias : layer.conv_bias) AppendArray(bytes, bias);
      AppendArray(bytes, layer.d_skip);
    }
    // A layer with one of fla's options that change the math adds a second tagged
    // extension; layers without any hash as before.
    if (layer.allow_neg_eigval || layer.gate_lower_bound != 0.0f) {
      Append(bytes, kFlaOptionsTag);
      Append(bytes, static_cast<int32_t>(layer.allow_neg_eigval));
      Append(bytes, layer.gate_lower_bound);
    }
  }
  return Checksum(bytes.data(), static_cast<int64_t>(bytes.size()));
}

}  // namespace

absl::StatusOr<Model> Model::Create(std::vector<LayerSpec> layers) {
  if (layers.empty()) return absl::InvalidArgumentError("a model needs at least one layer");
  if (layers.size() > static_cast<size_t>(kMaxLayers)) {
    return absl::InvalidArgumentError(absl::StrCat("the model has ", layers.size(),
                                                   " layers, at most ", kMaxLayers,
                                                   " are supported"));
  }
  // Each layer's state starts on a kStateAlignment boundary of the session's block.
  std::vector<int64_t> offsets;
  offsets.reserve(layers.size() + 1);
  CheckedInt64 offset = 0;
  CheckedInt64 elements = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    absl::Status status = CheckLayerComplete(layers[i]);
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", i, ": ", status.message()));
    }
    offsets.push_back(offset.value());
    offset += CheckedInt64(layers[i].state_bytes()).RoundUp(kStateAlignment);
    elements += CheckedInt64(layers[i].state_count());
    const CheckedInt64 payload_bytes = elements * 4;
    if (!offset.ok() || offset.value() > kMaxSessionBytes || !payload_bytes.ok() ||
        payload_bytes.value() > kMaxSessionBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the model's state is too large: layers 0 to ", i, " already need more than ",
          kMaxSessionBytes, " bytes per session (as stored or as an fp32 snapshot)"));
    }
  }
  offsets.push_back(offset.value());
  return Model(std::move(layers), std::move(offsets), elements.value());
}

absl::Status CheckLayerIndex(int32_t layer, int32_t num_layers) {
  if (layer >= 0 && layer < num_layers) return absl::OkStatus();
  return absl::OutOfRangeError(absl::StrCat("layer ", layer, " is out of range: the model has ",
                                            num_layers, " layers"));
}

absl::Status Model::CheckLayer(int32_t index) const {
  return CheckLayerIndex(index, num_layers());
}

Model::Model(std::vector<LayerSpec> layers, std::vector<int64_t> offsets,
             int64_t state_elements)
    : layers_(std::move(layers)),
      offsets_(std::move(offsets)),
      state_elements_(state_elements),
      fingerprint_(Fingerprint(layers_)) {}

}  // namespace lumen
