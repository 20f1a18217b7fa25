// What the CPU can run, for kernels chosen at run time (same bits on every path).
#pragma once

namespace relax {

// True when the CPU and the OS support AVX (256-bit float vectors); checked once.
inline bool cpu_has_avx() {
#if defined(__x86_64__)
  static const bool avx = __builtin_cpu_supports("avx");
  return avx;
#else
  return false;
#endif
}

// True when the CPU and the OS support AVX2 (256-bit integer vectors); checked once.
inline bool cpu_has_avx2() {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
#else
  return false;
#endif
}

}  // namespace relax
