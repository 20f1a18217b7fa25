// fp16: every element as an IEEE half (2 bytes). No header.
#include <cstring>

#include "codecs/codec.h"
#include "codecs/registry_entries.h"
#include "hd/codec_math.h"

namespace relax {
namespace {

class Fp16Codec final : public Codec {
 public:
  const char* name() const override { return "fp16"; }
  int64_t encoded_bytes(int64_t n) const override { return 2 * n; }

  void encode(const float* in, int64_t n, uint8_t* out) const override {
    uint16_t* h = reinterpret_cast<uint16_t*>(out);
    for (int64_t i = 0; i < n; ++i) h[i] = codec_math::fp16_encode(in[i]);
  }

  void decode(const uint8_t* in, int64_t n, float* out) const override {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(in);
    for (int64_t i = 0; i < n; ++i) out[i] = codec_math::fp16_decode(h[i]);
  }

  void decode_add(const uint8_t* in, int64_t n, float* acc) const override {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(in);
    for (int64_t i = 0; i < n; ++i) acc[i] += codec_math::fp16_decode(h[i]);
  }
};

}  // namespace

std::unique_ptr<Codec> make_fp16_codec() { return std::make_unique<Fp16Codec>(); }

}  // namespace relax
