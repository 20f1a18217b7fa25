// The fast path: once the global set's rounds have executed the same cycle of all-reduces
// ScheduleLearner::kCyclesNeeded times (steady_schedule.h), every member follows the learned
// schedule without negotiating. Each bucket runs as soon as this rank has submitted all of its
// tensors; the collective itself waits for the peers, as gloo's and NCCL's do.
//
// Leaving is decided together, inside the data: each bucket's fused buffer carries one more
// element, 1 from a rank that leaves and 0 from the others. A rank leaves when it submits what the
// schedule has no place for (a new name, another shape, a join, a process-set change), when it
// shuts down, or when one of its threads has waited a second for a request whose bucket it can
// never complete. It then runs the next bucket with whatever it holds (zeros elsewhere) and its
// flag set; every member sees a non-zero sum at the same bucket and leaves with it, copying nothing
// out, so each request of that bucket and after is negotiated again with its input intact.
// Divergence therefore never yields a wrong sum: at worst the negotiation that follows reports it
// (mismatched shapes, a request some ranks never submit) on every rank, as it always has.
#include <algorithm>

#include "engine/bucket_size.h"
#include "engine/engine.h"
#include "util/logging.h"

namespace relax {
namespace {

// How long a thread of this rank may wait for a request the fast path holds, with nothing
// submitted or completed meanwhile, before this rank leaves the fast path: the bucket is waiting
// for a tensor that this very rank will submit only after that wait (its program synchronizes
// between tensors the learned cycle ran in one round).
constexpr double kFastPathPatienceSeconds = 1.0;

}  // namespace

void FastPathState::engage(SteadySchedule plan) {
  schedule = std::move(plan);
  engaged = true;
  next_bucket = 0;
  cycles_run = 0;
  held.clear();
  held.resize(schedule.size());
  present.assign(schedule.size(), false);
  order.assign(schedule.size(), 0);
  held_in_bucket.assign(schedule.buckets().size(), 0);
  off_schedule.clear();
}

bool FastPathState::holds_any() const {
  return !off_schedule.empty() || std::find(present.begin(), present.end(), true) != present.end();
}

std::vector<LocalRequest> FastPathState::release() {
  std::vector<std::pair<uint64_t, LocalRequest>> all = std::move(off_schedule);
  off_schedule.clear();
  for (size_t slot = 0; slot < present.size(); ++slot) {
    if (present[slot]) all.emplace_back(order[slot], std::move(held[slot]));
  }
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<LocalRequest> out;
  out.reserve(all.size());
  for (auto& entry : all) out.push_back(std::move(entry.second));
  present.assign(present.size(), false);
  held_in_bucket.assign(held_in_bucket.size(), 0);
  return out;
}

void Engine::maybe_engage_fast_path(const ProcessSetState& global) {
  FastPathState& fast = fast_;
  if (!fast.enabled || fast.engaged) return;
  const Coordinator& c = global.coordinator;
  if (c.pending_count() == 0) fast.learner.note_rest();  // (every rank sees the same rounds and pending set)
  if (!fast.learner.ready()) return;
  // Only from a state every member shares: nothing announced and unanswered, nobody joined,
  // finishing or shutting down, no other process set (the replicated registry: sets_ holds only
  // the sets this rank is a member of).
  if (c.pending_count() != 0) {  // a cycle learned from mid-step ends where the next step is pending
    fast.learner.realign();
    return;
  }
  if (c.joined_count() != 0 || c.shutdown_requested() || c.any_finishing()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (set_info_.size() != 1) return;
  }
  const int64_t bucket_bytes =
      config_.fast_path_bucket_bytes > 0
          ? std::min(config_.fast_path_bucket_bytes, config_.fusion_threshold_bytes)
          : auto_bucket_bytes(fast.learner.cycle_bytes(), config_.fusion_threshold_bytes);
  fast.engage(fast.learner.schedule(bucket_bytes));
  fast_engagements_.fetch_add(1, std::memory_order_relaxed);
  if (timeline_.active()) timeline_.instant("FAST_PATH_ON", steady_seconds());
  RELAX_LOG(Debug, "Fast path on: " << fast.schedule.size() << " tensors in " << fast.schedule.buckets().size()
                                    << " buckets after " << fast.learner.cycles_needed() << " equal cycles");
}

// `diverged`: some rank left (not this engine stopping). The learner waits for twice as many
// cycles next time unless the fast path ran at least as many as it waited for (a metric
// all-reduced every few hundred steps should not keep it off for long).
void Engine::leave_fast_path(ProcessSetState& global, bool diverged) {
  std::vector<LocalRequest> back = fast_.release();
  // Negotiated next, before anything submitted after them.
  global.fresh.insert(global.fresh.begin(), std::make_move_iterator(back.begin()), std::make_move_iterator(back.end()));
  fast_.engaged = false;
  fast_.learner.restart(diverged && fast_.cycles_run < fast_.learner.cycles_needed());
  if (diverged) fast_exits_.fetch_add(1, std::memory_order_relaxed);
  if (timeline_.active()) timeline_.instant("FAST_PATH_OFF", steady_seconds());
}

bool Engine::waited_on_fast_path(double now) const {
  if (!fast_.holds_any()) return false;
  const WaitState wait = handles_.wait_state(now);
  if (!wait.waiting) return false;
  return now - std::max({wait.since, wait.last_completion, last_submission_.load()}) >= kFastPathPatienceSeconds;
}

Status Engine::fast_step(ProcessSetState& global, bool stopping, double now, bool& progress) {
  FastPathState& fast = fast_;
  for (LocalRequest& r : global.fresh) {
    progress = true;
    const uint64_t order = fast.next_order++;
    const int slot = fast.off_schedule.empty() ? fast.schedule.find(r.desc) : -1;
    const size_t s = static_cast<size_t>(slot);
    // A tensor of a bucket that already ran belongs to the next cycle: the schedule holds one
    // cycle at a time, so it too takes this rank off the fast path.
    if (slot < 0 || fast.present[s] || fast.schedule.bucket_of(s) < fast.next_bucket) {
      fast.off_schedule.emplace_back(order, std::move(r));
      continue;
    }
    fast.held[s] = std::move(r);
    fast.present[s] = true;
    fast.order[s] = order;
    ++fast.held_in_bucket[fast.schedule.bucket_of(s)];
  }
  global.fresh.clear();
  const bool leaving = !fast.off_schedule.empty() || stopping || finishing_.load() || waited_on_fast_path(now);
  const std::vector<ScheduleBucket>& buckets = fast.schedule.buckets();
  std::vector<LocalRequest*> members;
  std::vector<const Descriptor*> descs;
  while (true) {
    const size_t b = fast.next_bucket;
    const ScheduleBucket& bucket = buckets[b];
    const bool complete = fast.held_in_bucket[b] == bucket.last - bucket.first;
    if (!complete && !leaving) return Status::ok();  // this rank's tensors are not all there yet
    members.clear();
    descs.clear();
    for (size_t s = bucket.first; s < bucket.last; ++s) {
      members.push_back(fast.present[s] ? &fast.held[s] : nullptr);
      descs.push_back(&fast.schedule.slot(s).desc);
    }
    bool left = false;
    progress = true;
    const Status status = global.executor.run_fast_bucket(members, descs, !complete, left);
    if (!status.is_ok()) {
      // The collective failed (a peer lost or silent): its requests fail here as on the
      // negotiated path; the rest go back to negotiation, which the failure usually ends.
      for (size_t s = bucket.first; s < bucket.last; ++s) {
        if (!fast.present[s]) continue;
        retire(0, fast.held[s].desc.name);
        finish_request(handles_, fast.held[s], status.code, status.message);
        fast.present[s] = false;
      }
      leave_fast_path(global, true);
      return peer_silence_noted() ? peer_silence_status() : Status::ok();
    }
    if (left) {
      leave_fast_path(global, true);
      return Status::ok();
    }
    fast_buckets_.fetch_add(1, std::memory_order_relaxed);  // (before its requests complete: callers see it)
    for (size_t s = bucket.first; s < bucket.last; ++s) {
      LocalRequest& request = fast.held[s];
      retire(0, request.desc.name);
      finish_request(handles_, request, RELAX_OK, "");
      fast.present[s] = false;
    }
    fast.held_in_bucket[b] = 0;
    if (b + 1 == buckets.size()) ++fast.cycles_run;
    fast.next_bucket = b + 1 == buckets.size() ? 0 : b + 1;
  }
}

}  // namespace relax
