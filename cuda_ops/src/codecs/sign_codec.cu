// sign (1-bit) on the GPU: float rms(x), then ceil(n/8) bytes of sign bits, bit i%8 of byte i/8
// for element i (layout of sign_codec.cc).
#include <cstdint>

#include "codecs/codec_math.h"
#include "codecs/cuda_codec.cuh"

namespace relax {
namespace cuda {
namespace {

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

cudaError_t encode(const float* in, int64_t n, uint8_t* out, cudaStream_t stream) {
  float* scale = reinterpret_cast<float*>(out);
  sign_scale_kernel<<<1, kThreads, 0, stream>>>(in, n, scale);
  const int64_t bytes = (n + 7) / 8;
  if (bytes > 0) sign_pack_kernel<<<blocks_for(bytes), kThreads, 0, stream>>>(in, n, out + 4);
  return cudaGetLastError();
}

cudaError_t decode(const uint8_t* in, int64_t n, float* out, bool accumulate, cudaStream_t stream) {
  const float* scale = reinterpret_cast<const float*>(in);
  if (n > 0) sign_unpack_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in + 4, n, scale, out, accumulate);
  return cudaGetLastError();
}

const CodecKernelsRegistration kRegistration({"sign", encode, decode});

}  // namespace
}  // namespace cuda
}  // namespace relax
