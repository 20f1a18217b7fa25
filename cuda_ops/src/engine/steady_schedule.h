// The fast path's plan: once negotiation has executed the same cycle of all-reduces several times
// over (a training step's gradients), every member knows the order of the next step's operations
// without asking. The learner watches the responses of the global set's rounds — the same on every
// member, so every member decides alike and at the same round — and yields a schedule: the
// cycle's tensors in execution order, cut into buckets. Engine::fast_step then runs each bucket as
// soon as this rank has submitted all of its tensors, with no negotiation round (engine_fast_path.cc).
//
// Pure bookkeeping without MPI, like the coordinator it watches.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/coordinator.h"

namespace relax {

// One tensor of the learned cycle: this rank's own descriptor (a submission on the fast path must
// equal it) and the negotiation round of the cycle it ran in.
struct ScheduleSlot {
  Descriptor desc;
  int64_t round = 0;
};

// Slots [first, last) all-reduced as one fused operation.
struct ScheduleBucket {
  size_t first = 0;
  size_t last = 0;
  int64_t elements = 0;
};

class SteadySchedule {
 public:
  SteadySchedule() = default;
  // Cuts `slots` (in execution order) into buckets: tensors that ran in one negotiation round, with
  // the same fusion key (data type, reduction, postscale), up to `bucket_bytes` each (a larger
  // tensor gets a bucket of its own). Tensors of different rounds never share a bucket: a rank
  // may have waited for one before it submitted the next (a loss all-reduced after the gradients),
  // and a bucket that waited for both would wait forever.
  SteadySchedule(std::vector<ScheduleSlot> slots, int64_t bucket_bytes);

  size_t size() const { return slots_.size(); }
  bool empty() const { return slots_.empty(); }
  const ScheduleSlot& slot(size_t i) const { return slots_[i]; }
  const std::vector<ScheduleBucket>& buckets() const { return buckets_; }
  size_t bucket_of(size_t slot) const { return bucket_of_slot_[slot]; }
  // The slot of a submission with this descriptor, or -1 when the cycle has no such tensor (a
  // new name, or a known name with another shape, type or reduction).
  int find(const Descriptor& d) const;

 private:
  std::vector<ScheduleSlot> slots_;
  std::vector<ScheduleBucket> buckets_;
  std::vector<size_t> bucket_of_slot_;
  std::unordered_map<std::string, size_t> slot_by_name_;
};

// Whether the fast path can run this response's tensor: an executed, ungrouped all-reduce of
// 32- or 64-bit floats, summed or averaged, without prescaling, that this rank submitted, with no
// joined rank. Its fused buffer then carries one more element, every rank's "I left the schedule"
// flag, which the sum keeps exact (engine_fast_path.cc).
bool fast_path_eligible(const Response& response, int rank);
// The descriptor-level part of that: an ungrouped float all-reduce sum or average, no prescale.
bool fast_path_takes(const Descriptor& d);

class ScheduleLearner {
 public:
  // `rank`: this process within the set (whose descriptors the schedule keeps).
  explicit ScheduleLearner(int rank) : rank_(rank) {}

  // Feeds one round's responses in execution order. Anything but eligible all-reduces starts the
  // learning over.
  void observe(const std::vector<Response>& responses);
  // Feeds an all-reduce that completed inside its round (its data rode in the round's records):
  // it counts as one round of one tensor.
  void observe_inline(const Descriptor& mine);
  // Whether the same cycle (the same tensors, each once) has run `cycles_needed()` times in a
  // row and the last round ended exactly at the end of one.
  bool ready() const;
  int cycles_needed() const { return needed_; }
  // Bytes of one learned cycle (0 while none is learned).
  int64_t cycle_bytes() const;
  // The learned cycle as a schedule (call when ready()).
  SteadySchedule schedule(int64_t bucket_bytes) const;
  // Forgets the cycles seen so far; after a fast path that some rank had to leave, the next
  // attempt waits for twice as many cycles (up to kMaxCyclesNeeded), so a program whose steps
  // differ now and then does not pay for entering and leaving over and over.
  void restart(bool back_off);
  // The learned cycle is complete but the engine cannot engage at its end because requests are
  // already pending there: the cycle was learned from the middle of a step (after a leave, say),
  // so its end never falls where the program rests. Forgets it and learns the next one only from
  // a round after which nothing was pending (note_rest), so that its end is such a point.
  void realign();
  // The engine's coordinator had nothing pending after the last round: a cycle may start here.
  void note_rest() { await_rest_ = false; }

  static constexpr int kCyclesNeeded = 3;
  static constexpr int kMaxCyclesNeeded = 96;

 private:
  void add(const Descriptor& mine);
  void forget();

  int rank_;
  int needed_ = kCyclesNeeded;
  int64_t round_ = 0;
  int repeats_ = 0;                       // complete cycles equal to reference_, in a row
  bool await_rest_ = false;               // realign(): no cycle starts before note_rest()
  std::vector<ScheduleSlot> reference_;   // the last complete cycle
  std::unordered_map<std::string, size_t> reference_index_;
  std::vector<ScheduleSlot> current_;     // the cycle in progress
  std::unordered_map<std::string, size_t> current_index_;
};

}  // namespace relax
