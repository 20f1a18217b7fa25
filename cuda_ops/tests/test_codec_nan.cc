// Not-a-number inputs of the uint8 codec (found by fuzz_codecs): quantizing must not convert NaN
// to an integer (undefined behaviour); it saturates as the SIMD paths do.
#include <cmath>
#include <limits>

#include "check.h"
#include "codecs/codec_math.h"

TEST(minmax_quantize_saturates_nan_and_infinities) {
  using relax::codec_math::minmax_quantize;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  CHECK_EQ(static_cast<int>(minmax_quantize(nan, 0.0f, 1.0f)), 255);
  CHECK_EQ(static_cast<int>(minmax_quantize(1.0f, 0.0f, nan)), 255);
  CHECK_EQ(static_cast<int>(minmax_quantize(inf, 0.0f, 1.0f)), 255);
  CHECK_EQ(static_cast<int>(minmax_quantize(-inf, 0.0f, 1.0f)), 0);
  CHECK_EQ(static_cast<int>(minmax_quantize(3.0f, 1.0f, 2.0f)), 4);
}
