// fp16 on the GPU: n halves (layout of fp16_codec.cc).
#include <cstdint>

#include "codecs/codec_math.h"
#include "codecs/cuda_codec.cuh"

namespace relax {
namespace cuda {
namespace {

__global__ void fp16_encode_kernel(const float* in, int64_t n, uint16_t* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = codec_math::fp16_encode(in[i]);
}

__global__ void fp16_decode_kernel(const uint16_t* in, int64_t n, float* out, bool accumulate) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float value = codec_math::fp16_decode(in[i]);
  out[i] = accumulate ? out[i] + value : value;
}

cudaError_t encode(const float* in, int64_t n, uint8_t* out, cudaStream_t stream) {
  if (n > 0) fp16_encode_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, n, reinterpret_cast<uint16_t*>(out));
  return cudaGetLastError();
}

cudaError_t decode(const uint8_t* in, int64_t n, float* out, bool accumulate, cudaStream_t stream) {
  if (n > 0) {
    fp16_decode_kernel<<<blocks_for(n), kThreads, 0, stream>>>(reinterpret_cast<const uint16_t*>(in), n, out,
                                                                accumulate);
  }
  return cudaGetLastError();
}

const CodecKernelsRegistration kRegistration({"fp16", encode, decode});

}  // namespace
}  // namespace cuda
}  // namespace relax
