#include "engine/steady_schedule.h"

#include <algorithm>
#include <cmath>

#include "engine/requests/kind_support.h"

namespace relax {
namespace {

bool same_fusion_key(const Descriptor& a, const Descriptor& b) {
  return a.dtype == b.dtype && a.reduce_op == b.reduce_op && a.postscale == b.postscale;
}

}  // namespace

SteadySchedule::SteadySchedule(std::vector<ScheduleSlot> slots, int64_t bucket_bytes) : slots_(std::move(slots)) {
  bucket_of_slot_.resize(slots_.size());
  int64_t bucket_used = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Descriptor& d = slots_[i].desc;
    const int64_t bytes = kinds::byte_size(d);
    slot_by_name_[d.name] = i;
    const bool joins_previous = !buckets_.empty() && slots_[i - 1].round == slots_[i].round &&
                                same_fusion_key(slots_[i - 1].desc, d) && bucket_used + bytes <= bucket_bytes;
    if (!joins_previous) {
      buckets_.push_back(ScheduleBucket{i, i, 0});
      bucket_used = 0;
    }
    ScheduleBucket& bucket = buckets_.back();
    bucket.last = i + 1;
    bucket.elements += d.num_elements();
    bucket_used += bytes;
    bucket_of_slot_[i] = buckets_.size() - 1;
  }
}

int SteadySchedule::find(const Descriptor& d) const {
  auto it = slot_by_name_.find(d.name);
  if (it == slot_by_name_.end() || !(slots_[it->second].desc == d)) return -1;
  return static_cast<int>(it->second);
}

bool fast_path_takes(const Descriptor& d) {
  // The flag element's sum must survive the postscale: 0 stays 0, and any count of flags times a
  // postscale of at least 1e-30 stays far from 0 in both types.
  return d.type == RELAX_REQ_ALLREDUCE && d.group.empty() && (d.dtype == RELAX_FLOAT32 || d.dtype == RELAX_FLOAT64) &&
         (d.reduce_op == RELAX_OP_SUM || d.reduce_op == RELAX_OP_AVERAGE) && d.prescale == 1.0 &&
         std::isfinite(d.postscale) && std::fabs(d.postscale) >= 1e-30 && std::fabs(d.postscale) <= 1e30;
}

bool fast_path_eligible(const Response& response, int rank) {
  if (response.kind != Response::Kind::Execute || response.tensors.size() != 1) return false;
  if (std::find(response.joined.begin(), response.joined.end(), true) != response.joined.end()) return false;
  const ResponseTensor& t = response.tensors.front();
  if (rank < 0 || static_cast<size_t>(rank) >= t.per_rank.size()) return false;
  for (const auto& d : t.per_rank) {
    if (!d) return false;
  }
  return fast_path_takes(*t.per_rank[static_cast<size_t>(rank)]);
}

void ScheduleLearner::observe(const std::vector<Response>& responses) {
  if (responses.empty()) return;
  ++round_;
  for (const Response& r : responses) {
    if (!fast_path_eligible(r, rank_)) {
      forget();
      continue;
    }
    add(*r.tensors.front().per_rank[static_cast<size_t>(rank_)]);
  }
}

void ScheduleLearner::observe_inline(const Descriptor& mine) {
  ++round_;
  if (fast_path_takes(mine)) {
    add(mine);
  } else {
    forget();
  }
}

void ScheduleLearner::add(const Descriptor& mine) {
  if (await_rest_) return;  // realign(): the next cycle starts after a round that left nothing pending
  if (reference_.empty()) {  // learning the cycle: it ends where a tensor comes again
    if (current_index_.count(mine.name)) {
      reference_.swap(current_);
      reference_index_.swap(current_index_);
      current_.clear();
      current_index_.clear();
      repeats_ = 1;
    }
    current_index_[mine.name] = current_.size();
    current_.push_back(ScheduleSlot{mine, round_});
    return;
  }
  auto known = reference_index_.find(mine.name);
  if (known == reference_index_.end() || !(reference_[known->second].desc == mine) || current_index_.count(mine.name)) {
    forget();  // a different cycle: learn it from here
    current_index_[mine.name] = 0;
    current_.push_back(ScheduleSlot{mine, round_});
    return;
  }
  current_index_[mine.name] = current_.size();
  current_.push_back(ScheduleSlot{mine, round_});
  if (current_.size() == reference_.size()) {  // the cycle came round again, complete
    ++repeats_;
    reference_.swap(current_);  // the latest order and rounds are the schedule's
    reference_index_.swap(current_index_);
    current_.clear();
    current_index_.clear();
  }
}

bool ScheduleLearner::ready() const {
  return !reference_.empty() && current_.empty() && repeats_ >= needed_;
}

int64_t ScheduleLearner::cycle_bytes() const {
  int64_t bytes = 0;
  for (const ScheduleSlot& slot : reference_) bytes += kinds::byte_size(slot.desc);
  return bytes;
}

SteadySchedule ScheduleLearner::schedule(int64_t bucket_bytes) const {
  return SteadySchedule(reference_, bucket_bytes);
}

void ScheduleLearner::forget() {
  repeats_ = 0;
  reference_.clear();
  reference_index_.clear();
  current_.clear();
  current_index_.clear();
}

void ScheduleLearner::realign() {
  forget();
  await_rest_ = true;
}

void ScheduleLearner::restart(bool back_off) {
  forget();
  if (back_off) needed_ = std::min(kMaxCyclesNeeded, needed_ * 2);
}

}  // namespace relax
