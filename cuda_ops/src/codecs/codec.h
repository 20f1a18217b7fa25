// The codec interface of compressed collectives: a (lossy) encoding of float32 chunks. A new
// codec is one file implementing Codec plus a line in codec_registry.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace relax {

enum CodecId : int32_t { kCodecFp16 = 1, kCodecUint8 = 2, kCodecSign = 3 };

class Codec {
 public:
  virtual ~Codec() = default;
  virtual const char* name() const = 0;
  // Bytes of an encoded chunk of n elements, header included.
  virtual int64_t encoded_bytes(int64_t n) const = 0;
  // Encodes n finite values into encoded_bytes(n) bytes at `out`.
  virtual void encode(const float* in, int64_t n, uint8_t* out) const = 0;
  // out[i] = decoded value i.
  virtual void decode(const uint8_t* in, int64_t n, float* out) const = 0;
  // acc[i] += decoded value i (the owner's reduction; avoids a temporary).
  virtual void decode_add(const uint8_t* in, int64_t n, float* acc) const = 0;
  // out[i] = v[i] - decoded value i (error feedback's residual, in one pass over memory).
  virtual void residual(const uint8_t* in, int64_t n, const float* v, float* out) const = 0;
};

// The codec with this id, or nullptr when unknown.
std::unique_ptr<Codec> make_codec(int32_t id);
// Name of a codec id ("fp16", "uint8", "sign") or "codec(<id>)".
std::string codec_name(int32_t id);

}  // namespace relax
