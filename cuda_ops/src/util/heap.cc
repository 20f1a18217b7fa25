#include "util/heap.h"

#include <climits>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace relax {

bool keep_freed_memory(int64_t keep_bytes) {
#if defined(__GLIBC__)
  // glibc's largest accepted mmap threshold on 64-bit (HEAP_MAX_SIZE / 2); blocks above it
  // are still mapped and unmapped one by one.
  constexpr int kLargestHeapBlock = 32 << 20;
  const int keep = static_cast<int>(keep_bytes > INT_MAX ? INT_MAX : keep_bytes);
  return mallopt(M_MMAP_THRESHOLD, kLargestHeapBlock) == 1 && mallopt(M_TRIM_THRESHOLD, keep) == 1;
#else
  (void)keep_bytes;
  return false;
#endif
}

}  // namespace relax
