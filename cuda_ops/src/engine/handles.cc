#include "engine/handles.h"

#include <algorithm>
#include <chrono>

#include "util/types.h"

namespace relax {

relax_handle_t HandleTable::create(bool negotiated) {
  std::lock_guard<std::mutex> lock(mutex_);
  const relax_handle_t h = next_++;
  HandleState state;
  state.negotiated = negotiated;
  states_.emplace(h, std::move(state));
  return h;
}

void HandleTable::enter_wait(bool negotiated) {
  if (!negotiated) return;
  const double now = steady_seconds();
  if (negotiated_waiters_ == 0 && now - last_wait_exit_ > kWaitGapSeconds) wait_started_ = now;
  ++negotiated_waiters_;
}

void HandleTable::leave_wait(bool negotiated) {
  if (!negotiated) return;
  --negotiated_waiters_;
  last_wait_exit_ = steady_seconds();
}

void HandleTable::note_external_wait(bool begin) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (begin) {
    waiting_callers_.fetch_add(1);
    enter_wait(true);
  } else {
    waiting_callers_.fetch_sub(1);
    leave_wait(true);
  }
}

WaitState HandleTable::wait_state(double now) {
  std::lock_guard<std::mutex> lock(mutex_);
  WaitState w;
  w.waiting = negotiated_waiters_ > 0 || now - last_wait_exit_ < kWaitGapSeconds;
  w.since = wait_started_;
  w.last_completion = last_completion_;
  return w;
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
    last_completion_ = coarse_seconds();  // for the deadlock check, which counts seconds
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
  if (it->second.done) return it->second.status;  // nothing to wait for: not a blocking wait
  const bool negotiated = it->second.negotiated;
  WaitingCaller waiting(*this);
  enter_wait(negotiated);
  cv_.wait(lock, [&] {
    it = states_.find(h);
    return it == states_.end() || it->second.done;
  });
  leave_wait(negotiated);
  return it == states_.end() ? RELAX_ERR_UNKNOWN_HANDLE : it->second.status;
}

int HandleTable::wait_for(relax_handle_t h, int32_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = states_.find(h);
  if (it == states_.end()) return RELAX_ERR_UNKNOWN_HANDLE;
  if (it->second.done) return it->second.status;
  const bool negotiated = it->second.negotiated;
  WaitingCaller waiting(*this);
  enter_wait(negotiated);
  const bool finished = cv_.wait_for(lock, std::chrono::milliseconds(std::max(timeout_ms, 0)), [&] {
    it = states_.find(h);
    return it == states_.end() || it->second.done;
  });
  leave_wait(negotiated);
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
