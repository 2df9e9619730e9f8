#pragma once
// XXH3-64 with seed 0: the snapshot checksum and the model fingerprint. Debian's libxxhash
// runs it with the widest SIMD the CPU has (AVX2 or AVX-512 on x86-64), about twice the
// speed of a build for baseline SSE2, which keeps a checksum pass near copy speed.

#include <cstdint>
#include <memory>

namespace lumen {

uint64_t Checksum(const void* data, int64_t size);

// The same hash over data that arrives in pieces.
class ChecksumStream {
 public:
  ChecksumStream();
  ~ChecksumStream();
  ChecksumStream(const ChecksumStream&) = delete;
  ChecksumStream& operator=(const ChecksumStream&) = delete;

  void Update(const void* data, int64_t size);
  uint64_t Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace lumen
