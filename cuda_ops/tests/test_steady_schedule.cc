// The fast path's learner and plan: when a cycle counts as learned, what starts the learning
// over, and how the schedule is cut into buckets.
#include <string>
#include <utility>
#include <vector>

#include "check.h"
#include "engine/bucket_size.h"
#include "engine/steady_schedule.h"
#include "relax/relax.h"

using relax::Descriptor;
using relax::Response;
using relax::ScheduleLearner;
using relax::ScheduleSlot;
using relax::SteadySchedule;

namespace {

constexpr int kRanks = 2;

Descriptor gradient(const std::string& name, int64_t elements, int32_t dtype = RELAX_FLOAT32) {
  Descriptor d;
  d.name = name;
  d.type = RELAX_REQ_ALLREDUCE;
  d.dtype = dtype;
  d.reduce_op = RELAX_OP_AVERAGE;
  d.shape = {elements};
  return d;
}

Response executed(const Descriptor& d) {
  Response r;
  r.type = d.type;
  r.joined.assign(kRanks, false);
  r.tensors.emplace_back();
  r.tensors.front().name = d.name;
  r.tensors.front().per_rank.assign(kRanks, d);
  return r;
}

// One round that executed `tensors`.
std::vector<Response> round_of(const std::vector<Descriptor>& tensors) {
  std::vector<Response> responses;
  for (const Descriptor& d : tensors) responses.push_back(executed(d));
  return responses;
}

// A step: the gradients c, b, a each in a round of their own, then the loss.
void step(ScheduleLearner& learner, const std::vector<Descriptor>& gradients) {
  for (const Descriptor& d : gradients) learner.observe(round_of({d}));
}

const std::vector<Descriptor> kStep = {gradient("c", 10), gradient("b", 20), gradient("a", 30)};

}  // namespace

TEST(learner_is_ready_after_three_equal_cycles_at_a_cycle_end) {
  ScheduleLearner learner(0);
  step(learner, kStep);
  CHECK(!learner.ready());  // a cycle is known only when its first tensor comes again
  step(learner, kStep);
  CHECK(!learner.ready());
  step(learner, kStep);
  CHECK(learner.ready());
  learner.observe(round_of({kStep[0]}));
  CHECK(!learner.ready());  // mid-cycle: not a point every member can switch at
  learner.observe(round_of({kStep[1], kStep[2]}));
  CHECK(learner.ready());
  const SteadySchedule schedule = learner.schedule(1 << 20);
  CHECK_EQ(schedule.size(), 3u);
  CHECK_EQ(schedule.slot(0).desc.name, std::string("c"));
  CHECK_EQ(schedule.buckets().size(), 2u);  // the latest cycle's rounds: {c}, {b, a}
  CHECK_EQ(schedule.buckets()[1].elements, 50);
  CHECK_EQ(learner.cycle_bytes(), 240);  // 60 float32
}

TEST(learner_starts_over_on_anything_else) {
  ScheduleLearner learner(0);
  for (int i = 0; i < 4; ++i) step(learner, kStep);
  CHECK(learner.ready());
  Descriptor other = gradient("metric", 1);
  other.type = RELAX_REQ_BROADCAST;  // not an all-reduce
  learner.observe(round_of({other}));
  CHECK(!learner.ready());
  for (int i = 0; i < 2; ++i) step(learner, kStep);
  CHECK(!learner.ready());
  step(learner, kStep);
  CHECK(learner.ready());

  // The same name with another shape is another cycle.
  learner.observe(round_of({gradient("c", 11)}));
  CHECK(!learner.ready());
}

TEST(learner_refuses_what_the_flag_cannot_ride_with) {
  std::vector<Descriptor> refused;
  refused.push_back(gradient("half", 4, RELAX_FLOAT16));
  refused.push_back(gradient("ints", 4, RELAX_INT32));
  Descriptor maximum = gradient("max", 4);
  maximum.reduce_op = RELAX_OP_MAX;
  refused.push_back(maximum);
  Descriptor prescaled = gradient("prescaled", 4);
  prescaled.prescale = 0.5;
  refused.push_back(prescaled);
  Descriptor grouped = gradient("grouped", 4);
  grouped.group = "g";
  grouped.group_size = 1;
  refused.push_back(grouped);
  for (const Descriptor& d : refused) {
    CHECK(!relax::fast_path_eligible(executed(d), 0));
    ScheduleLearner learner(0);
    for (int i = 0; i < 5; ++i) learner.observe(round_of({d}));
    CHECK(!learner.ready());
  }
  Response joined = executed(kStep[0]);
  joined.joined[1] = true;
  CHECK(!relax::fast_path_eligible(joined, 0));
  Response missing = executed(kStep[0]);
  missing.tensors.front().per_rank[1].reset();
  CHECK(!relax::fast_path_eligible(missing, 0));
  CHECK(relax::fast_path_eligible(executed(kStep[0]), 1));
  CHECK(!relax::fast_path_eligible(executed(kStep[0]), 2));  // not a member
}

TEST(learner_waits_twice_as_long_after_a_divergence) {
  ScheduleLearner learner(0);
  CHECK_EQ(learner.cycles_needed(), ScheduleLearner::kCyclesNeeded);
  learner.restart(true);
  CHECK_EQ(learner.cycles_needed(), 2 * ScheduleLearner::kCyclesNeeded);
  for (int i = 0; i < 20; ++i) learner.restart(true);
  CHECK_EQ(learner.cycles_needed(), ScheduleLearner::kMaxCyclesNeeded);
  learner.restart(false);
  CHECK_EQ(learner.cycles_needed(), ScheduleLearner::kMaxCyclesNeeded);
}

TEST(inline_allreduces_count_as_rounds_of_one) {
  ScheduleLearner learner(1);
  for (int i = 0; i < 4; ++i) {
    learner.observe(round_of({kStep[0], kStep[1]}));
    learner.observe_inline(gradient("loss", 1));
  }
  CHECK(learner.ready());
  const SteadySchedule schedule = learner.schedule(1 << 20);
  CHECK_EQ(schedule.buckets().size(), 2u);
  CHECK_EQ(schedule.find(gradient("loss", 1)), 2);
}

TEST(schedule_buckets_split_by_round_key_and_size) {
  std::vector<ScheduleSlot> slots;
  slots.push_back({gradient("a", 100), 1});
  slots.push_back({gradient("b", 100), 1});
  slots.push_back({gradient("c", 100), 1});  // 3 x 400 bytes: the third does not fit in 1000
  slots.push_back({gradient("d", 1000), 1});  // larger than a bucket: one of its own
  slots.push_back({gradient("e", 10, RELAX_FLOAT64), 1});  // another data type
  slots.push_back({gradient("f", 10, RELAX_FLOAT64), 2});  // another round
  SteadySchedule schedule(slots, 1000);
  const auto& buckets = schedule.buckets();
  CHECK_EQ(buckets.size(), 5u);
  CHECK_EQ(buckets[0].last - buckets[0].first, 2u);
  CHECK_EQ(buckets[1].first, 2u);
  CHECK_EQ(buckets[2].first, 3u);
  CHECK_EQ(buckets[3].first, 4u);
  CHECK_EQ(buckets[4].first, 5u);
  CHECK_EQ(schedule.bucket_of(1), 0u);
  CHECK_EQ(schedule.bucket_of(5), 4u);
  CHECK_EQ(schedule.find(gradient("d", 1000)), 3);
  CHECK_EQ(schedule.find(gradient("d", 999)), -1);
  CHECK_EQ(schedule.find(gradient("z", 1)), -1);
  // A zero bucket size (RELAX_FUSION_THRESHOLD=0): every tensor alone.
  CHECK_EQ(SteadySchedule(slots, 0).buckets().size(), 6u);
}

TEST(a_realigned_learner_starts_its_cycle_only_after_a_rest) {
  // Learned from mid-step (after a leave): the cycle b, a, c ends where the next step's b and a are
  // already pending, so the engine realigns it; the next cycle starts after a round that left
  // nothing pending, at c, and its end is the step's.
  ScheduleLearner learner(0);
  learner.observe(round_of({kStep[1]}));
  learner.observe(round_of({kStep[2]}));
  for (int i = 0; i < 4; ++i) step(learner, kStep);
  learner.observe(round_of({kStep[0]}));
  CHECK(learner.ready());
  learner.realign();
  CHECK(!learner.ready());
  learner.observe(round_of({kStep[1]}));  // pending still: not a cycle's start
  learner.observe(round_of({kStep[2]}));
  learner.note_rest();  // the step ended with nothing pending
  for (int i = 0; i < 4; ++i) step(learner, kStep);
  CHECK(learner.ready());
  const SteadySchedule schedule = learner.schedule(1 << 20);
  CHECK_EQ(schedule.size(), size_t{3});
  if (schedule.size() == 3) {
    CHECK_EQ(schedule.slot(0).desc.name, std::string("c"));  // the step's order, not b, a, c
    CHECK_EQ(schedule.slot(2).desc.name, std::string("a"));
  }
}

// One rule for the fast path's buckets and DeAR's (through the C ABI): a sixteenth of the step,
// at least 1 MiB, at most the cap, which wins where the two cross.
TEST(auto_bucket_is_a_sixteenth_of_the_step_between_one_mib_and_the_cap) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  CHECK(relax::auto_bucket_bytes(32 * kMiB, 64 * kMiB) == 2 * kMiB);
  CHECK(relax::auto_bucket_bytes(4 * kMiB, 64 * kMiB) == kMiB);
  CHECK(relax::auto_bucket_bytes(int64_t{1} << 40, 25 * kMiB) == 25 * kMiB);
  CHECK(relax::auto_bucket_bytes(32 * kMiB, kMiB / 2) == kMiB / 2);
  CHECK(relax_auto_bucket_bytes(32 * kMiB, 25 * kMiB) == 2 * kMiB);
  CHECK(relax_auto_bucket_bytes(-1, 25 * kMiB) == -1);
  CHECK(relax_auto_bucket_bytes(32 * kMiB, -1) == -1);
}
