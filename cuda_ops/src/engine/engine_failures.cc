// The engine's failure paths: stalled requests (warned about, or failed on every member), a
// rank blocked too long, and failing everything pending when the engine stops (engine.cc runs
// the rounds that decide these).
#include <algorithm>
#include <string>

#include "engine/engine.h"
#include "util/logging.h"
#include "util/text.h"

namespace relax {

// A round decided that the engine stops: fails what is pending here and tells the stop listener.
void Engine::finish(int32_t status, const std::string& message) {
  fail_everything(status, message);
  finished_.store(true);
  std::function<void(const std::string&)> listener;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    listener = stop_listener_;
  }
  if (listener) listener(message);
}

// The set's rank 0 warns about requests that only some members submitted, and (with a shutdown
// time) fails them on every member through its round message, so all fail them in one round.
void Engine::inspect_stalls(ProcessSetState& set, RankMessage& mine, double now) {
  const double check = config_.stall_check_seconds;
  const double abort_after = config_.stall_shutdown_seconds;
  if (check <= 0 && abort_after <= 0) return;
  if (now - set.last_stall_check < 1.0) return;
  set.last_stall_check = now;
  const double threshold = check > 0 ? (abort_after > 0 ? std::min(check, abort_after) : check) : abort_after;
  const std::string where = set.id == 0 ? std::string() : " in process set " + std::to_string(set.id);
  for (const StallInfo& info : set.coordinator.stalled(now, threshold)) {
    if (abort_after > 0 && info.waited_seconds >= abort_after) {
      RELAX_LOG(Error, "Request '" << info.name << "'" << where << " stalled for "
                                   << static_cast<int>(info.waited_seconds) << " s (RELAX_STALL_SHUTDOWN_TIME="
                                   << abort_after << "): submitted by ranks " << rank_list(info.submitted)
                                   << ", missing ranks " << rank_list(info.missing) << ". Failing it on every rank.");
      mine.stall_aborts.push_back(info.name);
      continue;
    }
    if (check <= 0 || info.waited_seconds < check) continue;
    double& last = set.last_stall_warning[info.name];
    if (last > 0 && now - last < check) continue;
    last = now;
    RELAX_LOG(Warning, "Stall: request '" << info.name << "'" << where << " was submitted by ranks "
                                          << rank_list(info.submitted) << " " << static_cast<int>(info.waited_seconds)
                                          << " s ago but ranks " << rank_list(info.missing)
                                          << " have not submitted it. One or more ranks may have skipped this "
                                             "operation, run operations in a different order, or be stuck. "
                                             "(RELAX_STALL_CHECK_TIME="
                                          << check << " s; set RELAX_STALL_SHUTDOWN_TIME to fail instead.)");
  }
  if (set.last_stall_warning.size() > 4096) set.last_stall_warning.clear();
}

void Engine::fail_set(ProcessSetState& set, int32_t status, const std::string& message) {
  for (LocalRequest& r : set.fresh) set.pending.emplace(r.desc.name, std::move(r));
  set.fresh.clear();
  for (auto& [name, request] : set.pending) {
    retire(set.id, name);
    finish_request(handles_, request, status, message);
  }
  set.pending.clear();
}

void Engine::fail_everything(int32_t status, const std::string& message) {
  std::vector<std::pair<int32_t, LocalRequest>> late;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
    stop_reason_ = message;
    late.swap(incoming_);
  }
  if (fast_.engaged && sets_.count(0)) leave_fast_path(*sets_[0], false);
  for (auto& [id, request] : late) {
    auto it = sets_.find(id);
    if (it != sets_.end()) it->second->fresh.push_back(std::move(request));
  }
  for (auto& entry : sets_) fail_set(*entry.second, status, message);
}

// Whether a thread here has waited for a negotiated request for RELAX_DEADLOCK_TIME while this
// rank submitted and completed nothing (a rank whose threads all wait cannot submit anything).
bool Engine::blocked_too_long(double now) const {
  const double limit = config_.deadlock_seconds;
  if (limit <= 0 || !any_set_busy()) return false;
  const WaitState wait = handles_.wait_state(now);
  if (!wait.waiting) return false;
  return now - std::max({wait.since, wait.last_completion, last_submission_.load()}) >= limit;
}

}  // namespace relax
