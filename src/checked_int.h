#pragma once
// Size and offset arithmetic that notices overflow. A CheckedInt64 carries its value and
// whether any operation that produced it overflowed int64_t, so a chain such as
// `CheckedInt64(h) * k * v + offset` is checked once, at the end, with ok().

#include <cstdint>

namespace lumen {

class CheckedInt64 {
 public:
  constexpr CheckedInt64(int64_t value) : value_(value) {}  // NOLINT: implicit by design

  // False once any operation on the way overflowed; value() is then meaningless.
  constexpr bool ok() const { return !overflowed_; }
  constexpr int64_t value() const { return value_; }

  friend constexpr CheckedInt64 operator+(CheckedInt64 a, CheckedInt64 b) {
    CheckedInt64 sum(0);
    sum.overflowed_ = a.overflowed_ || b.overflowed_ ||
                      __builtin_add_overflow(a.value_, b.value_, &sum.value_);
    return sum;
  }
  friend constexpr CheckedInt64 operator*(CheckedInt64 a, CheckedInt64 b) {
    CheckedInt64 product(0);
    product.overflowed_ = a.overflowed_ || b.overflowed_ ||
                          __builtin_mul_overflow(a.value_, b.value_, &product.value_);
    return product;
  }
  CheckedInt64& operator+=(CheckedInt64 other) { return *this = *this + other; }

  // The smallest multiple of `alignment` (> 0) that is >= this value (>= 0).
  constexpr CheckedInt64 RoundUp(int64_t alignment) const {
    CheckedInt64 padded = *this + (alignment - 1);
    padded.value_ = padded.value_ / alignment * alignment;
    return padded;
  }

 private:
  int64_t value_;
  bool overflowed_ = false;
};

}  // namespace lumen
