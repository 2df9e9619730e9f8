#pragma once
// What a session keeps to go back a few tokens (lumen.h, "Rewind"): per layer, the state at
// one or two checkpoints in host memory and the inputs of every token consumed since the
// older one, so that the state j tokens back is a checkpoint's copy plus a replay of the
// tokens after it through the step path (bitwise the state the session had then).
//
// With depth r, a layer takes a new checkpoint once r tokens have passed since its newer
// one, which becomes the older: the older checkpoint is then always at least r tokens back,
// so every j <= r is reachable by replaying at most 2r - 1 tokens. Memory: two copies of the
// session's state and at most 2r - 1 tokens' inputs per layer; cost per token: one copy of
// its inputs, and every r tokens one copy of the layer's state.

#include <cstdint>
#include <deque>
#include <vector>

namespace lumen {

// The deepest rewind a session keeps (LUMEN_MAX_REWIND_TOKENS).
inline constexpr int32_t kMaxRewindTokens = 64;

class RewindHistory {
 public:
  // A layer's state (its bytes in the stored dtype) after `position` tokens.
  struct Checkpoint {
    int64_t position = -1;  // -1: none
    std::vector<char> state;
  };
  // One token's inputs: q, k, v, g, beta back to back in `dtype` (InputShape's order).
  struct Token {
    int32_t dtype = 0;
    std::vector<char> inputs;
  };
  struct Layer {
    Checkpoint older, newer;  // older.position < newer.position when both are there
    std::deque<Token> tokens;  // every token after the oldest checkpoint, oldest first
    // The oldest checkpoint's position: where the kept tokens start.
    int64_t start() const { return older.position >= 0 ? older.position : newer.position; }
  };

  explicit RewindHistory(int32_t num_layers) : layers_(num_layers) {}

  int32_t depth() const { return depth_; }
  bool enabled() const { return depth_ > 0; }
  // Sets the depth and forgets every layer's history (the caller checkpoints them anew).
  void Reset(int32_t depth) {
    depth_ = depth;
    for (Layer& layer : layers_) layer = Layer{};
  }
  Layer& layer(int32_t index) { return layers_[index]; }
  const Layer& layer(int32_t index) const { return layers_[index]; }
  int32_t num_layers() const { return static_cast<int32_t>(layers_.size()); }

 private:
  int32_t depth_ = 0;
  std::vector<Layer> layers_;
};

}  // namespace lumen
