#include "reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "hd/half.h"
#include "relax/relax.h"

namespace relax {
namespace {

// Plain loops over restrict pointers: GCC vectorizes them at -O3 (the sum is memory bound).
template <typename T>
void sum_into(T* __restrict dst, const T* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}
template <typename T>
void product_into(T* __restrict dst, const T* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] *= src[i];
}
template <typename T>
void min_into(T* __restrict dst, const T* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i] < dst[i] ? src[i] : dst[i];
}
template <typename T>
void max_into(T* __restrict dst, const T* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i] > dst[i] ? src[i] : dst[i];
}

// NaN-propagating min/max for floats (torch and numpy propagate NaN).
template <typename T>
void fmin_into(T* __restrict dst, const T* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T a = dst[i], b = src[i];
    dst[i] = (a != a || b != b) ? a + b : (b < a ? b : a);
  }
}
template <typename T>
void fmax_into(T* __restrict dst, const T* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T a = dst[i], b = src[i];
    dst[i] = (a != a || b != b) ? a + b : (b > a ? b : a);
  }
}

template <typename T>
void reduce_typed(void* dst, const void* src, int64_t n, int32_t op) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  constexpr bool floating = std::is_floating_point<T>::value;
  switch (op) {
    case RELAX_OP_SUM:
    case RELAX_OP_AVERAGE: sum_into(d, s, n); break;
    case RELAX_OP_PRODUCT: product_into(d, s, n); break;
    case RELAX_OP_MIN: floating ? fmin_into(d, s, n) : min_into(d, s, n); break;
    case RELAX_OP_MAX: floating ? fmax_into(d, s, n) : max_into(d, s, n); break;
    default: throw std::invalid_argument("unsupported reduction op");
  }
}

// 16-bit floats: widen in blocks so the float loop vectorizes, then round once.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void reduce_16bit(void* dst, const void* src, int64_t n, int32_t op) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  constexpr int64_t kBlock = 1024;
  float a[kBlock], b[kBlock];
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t m = std::min(kBlock, n - start);
    for (int64_t i = 0; i < m; ++i) {
      a[i] = ToFloat(d[start + i]);
      b[i] = ToFloat(s[start + i]);
    }
    reduce_typed<float>(a, b, m, op);
    for (int64_t i = 0; i < m; ++i) d[start + i] = FromFloat(a[i]);
  }
}

template <typename T>
void scale_typed(void* buf, int64_t n, double factor) {
  T* p = static_cast<T*>(buf);
  if (std::is_floating_point<T>::value) {
    const T f = static_cast<T>(factor);
    for (int64_t i = 0; i < n; ++i) p[i] *= f;
  } else {
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(factor * static_cast<double>(p[i]));
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void scale_16bit(void* buf, int64_t n, double factor) {
  uint16_t* p = static_cast<uint16_t*>(buf);
  const float f = static_cast<float>(factor);
  for (int64_t i = 0; i < n; ++i) p[i] = FromFloat(ToFloat(p[i]) * f);
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

void reduce_into(void* dst, const void* src, int64_t count, int32_t dtype, int32_t op) {
  if (count <= 0) return;
  switch (dtype) {
    case RELAX_FLOAT32: reduce_typed<float>(dst, src, count, op); break;
    case RELAX_FLOAT64: reduce_typed<double>(dst, src, count, op); break;
    case RELAX_INT32: reduce_typed<int32_t>(dst, src, count, op); break;
    case RELAX_INT64: reduce_typed<int64_t>(dst, src, count, op); break;
    case RELAX_UINT8: reduce_typed<uint8_t>(dst, src, count, op); break;
    case RELAX_INT8: reduce_typed<int8_t>(dst, src, count, op); break;
    case RELAX_FLOAT16: reduce_16bit<half_to_float, float_to_half>(dst, src, count, op); break;
    case RELAX_BFLOAT16: reduce_16bit<bf16_to_float, float_to_bf16>(dst, src, count, op); break;
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
