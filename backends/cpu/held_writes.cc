#include "backends/cpu/held_writes.h"

#include <cstring>
#include <utility>

#include "src/checked_int.h"
#include "src/model.h"

namespace lumen::cpu {

void HeldWrites::Plan(const Model& model) {
  std::vector<LayerPlan> layers(model.num_layers());
  CheckedInt64 region = 0;
  for (int32_t i = 0; i < model.num_layers(); ++i) {
    const LayerSpec& spec = model.layer(i);
    LayerPlan& plan = layers[i];
    plan.state_offset = model.state_offset(i);
    plan.heads = spec.num_value_heads;
    plan.key_dim = spec.key_dim;
    plan.value_dim = spec.value_dim;
    plan.matrix_bytes =
        int64_t{spec.num_value_heads} * spec.key_dim * spec.value_dim * sizeof(float);
    if (!spec.delta_rule() || spec.state_dtype != DType::kFloat32) continue;
    plan.region_offset = region.value();
    // A cache line for the flag, then k and u of every head.
    region += (CheckedInt64(kStateAlignment) +
               CheckedInt64(spec.num_value_heads) * (int64_t{spec.key_dim} + spec.value_dim) *
                   int64_t{sizeof(float)})
                  .RoundUp(kStateAlignment);
  }
  const CheckedInt64 start = CheckedInt64(model.state_bytes()).RoundUp(kStateAlignment);
  if (!region.ok() || !start.ok() || !(start + region).ok()) return;  // keeps no regions
  layers_ = std::move(layers);
  state_bytes_ = model.state_bytes();
  region_start_ = start.value();
  region_bytes_ = region.value();
}

bool HeldWrites::HasRegions(int64_t state_bytes) const {
  return region_bytes_ > 0 && state_bytes == state_bytes_;
}

int64_t HeldWrites::BlockBytes(int64_t state_bytes) const {
  return HasRegions(state_bytes) ? region_start_ + region_bytes_ : state_bytes;
}

void HeldWrites::Add(void* block) {
  std::lock_guard<std::mutex> lock(mutex_);
  blocks_.insert(static_cast<const char*>(block));
}

void HeldWrites::Remove(void* block) {
  std::lock_guard<std::mutex> lock(mutex_);
  blocks_.erase(static_cast<const char*>(block));
}

HeldWrites::Layer HeldWrites::LayerAt(const LayerPlan& plan, char* block) const {
  Layer layer;
  if (plan.region_offset < 0) return layer;
  char* region = block + region_start_ + plan.region_offset;
  layer.held = reinterpret_cast<int32_t*>(region);
  layer.k = reinterpret_cast<float*>(region + kStateAlignment);
  layer.u = layer.k + int64_t{plan.heads} * plan.key_dim;
  layer.key_dim = plan.key_dim;
  layer.value_dim = plan.value_dim;
  return layer;
}

HeldWrites::Layer HeldWrites::ForLayer(int32_t layer, void* layer_state) const {
  if (layers_.empty()) return {};
  const LayerPlan& plan = layers_[layer];
  return LayerAt(plan, static_cast<char*>(layer_state) - plan.state_offset);
}

void HeldWrites::ApplyLayer(const LayerPlan& plan, char* block) const {
  const Layer layer = LayerAt(plan, block);
  float* matrix = reinterpret_cast<float*>(block + plan.state_offset);
  const int64_t head_floats = int64_t{plan.key_dim} * plan.value_dim;
  for (int32_t h = 0; h < plan.heads; ++h) {
    HeldWrite write = layer.Head(h);
    ApplyHeldWrite(plan.key_dim, plan.value_dim, matrix + h * head_floats, &write);
  }
  *layer.held = 0;
}

void HeldWrites::Settle(const void* p, int64_t bytes, bool drop_covered) {
  if (region_bytes_ == 0 || bytes <= 0) return;
  const char* begin = static_cast<const char*>(p);
  const char* end = begin + bytes;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.upper_bound(begin);
  if (it == blocks_.begin()) return;
  --it;
  // Blocks are not const to their owner; the set keeps them as const for lookups.
  char* block = const_cast<char*>(*it);
  if (begin >= block + state_bytes_) return;  // not inside this block's state
  for (const LayerPlan& plan : layers_) {
    if (plan.region_offset < 0) continue;
    const char* matrix = block + plan.state_offset;
    const char* matrix_end = matrix + plan.matrix_bytes;
    if (end <= matrix || begin >= matrix_end) continue;
    int32_t* held = LayerAt(plan, block).held;
    if (*held == 0) continue;
    if (drop_covered && begin <= matrix && end >= matrix_end) {
      *held = 0;
    } else {
      ApplyLayer(plan, block);
    }
  }
}

bool HeldWrites::CopyWholeBlock(void* dst, const void* src, int64_t bytes) {
  if (!HasRegions(bytes)) return false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (blocks_.count(static_cast<const char*>(src)) == 0 ||
        blocks_.count(static_cast<const char*>(dst)) == 0) {
      return false;
    }
  }
  std::memcpy(dst, src, region_start_ + region_bytes_);
  return true;
}

void HeldWrites::BeforeRead(const void* p, int64_t bytes) { Settle(p, bytes, false); }

void HeldWrites::BeforeOverwrite(void* p, int64_t bytes) { Settle(p, bytes, true); }

}  // namespace lumen::cpu
