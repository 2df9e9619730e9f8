#pragma once
// What the C API's contract tests (lumen_capi_tests) share: NaN and Inf, the check of a
// failing call (its status, a non-empty message and, if given, a message that names the
// problem), and a layer of given dims for the float64 reference's glue.

#include <catch2/catch.hpp>

#include <cctype>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/reference/layer_reference.h"

namespace lumen_test {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// True if `message` mentions one of `words`. Words of one or two characters ("q", "HV") must
// match case and stand alone; longer ones match anywhere, ignoring case.
inline bool Mentions(const std::string& message, const std::vector<std::string>& words) {
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string lm = lower(message);
  for (const std::string& w : words) {
    if (w.size() > 2) {
      if (lm.find(lower(w)) != std::string::npos) return true;
      continue;
    }
    for (size_t pos = message.find(w); pos != std::string::npos;
         pos = message.find(w, pos + 1)) {
      const bool left_ok = pos == 0 || !std::isalnum(static_cast<unsigned char>(message[pos - 1]));
      const size_t end = pos + w.size();
      const bool right_ok =
          end >= message.size() || !std::isalnum(static_cast<unsigned char>(message[end]));
      if (left_ok && right_ok) return true;
    }
  }
  return false;
}

inline std::string Join(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : " | ") + w;
  return s;
}

// Checks a failure: the status, a non-empty message, and (if given) that it names the problem.
inline void CheckFailure(lumen_status got, lumen_status expected,
                  const std::vector<std::string>& words) {
  const std::string message = lumen_last_error_message();
  INFO("status " << lumen_status_string(got) << ", expected " << lumen_status_string(expected)
                 << "; message \"" << message << "\"");
  CHECK(got == expected);
  CHECK(!message.empty());
  if (!words.empty()) {
    INFO("the message should mention one of: " << Join(words));
    CHECK(Mentions(message, words));
  }
}

inline RefLayer Layer(int32_t family, int32_t H, int32_t HV, int32_t K, int32_t V) {
  RefLayer l;
  l.family = family;
  l.num_heads = H;
  l.num_value_heads = HV;
  l.key_dim = K;
  l.value_dim = V;
  return l;
}

}  // namespace lumen_test
