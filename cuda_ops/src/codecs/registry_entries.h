// Factories of the built-in codecs (one per codec file), used by codec_registry.cc.
#pragma once

#include <memory>

#include "codecs/codec.h"

namespace relax {

std::unique_ptr<Codec> make_fp16_codec();
std::unique_ptr<Codec> make_uint8_codec();
std::unique_ptr<Codec> make_sign_codec();

}  // namespace relax
