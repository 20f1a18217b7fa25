#include <cstring>
#include <vector>

#include "codecs/cuda_codec.cuh"

namespace relax {
namespace cuda {
namespace {

std::vector<CodecKernels>& registry() {
  static std::vector<CodecKernels> kernels;  // constructed on first use: files register in any order
  return kernels;
}

}  // namespace

CodecKernelsRegistration::CodecKernelsRegistration(const CodecKernels& kernels) { registry().push_back(kernels); }

const std::vector<CodecKernels>& all_codec_kernels() { return registry(); }

const CodecKernels* codec_kernels(const char* name) {
  for (const CodecKernels& k : registry()) {
    if (std::strcmp(k.name, name) == 0) return &k;
  }
  return nullptr;
}

}  // namespace cuda
}  // namespace relax
