// sign (1-bit): header = scale = mean absolute value of the chunk (one float), then one bit per
// element (set for x >= 0): x ~ +-scale. The chunk's L1 norm is preserved exactly; per-element
// error is | |x| - scale | (zero for chunks of equal magnitudes). Error feedback makes the sum
// of what is sent track the sum of the inputs.
#include <cmath>
#include <cstring>

#include "codecs/codec.h"
#include "codecs/registry_entries.h"
#include "hd/codec_math.h"

namespace relax {
namespace {

constexpr int64_t kHeader = 4;

class SignCodec final : public Codec {
 public:
  const char* name() const override { return "sign"; }
  int64_t encoded_bytes(int64_t n) const override { return kHeader + (n + 7) / 8; }

  void encode(const float* in, int64_t n, uint8_t* out) const override {
    double l1 = 0.0;
    for (int64_t i = 0; i < n; ++i) l1 += std::fabs(in[i]);
    const float scale = n > 0 ? static_cast<float>(l1 / static_cast<double>(n)) : 0.0f;
    std::memcpy(out, &scale, 4);
    uint8_t* bits = out + kHeader;
    const int64_t full = n / 8;
    for (int64_t b = 0; b < full; ++b) {
      uint8_t byte = 0;
      for (int j = 0; j < 8; ++j) byte |= static_cast<uint8_t>(codec_math::sign_bit(in[8 * b + j]) << j);
      bits[b] = byte;
    }
    if (n % 8) {
      uint8_t byte = 0;
      for (int64_t j = 0; j < n % 8; ++j) byte |= static_cast<uint8_t>(codec_math::sign_bit(in[8 * full + j]) << j);
      bits[full] = byte;
    }
  }

  void decode(const uint8_t* in, int64_t n, float* out) const override {
    float scale;
    std::memcpy(&scale, in, 4);
    const uint8_t* bits = in + kHeader;
    for (int64_t i = 0; i < n; ++i) out[i] = codec_math::sign_value(codec_math::packed_bit(bits, i), scale);
  }

  void decode_add(const uint8_t* in, int64_t n, float* acc) const override {
    float scale;
    std::memcpy(&scale, in, 4);
    const uint8_t* bits = in + kHeader;
    for (int64_t i = 0; i < n; ++i) acc[i] += codec_math::sign_value(codec_math::packed_bit(bits, i), scale);
  }
};

}  // namespace

std::unique_ptr<Codec> make_sign_codec() { return std::make_unique<SignCodec>(); }

}  // namespace relax
