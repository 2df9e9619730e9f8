#include "src/checksum.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t's definition, to keep it by value
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>  // renames the XXH3 calls to their run-time dispatching twins
#else
#include <xxhash.h>
#endif

namespace lumen {

struct ChecksumStream::State {
  XXH3_state_t xxh3;
};

uint64_t Checksum(const void* data, int64_t size) {
  return XXH3_64bits(data, static_cast<size_t>(size));
}

ChecksumStream::ChecksumStream() : state_(new State) { XXH3_64bits_reset(&state_->xxh3); }

ChecksumStream::~ChecksumStream() = default;

void ChecksumStream::Update(const void* data, int64_t size) {
  XXH3_64bits_update(&state_->xxh3, data, static_cast<size_t>(size));
}

uint64_t ChecksumStream::Digest() const { return XXH3_64bits_digest(&state_->xxh3); }

}  // namespace lumen
