// Launchers of the codec kernels (codecs.cu): device pointers, asynchronous on `stream`, same
// encoded layouts as the CPU codecs. `accumulate` adds the decoded values to `out`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace relax {
namespace cuda {

cudaError_t encode_fp16(const float* in, int64_t n, uint8_t* out, cudaStream_t stream);
cudaError_t decode_fp16(const uint8_t* in, int64_t n, float* out, cudaStream_t stream);
cudaError_t encode_uint8(const float* in, int64_t n, uint8_t* out, cudaStream_t stream);
cudaError_t decode_uint8(const uint8_t* in, int64_t n, float* out, bool accumulate, cudaStream_t stream);
cudaError_t encode_sign(const float* in, int64_t n, uint8_t* out, cudaStream_t stream);
cudaError_t decode_sign(const uint8_t* in, int64_t n, float* out, bool accumulate, cudaStream_t stream);

}  // namespace cuda
}  // namespace relax
