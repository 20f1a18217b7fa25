// sign (1-bit): header = scale = root mean square of the chunk (one float), then one bit per
// element (set for x >= 0): x ~ +-scale. The chunk's L2 norm is preserved; per-element error is
// | |x| - scale | (zero for chunks of equal magnitudes). Error feedback makes the sum of what is
// sent track the sum of the inputs; why the scale is the RMS: codecs/codec_math.h.
#include <cmath>
#include <cstring>
#include <memory>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "codecs/codec.h"
#include "codecs/codec_math.h"

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

void pack_portable(const float* in, int64_t bytes, uint8_t* bits) {
  for (int64_t b = 0; b < bytes; ++b) {
    uint8_t byte = 0;
    for (int j = 0; j < 8; ++j) byte |= static_cast<uint8_t>(codec_math::sign_bit(in[8 * b + j]) << j);
    bits[b] = byte;
  }
}

#if defined(__x86_64__)
__attribute__((target("avx"))) void pack_avx(const float* in, int64_t bytes, uint8_t* bits) {
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t b = 0; b < bytes; ++b) {
    const __m256 x = _mm256_loadu_ps(in + 8 * b);
    bits[b] = static_cast<uint8_t>(_mm256_movemask_ps(_mm256_cmp_ps(x, zero, _CMP_GE_OQ)));
  }
}
#endif

// Packs full bytes with the fastest instructions available (same bits either way).
void pack_full_bytes(const float* in, int64_t bytes, uint8_t* bits) {
#if defined(__x86_64__)
  static const bool avx = __builtin_cpu_supports("avx");
  if (avx) return pack_avx(in, bytes, bits);
#endif
  pack_portable(in, bytes, bits);
}

enum class Unpack { Write, Add, SubtractFrom };

// out = decoded (Write), out += decoded (Add), or out = base - decoded (SubtractFrom).
template <Unpack Mode>
void unpack(const uint8_t* bits, int64_t n, float scale, float* out, const float* base = nullptr) {
  const SignTable& table = sign_table();
  const int64_t full = n / 8;
  for (int64_t b = 0; b < full; ++b) {
    const float* signs = table.values[bits[b]];
    float* o = out + 8 * b;
    for (int j = 0; j < 8; ++j) {
      const float v = signs[j] * scale;
      o[j] = Mode == Unpack::Write ? v : (Mode == Unpack::Add ? o[j] + v : base[8 * b + j] - v);
    }
  }
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
    double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // independent partial sums: vectorizable
    const int64_t blocks = n / 8;
    for (int64_t b = 0; b < blocks; ++b) {
      for (int j = 0; j < 8; ++j) {
        const double x = in[8 * b + j];
        lanes[j] += x * x;
      }
    }
    for (int64_t i = 8 * blocks; i < n; ++i) lanes[0] += static_cast<double>(in[i]) * in[i];
    double squares = 0.0;
    for (double lane : lanes) squares += lane;
    const float scale = codec_math::sign_scale(squares, n);
    std::memcpy(out, &scale, 4);
    uint8_t* bits = out + kHeader;
    const int64_t full = n / 8;
    pack_full_bytes(in, full, bits);
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
    "use with error feedback; with momentum up to 6 points below all-reduce on 2 ranks, 3 on 4",
    /*consensus_step=*/0.3, [] { return std::unique_ptr<Codec>(std::make_unique<SignCodec>()); }});

}  // namespace

}  // namespace relax
