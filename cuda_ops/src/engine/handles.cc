#include "engine/handles.h"

#include <algorithm>
#include <chrono>

namespace relax {

relax_handle_t HandleTable::create() {
  std::lock_guard<std::mutex> lock(mutex_);
  const relax_handle_t h = next_++;
  states_.emplace(h, HandleState{});
  return h;
}

void HandleTable::complete(relax_handle_t h, int32_t status, const std::string& message, int64_t result,
                           std::vector<int64_t> received_splits) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = states_.find(h);
    if (it == states_.end()) return;
    it->second.done = true;
    it->second.status = status;
    it->second.message = message;
    it->second.result = result;
    it->second.received_splits = std::move(received_splits);
  }
  cv_.notify_all();
}

int HandleTable::poll(relax_handle_t h) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = states_.find(h);
  if (it == states_.end()) return -1;
  return it->second.done ? 1 : 0;
}

int HandleTable::wait(relax_handle_t h) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = states_.find(h);
  if (it == states_.end()) return RELAX_ERR_UNKNOWN_HANDLE;
  cv_.wait(lock, [&] {
    it = states_.find(h);
    return it == states_.end() || it->second.done;
  });
  return it == states_.end() ? RELAX_ERR_UNKNOWN_HANDLE : it->second.status;
}

int HandleTable::wait_for(relax_handle_t h, int32_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = states_.find(h);
  if (it == states_.end()) return RELAX_ERR_UNKNOWN_HANDLE;
  const bool finished = cv_.wait_for(lock, std::chrono::milliseconds(std::max(timeout_ms, 0)), [&] {
    it = states_.find(h);
    return it == states_.end() || it->second.done;
  });
  if (!finished) return RELAX_PENDING;
  return it == states_.end() ? RELAX_ERR_UNKNOWN_HANDLE : it->second.status;
}

bool HandleTable::get(relax_handle_t h, HandleState& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = states_.find(h);
  if (it == states_.end()) return false;
  out = it->second;
  return true;
}

const char* HandleTable::message(relax_handle_t h) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = states_.find(h);
  return it == states_.end() ? "" : it->second.message.c_str();
}

void HandleTable::release(relax_handle_t h) {
  std::lock_guard<std::mutex> lock(mutex_);
  states_.erase(h);
}

}  // namespace relax
