// fp16: every element as an IEEE half (2 bytes), rounded to nearest even. No header.
#include <algorithm>
#include <cstring>
#include <memory>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "codecs/codec.h"
#include "codecs/codec_math.h"

namespace relax {
namespace {

#if defined(__x86_64__)
// F16C converts 8 values per instruction with the same round-to-nearest-even result as
// codec_math::fp16_encode for finite values (compressed collectives reject non-finite input).
__attribute__((target("avx,f16c"))) int64_t encode_f16c(const float* in, int64_t n, uint16_t* out) {
  const int64_t full = n / 8 * 8;
  for (int64_t i = 0; i < full; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  return full;
}

// encode_f16c and, in the same pass, residual = in - the half's value (`residual` may be `in`).
__attribute__((target("avx,f16c"))) int64_t encode_with_residual_f16c(const float* in, int64_t n, uint16_t* out,
                                                                      float* residual) {
  const int64_t full = n / 8 * 8;
  for (int64_t i = 0; i < full; i += 8) {
    const __m256 x = _mm256_loadu_ps(in + i);
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
    _mm256_storeu_ps(residual + i, _mm256_sub_ps(x, _mm256_cvtph_ps(h)));
  }
  return full;
}

template <bool Accumulate>
__attribute__((target("avx,f16c"))) int64_t decode_f16c(const uint16_t* in, int64_t n, float* out) {
  const int64_t full = n / 8 * 8;
  for (int64_t i = 0; i < full; i += 8) {
    __m256 f = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    if (Accumulate) f = _mm256_add_ps(_mm256_loadu_ps(out + i), f);
    _mm256_storeu_ps(out + i, f);
  }
  return full;
}

bool has_f16c() {
  // F16C read from CPUID: clang (the fuzz build) does not know "f16c" in __builtin_cpu_supports.
  static const bool supported = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  }();
  return supported;
}
#endif

class Fp16Codec final : public Codec {
 public:
  const char* name() const override { return "fp16"; }
  int64_t encoded_bytes(int64_t n) const override { return 2 * n; }

  void encode(const float* in, int64_t n, uint8_t* out) const override {
    uint16_t* h = reinterpret_cast<uint16_t*>(out);
    int64_t done = 0;
#if defined(__x86_64__)
    if (has_f16c()) done = encode_f16c(in, n, h);
#endif
    for (int64_t i = done; i < n; ++i) h[i] = codec_math::fp16_encode(in[i]);
  }

  void encode_with_residual(const float* v, int64_t n, uint8_t* out, float* residual) const override {
    uint16_t* h = reinterpret_cast<uint16_t*>(out);
    int64_t done = 0;
#if defined(__x86_64__)
    if (has_f16c()) done = encode_with_residual_f16c(v, n, h, residual);
#endif
    for (int64_t i = done; i < n; ++i) {
      h[i] = codec_math::fp16_encode(v[i]);
      residual[i] = v[i] - codec_math::fp16_decode(h[i]);
    }
  }

  void decode(const uint8_t* in, int64_t n, float* out) const override {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(in);
    int64_t done = 0;
#if defined(__x86_64__)
    if (has_f16c()) done = decode_f16c<false>(h, n, out);
#endif
    for (int64_t i = done; i < n; ++i) out[i] = codec_math::fp16_decode(h[i]);
  }

  void residual(const uint8_t* in, int64_t n, const float* v, float* out) const override {
    // Decoded a block at a time into a buffer that stays in cache (out may be v itself).
    constexpr int64_t kBlock = 1024;
    float decoded[kBlock];
    for (int64_t at = 0; at < n; at += kBlock) {
      const int64_t c = std::min(kBlock, n - at);
      decode(in + 2 * at, c, decoded);
      for (int64_t i = 0; i < c; ++i) out[at + i] = v[at + i] - decoded[i];
    }
  }

  void decode_add(const uint8_t* in, int64_t n, float* acc) const override {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(in);
    int64_t done = 0;
#if defined(__x86_64__)
    if (has_f16c()) done = decode_f16c<true>(h, n, acc);
#endif
    for (int64_t i = done; i < n; ++i) acc[i] += codec_math::fp16_decode(h[i]);
  }
};

const CodecRegistration kRegistration({
    /*id=*/1, "fp16", "IEEE half per element: 2n bytes", /*kind=*/"fp16",
    "near exact",
    /*consensus_step=*/1.0, [] { return std::unique_ptr<Codec>(std::make_unique<Fp16Codec>()); }});

}  // namespace

}  // namespace relax
