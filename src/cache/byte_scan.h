// ByteSet: the places in a text where any of a set of bytes occurs, found
// sixteen bytes at a time (SSE2, x86-64's baseline: one compare per byte of
// the set, or'd together) for the scans that run on every statement before
// any lexing (ScanSelect, LeadingKeywordOfPlainText, MaskableText): most
// of a statement's bytes are none of them.
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

#if defined(__SSE2__)
// The lanes of `chunk` equal to any of B... (0xff), one compare each.
template <char... B>
inline __m128i EqualToAny(__m128i chunk) {
  __m128i hit = _mm_setzero_si128();
  ((hit = _mm_or_si128(hit, _mm_cmpeq_epi8(chunk, _mm_set1_epi8(B)))), ...);
  return hit;
}
#endif

// N: the number of bytes in the set (a constant, so that the compares
// unroll).
template <std::size_t N>
class ByteSet {
 public:
  static_assert(N >= 1);
  // `bytes`: N distinct bytes.
  explicit ByteSet(std::string_view bytes) {
    for (std::size_t k = 0; k < N && k < bytes.size(); ++k) {
      in_[static_cast<unsigned char>(bytes[k])] = true;
#if defined(__SSE2__)
      splats_[k] = _mm_set1_epi8(bytes[k]);
#endif
    }
  }

  bool Has(char c) const { return in_[static_cast<unsigned char>(c)]; }

  // Bit k set for each byte of the set at s[block + k], k < 16 (fewer at
  // the end of `s`).
  uint32_t Mask(std::string_view s, std::size_t block) const {
#if defined(__SSE2__)
    if (block + 16 <= s.size()) {
      const __m128i chunk = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.data() + block));
      __m128i hit = _mm_cmpeq_epi8(chunk, splats_[0]);
#pragma GCC unroll 32
      for (std::size_t k = 1; k < N; ++k) hit = _mm_or_si128(hit, _mm_cmpeq_epi8(chunk, splats_[k]));
      return static_cast<uint32_t>(_mm_movemask_epi8(hit));
    }
#endif
    uint32_t mask = 0;
    const std::size_t n = s.size() - block < 16 ? s.size() - block : 16;
    for (std::size_t k = 0; k < n; ++k) {
      if (Has(s[block + k])) mask |= uint32_t{1} << k;
    }
    return mask;
  }

  // Calls `at(i)` for each i, in order, where s[i] is in the set, until it
  // returns false; returns false then, true when the text ended.
  template <typename F>
  bool ForEach(std::string_view s, F&& at) const {
    for (std::size_t block = 0; block < s.size(); block += 16) {
      for (uint32_t mask = Mask(s, block); mask != 0; mask &= mask - 1) {
        if (!at(block + static_cast<std::size_t>(__builtin_ctz(mask)))) return false;
      }
    }
    return true;
  }

 private:
  std::array<bool, 256> in_{};
#if defined(__SSE2__)
  __m128i splats_[N];
#endif
};

}  // namespace hyperpool::cache

#endif  // HYPERPOOL_CACHE_BYTE_SCAN_H_
