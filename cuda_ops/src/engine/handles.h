// Completion state of submitted requests, shared between the engine (producer) and callers
// that poll or wait (framework threads).
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "relax/relax.h"

namespace relax {

struct HandleState {
  bool done = false;
  int32_t status = RELAX_OK;
  std::string message;
  int64_t result = -1;                   // join: last rank to join
  std::vector<int64_t> received_splits;  // alltoall
};

class HandleTable {
 public:
  relax_handle_t create();
  // Marks a handle done; wakes every waiter.
  void complete(relax_handle_t h, int32_t status, const std::string& message, int64_t result = -1,
                std::vector<int64_t> received_splits = {});
  // 1 done, 0 pending, -1 unknown.
  int poll(relax_handle_t h);
  // Blocks until done; returns the status (RELAX_ERR_UNKNOWN_HANDLE if unknown).
  int wait(relax_handle_t h);
  // wait(), for at most timeout_ms: RELAX_PENDING if still not done.
  int wait_for(relax_handle_t h, int32_t timeout_ms);
  // Copy of a handle's state; false if unknown.
  bool get(relax_handle_t h, HandleState& out);
  // Message pointer valid until release(h).
  const char* message(relax_handle_t h);
  void release(relax_handle_t h);

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::unordered_map<relax_handle_t, HandleState> states_;
  relax_handle_t next_ = 1;
};

}  // namespace relax
