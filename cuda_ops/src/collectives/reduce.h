// Elementwise reduction and scaling kernels over host buffers, one per dtype x op.
#pragma once

#include <cstdint>

namespace relax {

// dst[i] = a[i] (op) b[i] for i < count; `dst` may equal `a`. `op` is Sum, Min, Max or Product
// (Average reduces as Sum; the caller scales afterwards). float16/bfloat16 compute in float32
// and round once.
void reduce_pair(void* dst, const void* a, const void* b, int64_t count, int32_t dtype, int32_t op);

// In place: dst[i] = dst[i] (op) src[i].
inline void reduce_into(void* dst, const void* src, int64_t count, int32_t dtype, int32_t op) {
  reduce_pair(dst, dst, src, count, dtype, op);
}

// buf[i] = factor * buf[i]. Integers are computed in double and truncated toward zero, matching
// Horovod's integer averaging. A factor of exactly 1.0 is a no-op.
void scale_buffer(void* buf, int64_t count, int32_t dtype, double factor);

// Fills `count` elements with the identity of `op` for `dtype` (0 for Sum, 1 for Product,
// +max for Min, lowest for Max); used for ranks that contribute nothing (joined ranks).
void fill_identity(void* buf, int64_t count, int32_t dtype, int32_t op);

}  // namespace relax
