// The engine's fast path state (engine_fast_path.cc runs it; steady_schedule.h plans it): whether
// it is on, the schedule it follows, and the requests this rank submitted to it that have not run.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/request.h"
#include "engine/steady_schedule.h"

namespace relax {

struct FastPathState {
  explicit FastPathState(int rank) : learner(rank) {}

  bool enabled = false;  // RELAX_FAST_PATH as rank 0 set it
  bool engaged = false;  // following `schedule` instead of negotiating
  ScheduleLearner learner;
  SteadySchedule schedule;
  size_t next_bucket = 0;  // the bucket every member runs next
  int64_t cycles_run = 0;  // complete cycles run since it was taken up
  // By slot: this rank's request for the slot's tensor in the current cycle (if `present`), and
  // when it was submitted (`order`: the requests go back to negotiation in submission order).
  std::vector<LocalRequest> held;
  std::vector<bool> present;
  std::vector<uint64_t> order;
  std::vector<size_t> held_in_bucket;
  // Submissions the schedule has no place for (this rank leaves the fast path), with their order.
  std::vector<std::pair<uint64_t, LocalRequest>> off_schedule;
  uint64_t next_order = 0;

  // Follows `plan` from its first bucket, holding nothing.
  void engage(SteadySchedule plan);
  // Every request held or off the schedule, in submission order; the state holds none afterwards.
  std::vector<LocalRequest> release();
  bool holds_any() const;
};

}  // namespace relax
