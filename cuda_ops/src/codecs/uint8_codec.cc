// uint8 (min-max): header = chunk minimum and maximum (2 floats), then one byte per element:
// x ~ min + q * (max - min) / 255. Error per element <= (max - min) / 255 / 2; constant chunks
// (and every value on the grid) are exact.
#include <algorithm>
#include <cstring>
#include <memory>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "codecs/codec.h"
#include "codecs/codec_math.h"
#include "util/cpu.h"

namespace relax {
namespace {

constexpr int64_t kHeader = 8;

// codec_math::minmax_quantize on 16 values at a time: the same float operations, then an
// explicit convert-and-pack (GCC's own float -> uint8 vector code ran at 7 GB/s; this at memory
// speed). SSE2 is part of x86-64, so no run-time dispatch is needed. Returns elements done.
int64_t quantize_sse2(const float* in, int64_t n, float lo, float inverse, uint8_t* q) {
#if defined(__SSE2__)
  const __m128 lo4 = _mm_set1_ps(lo), inverse4 = _mm_set1_ps(inverse), half = _mm_set1_ps(0.5f);
  const __m128 zero = _mm_setzero_ps(), top = _mm_set1_ps(255.0f);
  const int64_t full = n / 16 * 16;
  for (int64_t i = 0; i < full; i += 16) {
    __m128i ints[4];
    for (int k = 0; k < 4; ++k) {
      __m128 v = _mm_add_ps(_mm_mul_ps(_mm_sub_ps(_mm_loadu_ps(in + i + 4 * k), lo4), inverse4), half);
      v = _mm_max_ps(_mm_min_ps(v, top), zero);
      ints[k] = _mm_cvttps_epi32(v);
    }
    const __m128i words = _mm_packs_epi32(ints[0], ints[1]);
    const __m128i words2 = _mm_packs_epi32(ints[2], ints[3]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm_packus_epi16(words, words2));
  }
  return full;
#else
  (void)in, (void)n, (void)lo, (void)inverse, (void)q;
  return 0;
#endif
}

#if defined(__x86_64__)
// The eight lanes of encode's minimum and maximum, 8 elements per instruction: the same
// comparisons (min_ps(x, low) keeps `low` when they are equal, as `x < low ? x : low` does, so
// even the signs of zeros agree). Returns the blocks of 8 done.
__attribute__((target("avx"))) int64_t lane_extremes_avx(const float* in, int64_t blocks, float* lows,
                                                         float* highs) {
  __m256 low = _mm256_loadu_ps(lows), high = _mm256_loadu_ps(highs);
  for (int64_t b = 0; b < blocks; ++b) {
    const __m256 x = _mm256_loadu_ps(in + 8 * b);
    low = _mm256_min_ps(x, low);
    high = _mm256_max_ps(x, high);
  }
  _mm256_storeu_ps(lows, low);
  _mm256_storeu_ps(highs, high);
  return blocks;
}

// quantize_sse2 on 32 values at a time, and with `residual` also v - decoded (the residual's
// formula on the same integers, before they are packed into bytes). Returns elements done.
__attribute__((target("avx2"))) int64_t quantize_avx2(const float* in, int64_t n, float lo, float inverse,
                                                      float step, uint8_t* q, float* residual) {
  const __m256 lo8 = _mm256_set1_ps(lo), inverse8 = _mm256_set1_ps(inverse), half = _mm256_set1_ps(0.5f);
  const __m256 zero = _mm256_setzero_ps(), top = _mm256_set1_ps(255.0f), step8 = _mm256_set1_ps(step);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // undoes the packs' lane interleave
  const int64_t full = n / 32 * 32;
  for (int64_t i = 0; i < full; i += 32) {
    __m256i ints[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 x = _mm256_loadu_ps(in + i + 8 * k);
      __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(x, lo8), inverse8), half);
      v = _mm256_max_ps(_mm256_min_ps(v, top), zero);
      ints[k] = _mm256_cvttps_epi32(v);
      if (residual) {
        const __m256 decoded = _mm256_add_ps(lo8, _mm256_mul_ps(_mm256_cvtepi32_ps(ints[k]), step8));
        _mm256_storeu_ps(residual + i + 8 * k, _mm256_sub_ps(x, decoded));
      }
    }
    const __m256i words = _mm256_packs_epi32(ints[0], ints[1]);
    const __m256i words2 = _mm256_packs_epi32(ints[2], ints[3]);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(words, words2), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), bytes);
  }
  return full;
}
#endif

// The chunk's minimum and maximum, over eight lanes (lane j: elements j, j + 8, ...; the tail into
// lane 0) combined in lane order: GCC vectorizes the lanes (a single running minimum is a
// loop-carried dependence it will not vectorize without -ffast-math), and the AVX path keeps them.
void extremes(const float* in, int64_t n, float& lo, float& hi) {
  lo = hi = 0.0f;
  if (n <= 0) return;
  float lows[8], highs[8];
  for (int j = 0; j < 8; ++j) lows[j] = highs[j] = in[0];
  const int64_t blocks = n / 8;
  int64_t b = 0;
#if defined(__x86_64__)
  if (cpu_has_avx()) b = lane_extremes_avx(in, blocks, lows, highs);
#endif
  for (; b < blocks; ++b) {
    for (int j = 0; j < 8; ++j) {
      const float x = in[8 * b + j];
      lows[j] = x < lows[j] ? x : lows[j];
      highs[j] = x > highs[j] ? x : highs[j];
    }
  }
  for (int64_t i = 8 * blocks; i < n; ++i) {
    lows[0] = in[i] < lows[0] ? in[i] : lows[0];
    highs[0] = in[i] > highs[0] ? in[i] : highs[0];
  }
  lo = lows[0];
  hi = highs[0];
  for (int j = 1; j < 8; ++j) {
    lo = lows[j] < lo ? lows[j] : lo;
    hi = highs[j] > hi ? highs[j] : hi;
  }
}

class Uint8Codec final : public Codec {
 public:
  const char* name() const override { return "uint8"; }
  int64_t encoded_bytes(int64_t n) const override { return kHeader + n; }

  void encode(const float* in, int64_t n, uint8_t* out) const override { encode_into(in, n, out, nullptr); }

  // The residual is computed in the quantizing pass, from the integers just found.
  void encode_with_residual(const float* v, int64_t n, uint8_t* out, float* residual) const override {
    encode_into(v, n, out, residual);
  }

  void decode(const uint8_t* in, int64_t n, float* out) const override {
    float lo, hi;
    std::memcpy(&lo, in, 4);
    std::memcpy(&hi, in + 4, 4);
    const float step = codec_math::minmax_step(lo, hi);
    const uint8_t* q = in + kHeader;
    for (int64_t i = 0; i < n; ++i) out[i] = codec_math::minmax_dequantize(q[i], lo, step);
  }

  void residual(const uint8_t* in, int64_t n, const float* v, float* out) const override {
    float lo, hi;
    std::memcpy(&lo, in, 4);
    std::memcpy(&hi, in + 4, 4);
    const float step = codec_math::minmax_step(lo, hi);
    const uint8_t* q = in + kHeader;
    for (int64_t i = 0; i < n; ++i) out[i] = v[i] - codec_math::minmax_dequantize(q[i], lo, step);
  }

  void decode_add(const uint8_t* in, int64_t n, float* acc) const override {
    float lo, hi;
    std::memcpy(&lo, in, 4);
    std::memcpy(&hi, in + 4, 4);
    const float step = codec_math::minmax_step(lo, hi);
    const uint8_t* q = in + kHeader;
    for (int64_t i = 0; i < n; ++i) acc[i] += codec_math::minmax_dequantize(q[i], lo, step);
  }

 private:
  // Encodes in[0, n) and, with `residual` (may be `in`), writes in - decoded there too.
  static void encode_into(const float* in, int64_t n, uint8_t* out, float* residual) {
    float lo, hi;
    extremes(in, n, lo, hi);
    std::memcpy(out, &lo, 4);
    std::memcpy(out + 4, &hi, 4);
    const float step = codec_math::minmax_step(lo, hi);
    const float inverse = step > 0.0f ? 1.0f / step : 0.0f;
    uint8_t* q = out + kHeader;
    int64_t done = 0;
#if defined(__x86_64__)
    if (cpu_has_avx2()) done = quantize_avx2(in, n, lo, inverse, step, q, residual);
#endif
    if (!residual) {
      done += quantize_sse2(in + done, n - done, lo, inverse, q + done);
      for (int64_t i = done; i < n; ++i) q[i] = codec_math::minmax_quantize(in[i], lo, inverse);
      return;
    }
    for (int64_t i = done; i < n; ++i) {
      q[i] = codec_math::minmax_quantize(in[i], lo, inverse);
      residual[i] = in[i] - codec_math::minmax_dequantize(q[i], lo, step);
    }
  }
};

const CodecRegistration kRegistration({
    /*id=*/2, "uint8", "min, max (8 bytes) + n bytes", /*kind=*/"compressed",
    "use with error feedback",
    /*consensus_step=*/0.8, [] { return std::unique_ptr<Codec>(std::make_unique<Uint8Codec>()); }});

}  // namespace

}  // namespace relax
