// sign (1-bit): header = scale = root mean square of the chunk (one float), then one bit per
// element (set for x >= 0): x ~ +-scale. The chunk's L2 norm is preserved; per-element error is
// | |x| - scale | (zero for chunks of equal magnitudes). Error feedback makes the sum of what is
// sent track the sum of the inputs; why the scale is the RMS: codecs/codec_math.h.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "codecs/codec.h"
#include "codecs/codec_math.h"
#include "util/cpu.h"

namespace relax {
namespace {

constexpr int64_t kHeader = 4;

// ±1 for the 8 elements a byte of sign bits describes: decoding is a table lookup and a multiply.
struct SignTable {
  float values[256][8];
  SignTable() {
    for (int byte = 0; byte < 256; ++byte) {
      for (int j = 0; j < 8; ++j) values[byte][j] = ((byte >> j) & 1) ? 1.0f : -1.0f;
    }
  }
};

const SignTable& sign_table() {
  static const SignTable table;
  return table;
}

// The scale's sum of squares goes through 8 double lanes (lane j: elements j, j + 8, ...; the
// tail into lane 0), added up by codec_math::lanes_total, so every path below gives the same
// bits; each x * x is exact in double.

// Sum of squares of in[0, n) and the sign bits of its full bytes, in one pass.
double squares_and_bits_portable(const float* in, int64_t n, uint8_t* bits) {
  double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int64_t full = n / 8;
  for (int64_t b = 0; b < full; ++b) {
    uint8_t byte = 0;
    for (int j = 0; j < 8; ++j) {
      const double x = in[8 * b + j];
      lanes[j] += x * x;
      byte |= static_cast<uint8_t>(codec_math::sign_bit(in[8 * b + j]) << j);
    }
    bits[b] = byte;
  }
  for (int64_t i = 8 * full; i < n; ++i) lanes[0] += static_cast<double>(in[i]) * in[i];
  return codec_math::lanes_total(lanes);
}

enum class Unpack { Write, Add, SubtractFrom };

// out = decoded (Write), out += decoded (Add), or out = base - decoded (SubtractFrom), for the
// `full` bytes of 8 elements.
template <Unpack Mode>
void unpack_portable(const uint8_t* bits, int64_t full, float scale, float* out, const float* base) {
  const SignTable& table = sign_table();
  for (int64_t b = 0; b < full; ++b) {
    const float* signs = table.values[bits[b]];
    float* o = out + 8 * b;
    for (int j = 0; j < 8; ++j) {
      const float v = signs[j] * scale;
      o[j] = Mode == Unpack::Write ? v : (Mode == Unpack::Add ? o[j] + v : base[8 * b + j] - v);
    }
  }
}

#if defined(__x86_64__)
// The same two loops, 8 elements per instruction (element-wise the same operations, so the
// same bits; no FMA contraction is possible without the fma target).
__attribute__((target("avx"))) double squares_and_bits_avx(const float* in, int64_t n, uint8_t* bits) {
  const __m256 zero = _mm256_setzero_ps();
  __m256d low = _mm256_setzero_pd(), high = _mm256_setzero_pd();
  const int64_t full = n / 8;
  for (int64_t b = 0; b < full; ++b) {
    const __m256 x = _mm256_loadu_ps(in + 8 * b);
    const __m256d x_low = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
    const __m256d x_high = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    low = _mm256_add_pd(low, _mm256_mul_pd(x_low, x_low));
    high = _mm256_add_pd(high, _mm256_mul_pd(x_high, x_high));
    bits[b] = static_cast<uint8_t>(_mm256_movemask_ps(_mm256_cmp_ps(x, zero, _CMP_GE_OQ)));
  }
  double lanes[8];
  _mm256_storeu_pd(lanes, low);
  _mm256_storeu_pd(lanes + 4, high);
  for (int64_t i = 8 * full; i < n; ++i) lanes[0] += static_cast<double>(in[i]) * in[i];
  return codec_math::lanes_total(lanes);
}

// Stream: the results bypass the cache (outputs too large to stay there; 32-byte aligned).
template <Unpack Mode, bool Stream>
__attribute__((target("avx"))) void unpack_avx(const uint8_t* bits, int64_t full, float scale, float* out,
                                               const float* base) {
  const SignTable& table = sign_table();
  const __m256 s = _mm256_set1_ps(scale);
  for (int64_t b = 0; b < full; ++b) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(table.values[bits[b]]), s);
    float* o = out + 8 * b;
    if (Mode == Unpack::Add) v = _mm256_add_ps(_mm256_loadu_ps(o), v);
    if (Mode == Unpack::SubtractFrom) v = _mm256_sub_ps(_mm256_loadu_ps(base + 8 * b), v);
    if (Stream) {
      _mm256_stream_ps(o, v);
    } else {
      _mm256_storeu_ps(o, v);
    }
  }
  if (Stream) _mm_sfence();
}
#endif

double squares_and_bits(const float* in, int64_t n, uint8_t* bits) {
#if defined(__x86_64__)
  if (cpu_has_avx()) return squares_and_bits_avx(in, n, bits);
#endif
  return squares_and_bits_portable(in, n, bits);
}

// Results of a chunk larger than the caches, written to a fresh aligned buffer, bypass them.
template <Unpack Mode>
void unpack(const uint8_t* bits, int64_t n, float scale, float* out, const float* base = nullptr) {
  constexpr int64_t kStreamElements = int64_t{1} << 18;
  const int64_t full = n / 8;
#if defined(__x86_64__)
  if (cpu_has_avx()) {
    const bool stream = Mode != Unpack::Add && out != base && n >= kStreamElements &&
                        reinterpret_cast<uintptr_t>(out) % 32 == 0;
    if (stream) {
      unpack_avx<Mode, Mode != Unpack::Add>(bits, full, scale, out, base);
    } else {
      unpack_avx<Mode, false>(bits, full, scale, out, base);
    }
  } else {
    unpack_portable<Mode>(bits, full, scale, out, base);
  }
#else
  unpack_portable<Mode>(bits, full, scale, out, base);
#endif
  for (int64_t i = 8 * full; i < n; ++i) {
    const float v = codec_math::sign_value(codec_math::packed_bit(bits, i), scale);
    out[i] = Mode == Unpack::Write ? v : (Mode == Unpack::Add ? out[i] + v : base[i] - v);
  }
}

class SignCodec final : public Codec {
 public:
  const char* name() const override { return "sign"; }
  int64_t encoded_bytes(int64_t n) const override { return kHeader + (n + 7) / 8; }

  void encode(const float* in, int64_t n, uint8_t* out) const override {
    uint8_t* bits = out + kHeader;
    const float scale = codec_math::sign_scale(squares_and_bits(in, n, bits), n);
    std::memcpy(out, &scale, 4);
    const int64_t full = n / 8;
    if (n % 8) {
      uint8_t byte = 0;
      for (int64_t j = 0; j < n % 8; ++j) byte |= static_cast<uint8_t>(codec_math::sign_bit(in[8 * full + j]) << j);
      bits[full] = byte;
    }
  }

  void decode(const uint8_t* in, int64_t n, float* out) const override {
    float scale;
    std::memcpy(&scale, in, 4);
    unpack<Unpack::Write>(in + kHeader, n, scale, out);
  }

  void residual(const uint8_t* in, int64_t n, const float* v, float* out) const override {
    float scale;
    std::memcpy(&scale, in, 4);
    unpack<Unpack::SubtractFrom>(in + kHeader, n, scale, out, v);
  }

  void decode_add(const uint8_t* in, int64_t n, float* acc) const override {
    float scale;
    std::memcpy(&scale, in, 4);
    unpack<Unpack::Add>(in + kHeader, n, scale, acc);
  }
};

const CodecRegistration kRegistration({
    /*id=*/3, "sign", "root mean square (4 bytes) + ceil(n / 8) bytes", /*kind=*/"compressed",
    "use with error feedback and, for SGD, the default per-element step scale (without it up to 6 points "
    "below all-reduce)",
    /*consensus_step=*/0.3, [] { return std::unique_ptr<Codec>(std::make_unique<SignCodec>()); }});

}  // namespace

}  // namespace relax
