// A deterministic pseudo-random sequence for the tests that build many
// inputs (xorshift64: Marsaglia, "Xorshift RNGs", 2003): the same inputs on
// every run and every machine, unlike std::random_device.
#ifndef HYPERPOOL_TESTS_SUPPORT_XORSHIFT_H_
#define HYPERPOOL_TESTS_SUPPORT_XORSHIFT_H_

#include <cstdint>

namespace hyperpool::testing {

class XorShift {
 public:
  explicit XorShift(uint64_t seed) : state_(seed) {}
  uint64_t operator()() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return state_;
  }

 private:
  uint64_t state_;
};

}  // namespace hyperpool::testing

#endif  // HYPERPOOL_TESTS_SUPPORT_XORSHIFT_H_
