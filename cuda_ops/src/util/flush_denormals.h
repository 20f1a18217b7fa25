// Subnormal floats (|x| < 2^-126) read and written as zero on this thread for a scope.
//
// Lossy codecs with error feedback drive residuals towards zero geometrically where a chunk's
// gradient vanishes (each re-encoding keeps about 1/255 of the last error with uint8), through
// the subnormal range, where x86 arithmetic takes a microcode assist per operation: the codec
// passes then ran 10-15x slower. Values that small carry nothing at any codec's resolution, so
// compressed work flushes them; exact collectives never do (their sums must match numpy's).
#pragma once

#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace relax {

class FlushDenormals {
 public:
  FlushDenormals() {
#if defined(__SSE__) || defined(__x86_64__)
    saved_ = _mm_getcsr();
    _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero);
#elif defined(__aarch64__)
    saved_ = __builtin_aarch64_get_fpcr();
    __builtin_aarch64_set_fpcr(saved_ | kFlushToZero);
#endif
  }
  ~FlushDenormals() {
#if defined(__SSE__) || defined(__x86_64__)
    _mm_setcsr(saved_);
#elif defined(__aarch64__)
    __builtin_aarch64_set_fpcr(saved_);
#endif
  }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
#if defined(__SSE__) || defined(__x86_64__)
  static constexpr unsigned kFlushToZero = 0x8000;      // MXCSR.FTZ: subnormal results become 0
  static constexpr unsigned kDenormalsAreZero = 0x0040;  // MXCSR.DAZ: subnormal inputs read as 0
#elif defined(__aarch64__)
  static constexpr unsigned kFlushToZero = 1u << 24;  // FPCR.FZ: both, for single and double
#endif
  unsigned saved_ = 0;
};

}  // namespace relax
