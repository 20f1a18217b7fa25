// Completion state of submitted requests, shared between the engine (producer) and callers
// that poll or wait (framework threads).
#pragma once

#include <atomic>
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
  bool negotiated = false;               // an engine request (peers must submit it too)
};

// Whether a caller thread is blocked waiting for a negotiated request, for the engine's deadlock
// check: `since` is when that wait began (a waiter that comes back within kWaitGapSeconds, as
// an interruptible wait in slices does, keeps waiting), `last_completion` the latest completion
// of any request on this rank.
struct WaitState {
  bool waiting = false;
  double since = 0;
  double last_completion = 0;
};

class HandleTable {
 public:
  // `negotiated`: the request goes through the engine's negotiation (waits on it count as blocked).
  relax_handle_t create(bool negotiated = false);
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
  // Whether some thread is (still) waiting for a negotiated request, at steady time `now`.
  WaitState wait_state(double now);
  // A caller blocked on negotiated requests outside wait()/wait_for() (a framework's own
  // synchronous execution of an op, e.g. TensorFlow eagerly) says when it starts and stops.
  void note_external_wait(bool begin);

  static constexpr double kWaitGapSeconds = 0.5;

  // Threads blocked in wait() / wait_for() or in a framework's synchronous op
  // (note_external_wait), or running the rounds of their own request (WaitingCaller). While
  // there are none the framework's threads are presumably computing, and a collective waiting
  // for a peer gives up its core at once instead of polling first.
  const std::atomic<int>& waiting_callers() const { return waiting_callers_; }

  // Counts the constructing thread as a waiting caller for its lifetime.
  class WaitingCaller {
   public:
    explicit WaitingCaller(HandleTable& table) : count_(table.waiting_callers_) { count_.fetch_add(1); }
    ~WaitingCaller() { count_.fetch_sub(1); }
    WaitingCaller(const WaitingCaller&) = delete;
    WaitingCaller& operator=(const WaitingCaller&) = delete;

   private:
    std::atomic<int>& count_;
  };

 private:
  // Under mutex_: a waiter enters or leaves a wait on a request (only negotiated ones count).
  void enter_wait(bool negotiated);
  void leave_wait(bool negotiated);

  std::mutex mutex_;
  std::condition_variable cv_;
  std::unordered_map<relax_handle_t, HandleState> states_;
  relax_handle_t next_ = 1;
  int negotiated_waiters_ = 0;
  double wait_started_ = 0;
  double last_wait_exit_ = -1e300;
  double last_completion_ = 0;
  std::atomic<int> waiting_callers_{0};
};

}  // namespace relax
