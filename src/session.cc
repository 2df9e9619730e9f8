#include "src/session.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "src/dtype_convert.h"
#include "src/status.h"

namespace lumen {

absl::StatusOr<std::unique_ptr<Session>> Session::Create(std::shared_ptr<Engine> engine) {
  absl::StatusOr<void*> block = engine->AllocateSessionState();
  if (!block.ok()) return block.status();
  std::unique_ptr<Session> session(new Session(engine, *block));
  engine->RegisterSession(*session);
  return session;
}

Session::~Session() {
  tentative_.DropAll(engine_->backend());
  engine_->ForgetSession(*this);
}

absl::Status Session::CheckNoTentativeTokens() const {
  if (tentative_.count() == 0) return absl::OkStatus();
  return LumenError(LUMEN_ERROR_UNCOMMITTED_TOKENS,
                    absl::StrCat("the session holds ", tentative_.count(),
                                 " tentative tokens: commit them (lumen_session_commit, 0 to "
                                 "reject them) before this call"));
}

absl::StatusOr<std::unique_ptr<Session>> Session::Fork() const {
  if (absl::Status status = CheckNoTentativeTokens(); !status.ok()) return status;
  Session* self = const_cast<Session*>(this);  // pinning changes residency, not the state
  PinnedSessions source(*engine_, {&self, 1});
  if (!source.status().ok()) return source.status();
  absl::StatusOr<std::unique_ptr<Session>> copy = Create(engine_);
  if (!copy.ok()) return copy.status();
  Session* fresh = copy->get();
  PinnedSessions target(*engine_, {&fresh, 1});
  if (!target.status().ok()) return target.status();
  absl::Status status = engine_->CopyState((*copy)->block_, block_);
  if (!status.ok()) return status;
  (*copy)->tokens_->CopyFrom(*tokens_);
  return copy;
}

absl::Status Session::Reset() {
  if (absl::Status status = CheckNoTentativeTokens(); !status.ok()) return status;
  Session* self = this;
  PinnedSessions pinned(*engine_, {&self, 1});
  if (!pinned.status().ok()) return pinned.status();
  absl::Status status = engine_->ZeroState(block_);
  if (status.ok()) {
    tokens_->SetAll(0);
    rewind_.Reset(rewind_.depth());  // nothing to go back to
  }
  return status;
}

void* Session::layer_state(int32_t layer) const {
  return static_cast<char*>(block_) + model().state_offset(layer);
}

absl::StatusOr<int64_t> Session::PartOffset(int32_t layer, int32_t part,
                                            int64_t count) const {
  const LayerSpec& spec = model().layer(layer);
  int64_t expected = 0;
  int64_t offset = 0;  // elements
  switch (part) {
    case LUMEN_STATE_MATRIX:
      expected = spec.matrix_count();
      break;
    case LUMEN_STATE_NORMALIZER:
      if (!spec.normalize) {
        return absl::InvalidArgumentError(absl::StrCat(
            "layer ", layer, " keeps no normalizer (linear_attn with normalize only)"));
      }
      expected = spec.normalizer_count();
      offset = spec.matrix_count();
      break;
    case LUMEN_STATE_CONV_Q:
    case LUMEN_STATE_CONV_K:
    case LUMEN_STATE_CONV_V: {
      if (spec.conv_size == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "layer ", layer, " keeps no convolution window (its conv_size is 0)"));
      }
      const int32_t conv_part = part - LUMEN_STATE_CONV_Q;
      expected = spec.conv_count(conv_part);
      offset = spec.conv_offset(conv_part);
      break;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown state part ", static_cast<int>(part)));
  }
  if (count != expected) {
    return absl::InvalidArgumentError(absl::StrCat("state part of layer ", layer, " holds ",
                                                   expected, " floats, count is ", count));
  }
  return offset * DTypeSize(spec.state_dtype);
}

absl::Status Session::ReadState(int32_t layer, int32_t part, float* out,
                                int64_t count) const {
  absl::StatusOr<int64_t> offset = PartOffset(layer, part, count);
  if (!offset.ok()) return offset.status();
  if (absl::Status status = CheckNoTentativeTokens(); !status.ok()) return status;
  Session* self = const_cast<Session*>(this);  // pinning changes residency, not the state
  PinnedSessions pinned(*engine_, {&self, 1});
  if (!pinned.status().ok()) return pinned.status();
  const LayerSpec& spec = model().layer(layer);
  const char* src = static_cast<const char*>(layer_state(layer)) + *offset;
  if (spec.state_dtype == DType::kFloat32) {
    return engine_->StateToHost(out, src, count * 4);
  }
  std::vector<uint16_t> stored(count);
  absl::Status status = engine_->StateToHost(stored.data(), src, count * 2);
  if (!status.ok()) return status;
  LoadAsFloat(stored.data(), DType::kBFloat16, out, count);
  return absl::OkStatus();
}

absl::Status Session::WriteState(int32_t layer, int32_t part, const float* values,
                                 int64_t count) {
  absl::StatusOr<int64_t> offset = PartOffset(layer, part, count);
  if (!offset.ok()) return offset.status();
  for (int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(values[i])) {
      return absl::InvalidArgumentError(absl::StrCat("state value ", i, " is not finite"));
    }
  }
  if (absl::Status status = CheckNoTentativeTokens(); !status.ok()) return status;
  Session* self = this;
  PinnedSessions pinned(*engine_, {&self, 1});
  if (!pinned.status().ok()) return pinned.status();
  const LayerSpec& spec = model().layer(layer);
  char* dst = static_cast<char*>(layer_state(layer)) + *offset;
  rewind_.Reset(rewind_.depth());  // the written state has no history to go back to
  if (spec.state_dtype == DType::kFloat32) {
    return engine_->StateFromHost(dst, values, count * 4);
  }
  std::vector<uint16_t> stored(count);
  StoreFromFloat(values, DType::kBFloat16, stored.data(), count);
  return engine_->StateFromHost(dst, stored.data(), count * 2);
}

}  // namespace lumen
