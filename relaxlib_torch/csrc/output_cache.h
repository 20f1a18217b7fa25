// Outputs of torch collectives whose shape the engine decides.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace relaxlib_torch {

// Outputs whose shape the engine decides (allgather, reducescatter, alltoall) come from a small
// cache of recently freed large buffers: a fresh multi-MiB allocation is mmapped and page-faulted
// on every call, which costs more than the collective itself at 64 MiB. Bounded by
// RELAX_OUTPUT_CACHE_MB (default 512); buffers under 1 MiB use the normal allocator.
class OutputCache {
 public:
  static OutputCache& instance();

  // A tensor of `shape` and `dtype` (contents undefined).
  at::Tensor empty(at::IntArrayRef shape, c10::ScalarType dtype);

 private:
  static constexpr size_t kMinBytes = 1 << 20;
  struct Free {
    void operator()(uint8_t* p) const;
  };
  struct Buffer {
    std::unique_ptr<uint8_t, Free> data;
    size_t bytes = 0;
  };

  OutputCache();
  Buffer take(size_t bytes);
  void give_back(Buffer buffer);

  std::mutex mutex_;
  std::multimap<size_t, Buffer> free_;
  size_t cached_bytes_ = 0;
  size_t limit_ = 0;
};

}  // namespace relaxlib_torch
