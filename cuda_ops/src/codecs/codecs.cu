// CUDA kernels of the codecs, for GPU builds of compressed collectives. The per-element math is
// the CPU path's (hd/codec_math.h, hd/half.h), so the CPU tests exercise what these kernels
// compute. The encoded layouts are those of cuda_ops/src/codecs/*.cc:
//   fp16:  n halves
//   uint8: float min, float max, n bytes
//   sign:  float rms(x), ceil(n/8) bytes of sign bits (bit i of byte i/8 for element i)
// No GPU exists on the build machines: CI compiles this file with nvcc only.
#include <cuda_runtime.h>

#include <cstdint>

#include "codecs/codecs.cuh"
#include "codecs/codec_math.h"

namespace relax {
namespace cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

__global__ void fp16_encode_kernel(const float* in, int64_t n, uint16_t* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = codec_math::fp16_encode(in[i]);
}

__global__ void fp16_decode_kernel(const uint16_t* in, int64_t n, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = codec_math::fp16_decode(in[i]);
}

// One block reduces the chunk's min and max (chunks are per-rank slices: one block suffices
// for the header; the per-element kernels use the whole grid).
__global__ void minmax_header_kernel(const float* in, int64_t n, float* header) {
  __shared__ float lows[kThreads];
  __shared__ float highs[kThreads];
  float lo = n > 0 ? in[0] : 0.0f, hi = lo;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    lo = fminf(lo, in[i]);
    hi = fmaxf(hi, in[i]);
  }
  lows[threadIdx.x] = lo;
  highs[threadIdx.x] = hi;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      lows[threadIdx.x] = fminf(lows[threadIdx.x], lows[threadIdx.x + stride]);
      highs[threadIdx.x] = fmaxf(highs[threadIdx.x], highs[threadIdx.x + stride]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    header[0] = lows[0];
    header[1] = highs[0];
  }
}

__global__ void minmax_quantize_kernel(const float* in, int64_t n, const float* header, uint8_t* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float step = codec_math::minmax_step(header[0], header[1]);
  const float inverse = step > 0.0f ? 1.0f / step : 0.0f;
  out[i] = codec_math::minmax_quantize(in[i], header[0], inverse);
}

__global__ void minmax_dequantize_kernel(const uint8_t* q, int64_t n, const float* header, float* out,
                                         bool accumulate) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float value = codec_math::minmax_dequantize(q[i], header[0], codec_math::minmax_step(header[0], header[1]));
  out[i] = accumulate ? out[i] + value : value;
}

__global__ void sign_scale_kernel(const float* in, int64_t n, float* scale) {
  __shared__ double sums[kThreads];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += static_cast<double>(in[i]) * in[i];
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *scale = codec_math::sign_scale(sums[0], n);
}

// Thread b packs the signs of elements 8b..8b+7 into byte b.
__global__ void sign_pack_kernel(const float* in, int64_t n, uint8_t* bits) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b * 8 >= n) return;
  uint8_t byte = 0;
  for (int j = 0; j < 8 && b * 8 + j < n; ++j) byte |= static_cast<uint8_t>(codec_math::sign_bit(in[b * 8 + j]) << j);
  bits[b] = byte;
}

__global__ void sign_unpack_kernel(const uint8_t* bits, int64_t n, const float* scale, float* out, bool accumulate) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float value = codec_math::sign_value(codec_math::packed_bit(bits, i), *scale);
  out[i] = accumulate ? out[i] + value : value;
}

}  // namespace

// Host launchers: device pointers in and out, asynchronous on `stream`.

cudaError_t encode_fp16(const float* in, int64_t n, uint8_t* out, cudaStream_t stream) {
  if (n > 0) fp16_encode_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, n, reinterpret_cast<uint16_t*>(out));
  return cudaGetLastError();
}

cudaError_t decode_fp16(const uint8_t* in, int64_t n, float* out, cudaStream_t stream) {
  if (n > 0) fp16_decode_kernel<<<blocks_for(n), kThreads, 0, stream>>>(reinterpret_cast<const uint16_t*>(in), n, out);
  return cudaGetLastError();
}

cudaError_t encode_uint8(const float* in, int64_t n, uint8_t* out, cudaStream_t stream) {
  float* header = reinterpret_cast<float*>(out);
  minmax_header_kernel<<<1, kThreads, 0, stream>>>(in, n, header);
  if (n > 0) minmax_quantize_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, n, header, out + 8);
  return cudaGetLastError();
}

cudaError_t decode_uint8(const uint8_t* in, int64_t n, float* out, bool accumulate, cudaStream_t stream) {
  const float* header = reinterpret_cast<const float*>(in);
  if (n > 0) minmax_dequantize_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in + 8, n, header, out, accumulate);
  return cudaGetLastError();
}

cudaError_t encode_sign(const float* in, int64_t n, uint8_t* out, cudaStream_t stream) {
  float* scale = reinterpret_cast<float*>(out);
  sign_scale_kernel<<<1, kThreads, 0, stream>>>(in, n, scale);
  const int64_t bytes = (n + 7) / 8;
  if (bytes > 0) sign_pack_kernel<<<blocks_for(bytes), kThreads, 0, stream>>>(in, n, out + 4);
  return cudaGetLastError();
}

cudaError_t decode_sign(const uint8_t* in, int64_t n, float* out, bool accumulate, cudaStream_t stream) {
  const float* scale = reinterpret_cast<const float*>(in);
  if (n > 0) sign_unpack_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in + 4, n, scale, out, accumulate);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace relax
