// The codec interface of compressed collectives: a (lossy) encoding of float32 chunks. A codec is
// one file: its class and a CodecRegistration that announces it (id, name, wire format, advice)
// to the registry. Nothing else in the core, the C ABI or Python lists codecs: they all ask the
// registry (relax_codec_count / relax_codec_info). Its CUDA kernels, if any, sit beside it in a
// .cu of the same name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace relax {

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
  // out[i] = v[i] - decoded value i (error feedback's residual, in one pass over memory); out may
  // be v.
  virtual void residual(const uint8_t* in, int64_t n, const float* v, float* out) const = 0;
  // encode(v, n, out), then residual[i] = v[i] - decoded value i (`residual` may be v): the same
  // bits; a codec may do both in fewer passes over memory.
  virtual void encode_with_residual(const float* v, int64_t n, uint8_t* out, float* residual) const {
    encode(v, n, out);
    this->residual(out, n, v, residual);
  }
};

// What a codec file tells the registry about itself.
struct CodecInfo {
  int32_t id = 0;                    // on the wire (relax_request_t::codec); never reused
  const char* name = "";             // what users pass: codec="sign"
  const char* wire_format = "";      // one chunk of n elements, e.g. "rms (4 bytes) + ceil(n/8) bytes"
  const char* kind = "compressed";   // how far it departs from exact: "fp16" (near exact) or "compressed"
  const char* caveat = "";           // advice shown by the advisor ("" if none)
  double consensus_step = 1.0;       // CHOCO step that stays stable with this codec's error
  std::unique_ptr<Codec> (*make)() = nullptr;
};

// Registers a codec when the library loads: a codec file defines one at namespace scope. Two
// codecs with the same id or name abort the load with a message naming both.
class CodecRegistration {
 public:
  explicit CodecRegistration(const CodecInfo& info);
};

// Every registered codec, by id.
std::vector<CodecInfo> registered_codecs();
// The codec with this id, or nullptr when unknown.
std::unique_ptr<Codec> make_codec(int32_t id);
// Name of a codec id ("fp16", "uint8", "sign") or "codec(<id>)".
std::string codec_name(int32_t id);
// Id of a codec name, or -1 when unknown.
int32_t codec_id(const std::string& name);

}  // namespace relax
