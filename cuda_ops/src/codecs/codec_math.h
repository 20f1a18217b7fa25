// Per-element math of the codecs, shared by the CPU implementations (cuda_ops/src/codecs) and
// the CUDA kernels (codecs.cu): __host__ __device__, no state, no allocation.
#pragma once

#include <cmath>
#include <cstdint>

#include "util/half.h"

namespace relax {
namespace codec_math {

// ---- min-max uint8: q = round((x - lo) / step), step = (hi - lo) / 255 ----

RELAX_HD inline float minmax_step(float lo, float hi) { return (hi - lo) / 255.0f; }

RELAX_HD inline uint8_t minmax_quantize(float x, float lo, float inverse_step) {
  float q = (x - lo) * inverse_step + 0.5f;
  // NaN (a NaN input, or a chunk whose range is not finite) becomes 255, as the SIMD paths'
  // min(q, 255) makes it: converting NaN to an integer is undefined behaviour.
  q = q < 0.0f ? 0.0f : (q <= 255.0f ? q : 255.0f);
  return static_cast<uint8_t>(q);
}

RELAX_HD inline float minmax_dequantize(uint8_t q, float lo, float step) { return lo + static_cast<float>(q) * step; }

// ---- sign (1 bit per element): bit set for x >= 0; value = +-scale ----

// The scale is the chunk's root mean square, so the decoded chunk keeps the input's L2 norm
// (DeepSpeed's 1-bit choice). The mean |x| (the least-squares scale) underrates the few large
// elements of a bucket that mixes layers: with error feedback their residual then grows to
// hundreds of steps' worth before it is sent, and training diverges at ordinary learning rates.
RELAX_HD inline float sign_scale(double sum_of_squares, int64_t n) {
  return n > 0 ? static_cast<float>(sqrt(sum_of_squares / static_cast<double>(n))) : 0.0f;
}

// Eight partial sums of squares (lane l: elements l, l + 8, ...), added up in lane order: the one
// order of the host paths that sum squares in lanes (the sign codec, the step scale's vectors).
inline double lanes_total(const double (&lanes)[8]) {
  double total = 0.0;
  for (double lane : lanes) total += lane;
  return total;
}

RELAX_HD inline bool sign_bit(float x) { return x >= 0.0f; }

RELAX_HD inline float sign_value(bool bit, float scale) { return bit ? scale : -scale; }

// Bit i of a packed byte array (little-endian within each byte).
RELAX_HD inline bool packed_bit(const uint8_t* bits, int64_t i) { return (bits[i >> 3] >> (i & 7)) & 1u; }

// ---- fp16 ----

RELAX_HD inline uint16_t fp16_encode(float x) { return float_to_half(x); }
RELAX_HD inline float fp16_decode(uint16_t h) { return half_to_float(h); }

}  // namespace codec_math
}  // namespace relax
