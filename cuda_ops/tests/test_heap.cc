// keep_freed_memory: a few-MiB block freed by one step is reused by the next, not unmapped.
#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "check.h"
#include "util/heap.h"

namespace {
void* volatile escaped;  // keeps the compiler from eliding the allocation
}  // namespace

TEST(freed_blocks_of_a_few_mib_stay_in_the_heap) {
  CHECK(relax::keep_freed_memory(int64_t{64} << 20));
  constexpr size_t kBlock = 8u << 20;
  const size_t mapped_before = mallinfo2().hblkhd;
  void* block = std::malloc(kBlock);
  escaped = block;
  CHECK(block != nullptr);
  std::memset(block, 1, kBlock);
  CHECK(mallinfo2().hblkhd < mapped_before + kBlock);  // served by the heap, not mapped alone
  std::free(block);
  CHECK(mallinfo2().fordblks >= kBlock);  // kept for the next allocation
}
