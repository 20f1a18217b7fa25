// CUDA side of the codecs, for GPU builds of compressed collectives: each codec's kernels sit
// beside its CPU file (<name>_codec.cu next to <name>_codec.cc) and register their launchers
// under the codec's name, so a GPU path finds them from the codec the CPU registry resolved.
// Launchers take device pointers, run asynchronously on `stream` and use the CPU codec's encoded
// layout; `accumulate` adds the decoded values to `out`. The per-element math is the CPU path's
// (codecs/codec_math.h, util/half.h), so the CPU tests exercise what these kernels compute.
// No GPU exists on the build machines: `make test` compiles these files with nvcc only.
//
// Why they stay compile-checked and are not plugged into the transports (issue #51): the ring's
// links (collectives/ring_link.h), shared memory and MPI's own collectives all move and reduce
// host memory, and the bindings hand the core CPU tensors only (relaxlib_torch/csrc/binding.cc
// refuses others). Plugging these in needs device buffers as a memory space the transports accept (a
// CUDA-aware MPI or staging copies, streams the collectives wait on) and a GPU to test it on;
// until then a GPU path would be code nothing calls. What they compute is the CPU codecs' math,
// tested on the CPU; `make cuda-check` keeps them compiling and registered under a CPU codec.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace relax {
namespace cuda {

struct CodecKernels {
  const char* name;  // the CPU codec's name
  cudaError_t (*encode)(const float* in, int64_t n, uint8_t* out, cudaStream_t stream);
  cudaError_t (*decode)(const uint8_t* in, int64_t n, float* out, bool accumulate, cudaStream_t stream);
};

// Registers a codec's kernels when the library loads (one per .cu file).
class CodecKernelsRegistration {
 public:
  explicit CodecKernelsRegistration(const CodecKernels& kernels);
};

// The kernels registered under `name`, or nullptr.
const CodecKernels* codec_kernels(const char* name);
// Every registration, in load order.
const std::vector<CodecKernels>& all_codec_kernels();

constexpr int kThreads = 256;

inline int blocks_for(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

}  // namespace cuda
}  // namespace relax
