// Compiled and run by `make cuda-check` (no GPU needed: only the registries are read). Every
// CUDA kernel registration names a codec the CPU registry has, and the built-in codecs all have
// kernels. Exit status: the number of problems.
#include <cstdio>
#include <string>

#include "codecs/codec.h"
#include "codecs/cuda_codec.cuh"

int main() {
  int problems = 0;
  for (const relax::CodecInfo& info : relax::registered_codecs()) {
    const bool on_gpu = relax::cuda::codec_kernels(info.name) != nullptr;
    std::printf("codec %-6s id %d: CUDA kernels %s\n", info.name, info.id, on_gpu ? "registered" : "none");
    if (!on_gpu && (std::string(info.name) == "fp16" || info.name == std::string("uint8") ||
                    info.name == std::string("sign"))) {
      ++problems;
    }
  }
  for (const relax::cuda::CodecKernels& kernels : relax::cuda::all_codec_kernels()) {
    if (relax::codec_id(kernels.name) < 0) {
      std::printf("CUDA kernels registered for '%s', which no CPU codec is called\n", kernels.name);
      ++problems;
    }
  }
  return problems;
}
