// ByteSet: the places in a text where any of a few bytes occurs, found
// sixteen bytes at a time (SSE2, x86-64's baseline) for the scans that run
// on every statement before any lexing (LeadingKeywordOfPlainText,
// MaskableText): most of a statement's bytes are none of them.
#ifndef HYPERPOOL_CACHE_BYTE_SCAN_H_
#define HYPERPOOL_CACHE_BYTE_SCAN_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace hyperpool::cache {

class ByteSet {
 public:
  static constexpr std::size_t kMaxBytes = 8;
  // `bytes`: at most kMaxBytes distinct bytes.
  explicit ByteSet(std::string_view bytes) : count_(bytes.size() < kMaxBytes ? bytes.size() : kMaxBytes) {
    for (std::size_t k = 0; k < count_; ++k) {
      in_[static_cast<unsigned char>(bytes[k])] = true;
#if defined(__SSE2__)
      splats_[k] = _mm_set1_epi8(bytes[k]);
#endif
    }
  }

  bool Has(char c) const { return in_[static_cast<unsigned char>(c)]; }

  // Calls `at(i)` for each i, in order, where s[i] is in the set, until it
  // returns false; returns false then, true when the text ended.
  template <typename F>
  bool ForEach(std::string_view s, F&& at) const {
    std::size_t i = 0;
#if defined(__SSE2__)
    for (; i + 16 <= s.size(); i += 16) {
      const __m128i chunk = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.data() + i));
      __m128i hit = _mm_cmpeq_epi8(chunk, splats_[0]);
      for (std::size_t k = 1; k < count_; ++k) hit = _mm_or_si128(hit, _mm_cmpeq_epi8(chunk, splats_[k]));
      for (auto mask = static_cast<uint32_t>(_mm_movemask_epi8(hit)); mask != 0; mask &= mask - 1) {
        if (!at(i + static_cast<std::size_t>(__builtin_ctz(mask)))) return false;
      }
    }
#endif
    for (; i < s.size(); ++i) {
      if (Has(s[i]) && !at(i)) return false;
    }
    return true;
  }

 private:
  std::size_t count_;
  std::array<bool, 256> in_{};
#if defined(__SSE2__)
  __m128i splats_[kMaxBytes];
#endif
};

}  // namespace hyperpool::cache

#endif  // HYPERPOOL_CACHE_BYTE_SCAN_H_
