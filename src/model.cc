#include "src/model.h"

#include "absl/strings/str_cat.h"

namespace lumen {

absl::StatusOr<Model> Model::Create(std::vector<LayerSpec> layers) {
  if (layers.empty()) return absl::InvalidArgumentError("a model needs at least one layer");
  for (size_t i = 0; i < layers.size(); ++i) {
    absl::Status status = CheckLayerComplete(layers[i]);
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", i, ": ", status.message()));
    }
  }
  return Model(std::move(layers));
}

Model::Model(std::vector<LayerSpec> layers) : layers_(std::move(layers)) {
  offsets_.reserve(layers_.size() + 1);
  int64_t offset = 0;
  for (const LayerSpec& layer : layers_) {
    offsets_.push_back(offset);
    offset += (layer.state_bytes() + kStateAlignment - 1) / kStateAlignment * kStateAlignment;
  }
  offsets_.push_back(offset);
}

}  // namespace lumen
