// uint8 (min-max): header = chunk minimum and maximum (2 floats), then one byte per element:
// x ~ min + q * (max - min) / 255. Error per element <= (max - min) / 255 / 2; constant chunks
// (and every value on the grid) are exact.
#include <algorithm>
#include <cstring>

#include "codecs/codec.h"
#include "codecs/registry_entries.h"
#include "hd/codec_math.h"

namespace relax {
namespace {

constexpr int64_t kHeader = 8;

class Uint8Codec final : public Codec {
 public:
  const char* name() const override { return "uint8"; }
  int64_t encoded_bytes(int64_t n) const override { return kHeader + n; }

  void encode(const float* in, int64_t n, uint8_t* out) const override {
    float lo = 0.0f, hi = 0.0f;
    if (n > 0) {
      lo = hi = in[0];
      for (int64_t i = 1; i < n; ++i) {  // two reductions GCC vectorizes
        lo = in[i] < lo ? in[i] : lo;
        hi = in[i] > hi ? in[i] : hi;
      }
    }
    std::memcpy(out, &lo, 4);
    std::memcpy(out + 4, &hi, 4);
    const float step = codec_math::minmax_step(lo, hi);
    const float inverse = step > 0.0f ? 1.0f / step : 0.0f;
    uint8_t* q = out + kHeader;
    for (int64_t i = 0; i < n; ++i) q[i] = codec_math::minmax_quantize(in[i], lo, inverse);
  }

  void decode(const uint8_t* in, int64_t n, float* out) const override {
    float lo, hi;
    std::memcpy(&lo, in, 4);
    std::memcpy(&hi, in + 4, 4);
    const float step = codec_math::minmax_step(lo, hi);
    const uint8_t* q = in + kHeader;
    for (int64_t i = 0; i < n; ++i) out[i] = codec_math::minmax_dequantize(q[i], lo, step);
  }

  void decode_add(const uint8_t* in, int64_t n, float* acc) const override {
    float lo, hi;
    std::memcpy(&lo, in, 4);
    std::memcpy(&hi, in + 4, 4);
    const float step = codec_math::minmax_step(lo, hi);
    const uint8_t* q = in + kHeader;
    for (int64_t i = 0; i < n; ++i) acc[i] += codec_math::minmax_dequantize(q[i], lo, step);
  }
};

}  // namespace

std::unique_ptr<Codec> make_uint8_codec() { return std::make_unique<Uint8Codec>(); }

}  // namespace relax
