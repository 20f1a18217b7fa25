// uint8 (min-max) on the GPU: float min, float max, n bytes (layout of uint8_codec.cc).
#include <cstdint>

#include "codecs/codec_math.h"
#include "codecs/cuda_codec.cuh"

namespace relax {
namespace cuda {
namespace {

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

cudaError_t encode(const float* in, int64_t n, uint8_t* out, cudaStream_t stream) {
  float* header = reinterpret_cast<float*>(out);
  minmax_header_kernel<<<1, kThreads, 0, stream>>>(in, n, header);
  if (n > 0) minmax_quantize_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, n, header, out + 8);
  return cudaGetLastError();
}

cudaError_t decode(const uint8_t* in, int64_t n, float* out, bool accumulate, cudaStream_t stream) {
  const float* header = reinterpret_cast<const float*>(in);
  if (n > 0) minmax_dequantize_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in + 8, n, header, out, accumulate);
  return cudaGetLastError();
}

const CodecKernelsRegistration kRegistration({"uint8", encode, decode});

}  // namespace
}  // namespace cuda
}  // namespace relax
