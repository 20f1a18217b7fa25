// Fuzz target: every registered codec's encode and decode through the C ABI (relax_codec_*,
// api/runtime_services.cc -> codecs/*.cc) with arbitrary element counts and bytes, into buffers of
// exactly relax_codec_encoded_bytes / n floats, so AddressSanitizer sees any byte written or read
// past them. Properties: no crash or UB; decoding the encoding of finite values gives finite
// values; the fp16 codec round-trips small integers exactly.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "relax/relax.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const int32_t count = relax_codec_count();
  relax_codec_info_t info{};
  if (count <= 0 || relax_codec_info(data[0] % count, &info) != RELAX_OK) std::abort();
  // n below 4096 (12 bits): past every SIMD block and tail of the codecs, yet fast to fuzz.
  const int64_t n = static_cast<int64_t>(data[1]) | (static_cast<int64_t>(data[2] & 0x0F) << 8);
  const bool finite_only = data[3] & 1;
  const int huge_shift = data[3] >> 5;  // picks a huge count for the size guard below
  data += 4;
  size -= 4;
  const int64_t encoded = relax_codec_encoded_bytes(info.id, n);
  if (encoded < 0) std::abort();

  // Decode arbitrary bytes: exact-size heap buffers (the input repeated to fill them).
  std::unique_ptr<uint8_t[]> wire(new uint8_t[static_cast<size_t>(encoded) + 1]);
  for (int64_t i = 0; i < encoded; ++i) wire[static_cast<size_t>(i)] = size ? data[static_cast<size_t>(i) % size] : 0;
  std::unique_ptr<float[]> decoded(new float[static_cast<size_t>(n) + 1]);
  const int64_t floats = n * 4;  // n is small here (the fuzzer's 4 bytes, bounded above)
  if (relax_codec_decode(info.id, wire.get(), encoded, n, decoded.get(), floats) != RELAX_OK) std::abort();

  // Encode arbitrary floats (NaN, infinities, denormals included unless finite_only).
  std::unique_ptr<float[]> values(new float[static_cast<size_t>(n) + 1]);
  for (int64_t i = 0; i < n; ++i) {
    float v = 0;
    if (size >= 4) std::memcpy(&v, data + (4 * static_cast<size_t>(i)) % (size - size % 4), 4);
    if (finite_only && !std::isfinite(v)) v = static_cast<float>(i % 7) - 3.0f;
    if (finite_only && std::fabs(v) > 1e4f) v = std::fmod(v, 1e4f);
    values[static_cast<size_t>(i)] = v;
  }
  if (relax_codec_encode(info.id, values.get(), floats, n, wire.get(), encoded) != RELAX_OK) std::abort();
  if (relax_codec_decode(info.id, wire.get(), encoded, n, decoded.get(), floats) != RELAX_OK) std::abort();
  // One byte short of either buffer: refused by the buffer rule, never read or written past.
  if (encoded > 0 && relax_codec_encode(info.id, values.get(), floats, n, wire.get(), encoded - 1) == RELAX_OK) {
    std::abort();
  }
  if (encoded > 0 && relax_codec_decode(info.id, wire.get(), encoded - 1, n, decoded.get(), floats) == RELAX_OK) {
    std::abort();
  }
  if (finite_only) {
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(decoded[static_cast<size_t>(i)])) std::abort();
    }
  }
  // The C ABI's guards (api/runtime_services.cc): a negative count is refused without touching a
  // buffer (the sign codec used to write before its buffer), a huge one has a size or none (-1)
  // instead of an overflowing one (fp16's 2 n).
  if (relax_codec_encoded_bytes(info.id, -n - 1) != -1) std::abort();
  if (relax_codec_encode(info.id, values.get(), floats, -n - 1, wire.get(), encoded) == RELAX_OK) std::abort();
  if (relax_codec_decode(info.id, wire.get(), encoded, -n - 1, decoded.get(), floats) == RELAX_OK) std::abort();
  if (relax_codec_encoded_bytes(info.id, INT64_MAX >> huge_shift) < -1) std::abort();
  return 0;
}
