#pragma once
// Where a CPU engine keeps the delta rule's held writes (HeldWrite, head_kernels.h): in a
// region after each session's state block, one part per delta-rule layer with an fp32 state,
// a flag and then k [HV, K] and u [HV, V]. The block itself keeps the canonical layout, so
// that everything outside a layer call sees exactly the session's state: before any read,
// copy or overwrite of a block, the held writes of the layers it touches are applied (or
// dropped, where the overwrite replaces a layer's whole matrix).

#include <cstdint>
#include <mutex>
#include <set>
#include <vector>

#include "backends/cpu/head_kernels.h"

namespace lumen {
class Model;
}

namespace lumen::cpu {

class HeldWrites {
 public:
  // Lays out the regions for the model's layers (none before this is called).
  void Plan(const Model& model);

  // Bytes to allocate for a block of `state_bytes`, the regions included, and whether such
  // a block gets them (only blocks of the planned model's size do).
  int64_t BlockBytes(int64_t state_bytes) const;
  bool HasRegions(int64_t state_bytes) const;

  // Registers a block allocated with BlockBytes (its regions zero: nothing held), and
  // forgets one before it is freed.
  void Add(void* block);
  void Remove(void* block);

  // Copies a whole registered block of the planned size into another, its held writes with
  // it (cheaper than applying them first); false, copying nothing, for anything else.
  // Thread-safe.
  bool CopyWholeBlock(void* dst, const void* src, int64_t bytes);

  // Before [p, p + bytes) of a registered block is read: applies the held writes of every
  // layer whose matrix it overlaps. Any other pointer is left alone. Thread-safe.
  void BeforeRead(const void* p, int64_t bytes);
  // Before [p, p + bytes) is overwritten: drops the held writes of each layer whose matrix it
  // covers whole and applies those of layers it covers in part. Thread-safe.
  void BeforeOverwrite(void* p, int64_t bytes);

  // One layer of one session: whether writes are held, and head h's write.
  struct Layer {
    int32_t* held = nullptr;  // nullptr: this layer holds no writes (additive, bf16 state)
    float* k = nullptr;       // [HV, K]
    float* u = nullptr;       // [HV, V]
    int32_t key_dim = 0, value_dim = 0;
    HeldWrite Head(int32_t h) const {
      return {k + static_cast<int64_t>(h) * key_dim, u + static_cast<int64_t>(h) * value_dim,
              *held != 0};
    }
  };
  // The held writes of layer `layer` of the session whose layer state is at `layer_state`
  // (a registered block's). Not locked: the caller owns the session for the call.
  Layer ForLayer(int32_t layer, void* layer_state) const;

 private:
  struct LayerPlan {
    int64_t state_offset = 0;    // the layer's matrix inside the block
    int64_t matrix_bytes = 0;    // HV * K * V * 4
    int64_t region_offset = -1;  // its part of the region after the block; -1: none
    int32_t heads = 0, key_dim = 0, value_dim = 0;
  };

  // Applies (or, with drop, only clears) the layers of `block` whose matrices overlap
  // [p, p + bytes); a layer covered whole is dropped when `drop_covered`.
  void Settle(const void* p, int64_t bytes, bool drop_covered);
  void ApplyLayer(const LayerPlan& plan, char* block) const;
  Layer LayerAt(const LayerPlan& plan, char* block) const;

  std::vector<LayerPlan> layers_;
  int64_t state_bytes_ = -1;  // the planned model's state bytes
  int64_t region_start_ = 0;  // state bytes rounded up to kStateAlignment
  int64_t region_bytes_ = 0;
  std::mutex mutex_;          // guards blocks_
  std::set<const char*> blocks_;
};

}  // namespace lumen::cpu
