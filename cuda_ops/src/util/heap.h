// How the C library's allocator treats large freed blocks, for the whole process.
#pragma once

#include <cstdint>

namespace relax {

// Lets blocks of up to 32 MiB come from the heap and keeps up to `keep_bytes` of freed memory
// mapped (glibc's M_MMAP_THRESHOLD and M_TRIM_THRESHOLD), so a tensor of a few MiB allocated and
// freed every step reuses pages instead of mapping fresh ones. With glibc's defaults such a
// block was unmapped at every free and its next allocation page-faulted on each first touch:
// an 8 MiB temporary cost 2-4 ms instead of 0.4. Returns false where the C library is not glibc
// or refused a setting (nothing is changed then, or only the first setting).
bool keep_freed_memory(int64_t keep_bytes);

}  // namespace relax
