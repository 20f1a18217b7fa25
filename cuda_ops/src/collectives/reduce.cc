#include "collectives/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "relax/relax.h"
#include "util/half.h"

namespace relax {
namespace {

// Plain loops: GCC vectorizes them at -O3 (with a runtime overlap check, since dst may alias a);
// the reduction is memory bound.
template <typename T, typename F>
void combine(T* dst, const T* a, const T* b, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f(a[i], b[i]);
}

template <typename T>
void reduce_typed(void* dst, const void* a, const void* b, int64_t n, int32_t op) {
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  constexpr bool floating = std::is_floating_point<T>::value;
  switch (op) {
    case RELAX_OP_SUM:
    case RELAX_OP_AVERAGE: combine(d, x, y, n, [](T u, T v) { return static_cast<T>(u + v); }); break;
    case RELAX_OP_PRODUCT: combine(d, x, y, n, [](T u, T v) { return static_cast<T>(u * v); }); break;
    case RELAX_OP_MIN:
      // Floats propagate NaN, as torch and numpy do.
      combine(d, x, y, n, [](T u, T v) { return floating && (u != u || v != v) ? static_cast<T>(u + v) : (v < u ? v : u); });
      break;
    case RELAX_OP_MAX:
      combine(d, x, y, n, [](T u, T v) { return floating && (u != u || v != v) ? static_cast<T>(u + v) : (v > u ? v : u); });
      break;
    default: throw std::invalid_argument("unsupported reduction op");
  }
}

// 16-bit floats: widen in blocks so the float loop vectorizes, then round once.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void reduce_16bit(void* dst, const void* a, const void* b, int64_t n, int32_t op) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  constexpr int64_t kBlock = 1024;
  float fx[kBlock], fy[kBlock];
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t m = std::min(kBlock, n - start);
    for (int64_t i = 0; i < m; ++i) {
      fx[i] = ToFloat(x[start + i]);
      fy[i] = ToFloat(y[start + i]);
    }
    reduce_typed<float>(fx, fx, fy, m, op);
    for (int64_t i = 0; i < m; ++i) d[start + i] = FromFloat(fx[i]);
  }
}

// n when `factor` is exactly 1/n (an Average over n ranks), else 0. Such a factor is applied as a
// division: x / n is the correctly rounded quotient that the frameworks' own x / n gives, where
// x * (1/n) may be an ulp off (Horovod multiplies, and its 3-rank zero-tolerance tests fail on it).
int64_t exact_divisor(double factor) {
  if (!(factor > 0.0 && factor < 1.0)) return 0;
  const double n = std::nearbyint(1.0 / factor);
  return n >= 2.0 && n <= 16777216.0 && 1.0 / n == factor ? static_cast<int64_t>(n) : 0;
}

// Division is the costly part of an Average: dispatched to AVX2 where the CPU has it (the default
// build targets SSE2, whose divisions are half as wide).
template <typename T>
__attribute__((target_clones("avx2", "default"))) void divide_all(T* p, int64_t n, T d) {
  for (int64_t i = 0; i < n; ++i) p[i] /= d;
}

template <typename T>
void scale_typed(void* buf, int64_t n, double factor) {
  T* p = static_cast<T*>(buf);
  const int64_t divisor = exact_divisor(factor);
  if (std::is_floating_point<T>::value) {
    if (divisor) {
      divide_all<T>(p, n, static_cast<T>(divisor));
    } else {
      const T f = static_cast<T>(factor);
      for (int64_t i = 0; i < n; ++i) p[i] *= f;
    }
  } else if (divisor) {  // integer division truncates toward zero, as Horovod's scaling does
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<int64_t>(p[i]) / divisor);
  } else {
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(factor * static_cast<double>(p[i]));
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void scale_16bit(void* buf, int64_t n, double factor) {
  uint16_t* p = static_cast<uint16_t*>(buf);
  const int64_t divisor = exact_divisor(factor);
  const float f = static_cast<float>(divisor ? static_cast<double>(divisor) : factor);
  if (divisor) {
    for (int64_t i = 0; i < n; ++i) p[i] = FromFloat(ToFloat(p[i]) / f);
  } else {
    for (int64_t i = 0; i < n; ++i) p[i] = FromFloat(ToFloat(p[i]) * f);
  }
}

template <typename T>
void fill_typed(void* buf, int64_t n, T value) {
  std::fill_n(static_cast<T*>(buf), n, value);
}

template <typename T>
T identity_of(int32_t op) {
  switch (op) {
    case RELAX_OP_PRODUCT: return T(1);
    case RELAX_OP_MIN:
      return std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                  : std::numeric_limits<T>::max();
    case RELAX_OP_MAX:
      return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                  : std::numeric_limits<T>::lowest();
    default: return T(0);
  }
}

}  // namespace

void reduce_pair(void* dst, const void* a, const void* b, int64_t count, int32_t dtype, int32_t op) {
  if (count <= 0) return;
  switch (dtype) {
    case RELAX_FLOAT32: reduce_typed<float>(dst, a, b, count, op); break;
    case RELAX_FLOAT64: reduce_typed<double>(dst, a, b, count, op); break;
    case RELAX_INT32: reduce_typed<int32_t>(dst, a, b, count, op); break;
    case RELAX_INT64: reduce_typed<int64_t>(dst, a, b, count, op); break;
    case RELAX_UINT8: reduce_typed<uint8_t>(dst, a, b, count, op); break;
    case RELAX_INT8: reduce_typed<int8_t>(dst, a, b, count, op); break;
    case RELAX_INT16: reduce_typed<int16_t>(dst, a, b, count, op); break;
    case RELAX_UINT16: reduce_typed<uint16_t>(dst, a, b, count, op); break;
    case RELAX_FLOAT16: reduce_16bit<half_to_float, float_to_half>(dst, a, b, count, op); break;
    case RELAX_BFLOAT16: reduce_16bit<bf16_to_float, float_to_bf16>(dst, a, b, count, op); break;
    default: throw std::invalid_argument("unsupported dtype for reduction");
  }
}

void scale_buffer(void* buf, int64_t count, int32_t dtype, double factor) {
  if (factor == 1.0 || count <= 0) return;
  switch (dtype) {
    case RELAX_FLOAT32: scale_typed<float>(buf, count, factor); break;
    case RELAX_FLOAT64: scale_typed<double>(buf, count, factor); break;
    case RELAX_INT32: scale_typed<int32_t>(buf, count, factor); break;
    case RELAX_INT64: scale_typed<int64_t>(buf, count, factor); break;
    case RELAX_UINT8: scale_typed<uint8_t>(buf, count, factor); break;
    case RELAX_INT8: scale_typed<int8_t>(buf, count, factor); break;
    case RELAX_INT16: scale_typed<int16_t>(buf, count, factor); break;
    case RELAX_UINT16: scale_typed<uint16_t>(buf, count, factor); break;
    case RELAX_FLOAT16: scale_16bit<half_to_float, float_to_half>(buf, count, factor); break;
    case RELAX_BFLOAT16: scale_16bit<bf16_to_float, float_to_bf16>(buf, count, factor); break;
    default: throw std::invalid_argument("unsupported dtype for scaling");
  }
}

void fill_identity(void* buf, int64_t count, int32_t dtype, int32_t op) {
  if (count <= 0) return;
  switch (dtype) {
    case RELAX_FLOAT32: fill_typed<float>(buf, count, identity_of<float>(op)); break;
    case RELAX_FLOAT64: fill_typed<double>(buf, count, identity_of<double>(op)); break;
    case RELAX_INT32: fill_typed<int32_t>(buf, count, identity_of<int32_t>(op)); break;
    case RELAX_INT64: fill_typed<int64_t>(buf, count, identity_of<int64_t>(op)); break;
    case RELAX_UINT8: fill_typed<uint8_t>(buf, count, identity_of<uint8_t>(op)); break;
    case RELAX_INT8: fill_typed<int8_t>(buf, count, identity_of<int8_t>(op)); break;
    case RELAX_INT16: fill_typed<int16_t>(buf, count, identity_of<int16_t>(op)); break;
    case RELAX_UINT16: fill_typed<uint16_t>(buf, count, identity_of<uint16_t>(op)); break;
    case RELAX_FLOAT16:
      fill_typed<uint16_t>(buf, count, float_to_half(identity_of<float>(op)));
      break;
    case RELAX_BFLOAT16:
      fill_typed<uint16_t>(buf, count, float_to_bf16(identity_of<float>(op)));
      break;
    default: fill_typed<uint8_t>(buf, count * 1, 0); break;
  }
}

}  // namespace relax
