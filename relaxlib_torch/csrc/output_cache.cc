#include "output_cache.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>

namespace relaxlib_torch {

OutputCache& OutputCache::instance() {
  static OutputCache cache;
  return cache;
}

void OutputCache::Free::operator()(uint8_t* p) const { std::free(p); }

OutputCache::OutputCache() {
  const char* env = std::getenv("RELAX_OUTPUT_CACHE_MB");
  limit_ = static_cast<size_t>(env ? std::max(0.0, std::atof(env)) : 512.0) << 20;
}

at::Tensor OutputCache::empty(at::IntArrayRef shape, c10::ScalarType dtype) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  if (bytes < kMinBytes || limit_ == 0) return at::empty(shape, at::TensorOptions().dtype(dtype));
  auto holder = std::make_shared<Buffer>(take(bytes));  // owned by the tensor's deleter
  void* data = holder->data.get();
  return at::from_blob(
      data, shape, [this, holder](void*) { give_back(std::move(*holder)); }, at::TensorOptions().dtype(dtype));
}

OutputCache::Buffer OutputCache::take(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.lower_bound(bytes);
    if (it != free_.end() && it->first <= bytes + bytes / 4) {
      Buffer b = std::move(it->second);
      cached_bytes_ -= b.bytes;
      free_.erase(it);
      return b;
    }
  }
  const size_t rounded = (bytes + 63) / 64 * 64;
  Buffer b{std::unique_ptr<uint8_t, Free>(static_cast<uint8_t*>(std::aligned_alloc(64, rounded))), rounded};
  TORCH_CHECK(b.data, "relaxlib: out of memory allocating ", bytes, " bytes");
  return b;
}

void OutputCache::give_back(Buffer buffer) {
  std::lock_guard<std::mutex> lock(mutex_);
  while (cached_bytes_ + buffer.bytes > limit_ && !free_.empty()) {  // evict the largest
    auto largest = std::prev(free_.end());
    cached_bytes_ -= largest->second.bytes;
    free_.erase(largest);
  }
  if (cached_bytes_ + buffer.bytes <= limit_) {
    cached_bytes_ += buffer.bytes;
    free_.emplace(buffer.bytes, std::move(buffer));
  }
}

}  // namespace relaxlib_torch
