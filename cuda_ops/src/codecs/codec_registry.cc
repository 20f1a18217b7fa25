#include "codecs/codec.h"
#include "codecs/registry_entries.h"

namespace relax {

std::unique_ptr<Codec> make_codec(int32_t id) {
  switch (id) {
    case kCodecFp16: return make_fp16_codec();
    case kCodecUint8: return make_uint8_codec();
    case kCodecSign: return make_sign_codec();
    default: return nullptr;
  }
}

std::string codec_name(int32_t id) {
  std::unique_ptr<Codec> codec = make_codec(id);
  return codec ? codec->name() : "codec(" + std::to_string(id) + ")";
}

}  // namespace relax
