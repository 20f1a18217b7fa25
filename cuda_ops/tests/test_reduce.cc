// Elementwise reduction and scaling kernels against plain reference loops.
#include <cmath>
#include <limits>
#include <vector>

#include "check.h"
#include "collectives/reduce.h"
#include "relax/relax.h"
#include "util/half.h"

using relax::fill_identity;
using relax::reduce_into;
using relax::scale_buffer;

namespace {

template <typename T>
void check_ops(int32_t dtype) {
  const int n = 1031;  // not a multiple of any vector width
  std::vector<T> a(n), b(n);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<T>((i * 7) % 23 - 11);
    b[i] = static_cast<T>((i * 5) % 19 - 9);
  }
  if (std::is_unsigned<T>::value) {
    for (int i = 0; i < n; ++i) {
      a[i] = static_cast<T>(i % 11);
      b[i] = static_cast<T>(i % 7);
    }
  }
  struct Case { int32_t op; T (*f)(T, T); };
  const Case cases[] = {
      {RELAX_OP_SUM, [](T x, T y) { return static_cast<T>(x + y); }},
      {RELAX_OP_PRODUCT, [](T x, T y) { return static_cast<T>(x * y); }},
      {RELAX_OP_MIN, [](T x, T y) { return y < x ? y : x; }},
      {RELAX_OP_MAX, [](T x, T y) { return y > x ? y : x; }},
  };
  for (const Case& c : cases) {
    std::vector<T> d = a;
    reduce_into(d.data(), b.data(), n, dtype, c.op);
    int wrong = 0;
    for (int i = 0; i < n; ++i) wrong += d[i] != c.f(a[i], b[i]);
    CHECK_EQ(wrong, 0);
  }
}

}  // namespace

TEST(reductions_match_reference_for_every_native_dtype) {
  check_ops<float>(RELAX_FLOAT32);
  check_ops<double>(RELAX_FLOAT64);
  check_ops<int32_t>(RELAX_INT32);
  check_ops<int64_t>(RELAX_INT64);
  check_ops<uint8_t>(RELAX_UINT8);
  check_ops<int8_t>(RELAX_INT8);
  check_ops<int16_t>(RELAX_INT16);
  check_ops<uint16_t>(RELAX_UINT16);
}

TEST(half_precision_sum_rounds_once_from_float) {
  const int n = 3000;
  std::vector<uint16_t> a(n), b(n), bf_a(n), bf_b(n);
  for (int i = 0; i < n; ++i) {
    a[i] = relax::float_to_half(0.001f * static_cast<float>(i) - 1.3f);
    b[i] = relax::float_to_half(0.37f * static_cast<float>(i % 17));
    bf_a[i] = relax::float_to_bf16(0.001f * static_cast<float>(i) - 1.3f);
    bf_b[i] = relax::float_to_bf16(0.37f * static_cast<float>(i % 17));
  }
  std::vector<uint16_t> h = a, bf = bf_a;
  reduce_into(h.data(), b.data(), n, RELAX_FLOAT16, RELAX_OP_SUM);
  reduce_into(bf.data(), bf_b.data(), n, RELAX_BFLOAT16, RELAX_OP_SUM);
  int wrong = 0;
  for (int i = 0; i < n; ++i) {
    wrong += h[i] != relax::float_to_half(relax::half_to_float(a[i]) + relax::half_to_float(b[i]));
    wrong += bf[i] != relax::float_to_bf16(relax::bf16_to_float(bf_a[i]) + relax::bf16_to_float(bf_b[i]));
  }
  CHECK_EQ(wrong, 0);
}

TEST(float_min_max_propagate_nan) {
  float a[3] = {1.0f, NAN, 2.0f};
  float b[3] = {NAN, 0.0f, 3.0f};
  reduce_into(a, b, 3, RELAX_FLOAT32, RELAX_OP_MIN);
  CHECK(std::isnan(a[0]));
  CHECK(std::isnan(a[1]));
  CHECK_EQ(a[2], 2.0f);
}

TEST(integer_scaling_truncates_toward_zero_like_horovod) {
  int32_t v[4] = {7, -7, 9, -1};
  scale_buffer(v, 4, RELAX_INT32, 0.5);
  CHECK_EQ(v[0], 3);
  CHECK_EQ(v[1], -3);
  CHECK_EQ(v[2], 4);
  CHECK_EQ(v[3], 0);
  float f[2] = {3.0f, -1.5f};
  scale_buffer(f, 2, RELAX_FLOAT32, 2.0);
  CHECK_EQ(f[0], 6.0f);
  CHECK_EQ(f[1], -3.0f);
}

TEST(an_average_divides_where_multiplying_by_the_rounded_reciprocal_is_an_ulp_off) {
  // fl(3x) * fl(1/3) != x for these float32 values; fl(3x) / 3 == x, as x * 3 / 3 in any framework.
  float x[3] = {-15.334710121154785f, -18.160173416137695f, 7.628662586212158f};
  float summed[3], by_product[3];
  for (int i = 0; i < 3; ++i) summed[i] = by_product[i] = x[i] + x[i] + x[i];
  scale_buffer(summed, 3, RELAX_FLOAT32, 1.0 / 3.0);
  for (int i = 0; i < 3; ++i) {
    CHECK_EQ(summed[i], x[i]);
    by_product[i] *= static_cast<float>(1.0 / 3.0);
    CHECK(by_product[i] != x[i]);  // the negative control: multiplying is an ulp off here
  }
  int64_t ints[3] = {9, -9, 8};
  scale_buffer(ints, 3, RELAX_INT64, 1.0 / 3.0);
  CHECK_EQ(ints[0], int64_t{3});
  CHECK_EQ(ints[1], int64_t{-3});
  CHECK_EQ(ints[2], int64_t{2});
  float other[1] = {10.0f};
  scale_buffer(other, 1, RELAX_FLOAT32, 0.3);  // not a reciprocal: multiplied
  CHECK_EQ(other[0], 10.0f * 0.3f);
}

TEST(identity_fill_is_neutral_for_each_op) {
  float x[2];
  fill_identity(x, 2, RELAX_FLOAT32, RELAX_OP_SUM);
  CHECK_EQ(x[0], 0.0f);
  fill_identity(x, 2, RELAX_FLOAT32, RELAX_OP_PRODUCT);
  CHECK_EQ(x[1], 1.0f);
  fill_identity(x, 2, RELAX_FLOAT32, RELAX_OP_MIN);
  CHECK(std::isinf(x[0]) && x[0] > 0);
  int8_t i8[1];
  fill_identity(i8, 1, RELAX_INT8, RELAX_OP_MAX);
  CHECK_EQ(static_cast<int>(i8[0]), -128);
  uint16_t h[1];
  fill_identity(h, 1, RELAX_FLOAT16, RELAX_OP_MAX);
  CHECK(std::isinf(relax::half_to_float(h[0])));
}
