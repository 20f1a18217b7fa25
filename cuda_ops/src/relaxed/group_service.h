// The group generator of heterogeneity-aware partial all-reduce (Prague's "smart" generator).
//
// Rank 0 runs a generator thread; every rank asks it for a group when it reaches its next
// averaging point. Groups are formed only from ranks that are already waiting, so no rank ever
// waits for one that is not ready (a straggler cannot slow the others), and a rank is in one
// group at a time (it asks again only after its group's averaging finished): groups that run
// concurrently never overlap. Waiting ranks within `max_lag` steps of the most advanced rank
// are grouped `group_size` at a time in arrival order; if fewer wait, they go as a smaller group
// (alone if need be) after a grace time: `grace_ms`, or `grace_fraction` of the waiting rank's
// own step interval (time between its requests) when that is longer, so ranks whose arrivals
// jitter by a few percent of a step still meet. A rank more than `max_lag` steps behind is left out of
// the others' averages: it waits for the next group of ready ranks (at most about one step of
// the leader, who is always "ready" when it arrives), joins it with weight 0, adopts the group's
// average and step, and so catches up. One generator per job; the price is one small message
// to rank 0 and back per averaging, instead of a global barrier.
//
// Mixing: ranks that averaged together leave together and, at equal speeds, arrive together
// again, so grouping in arrival order kept the same pairs step after step (one pairing in
// 97-100 % of 112 steps on 4 ranks) and the models of different pairs never met. So each step
// has an intended partition, pseudo-random from the step number: a rank waits,
// within its grace time, for the members of its intended group that can still come for that
// step (not retired, not lagging, not past it), and only when they do not come is it grouped
// with whoever waits, in arrival order. A rank whose intended partners cannot come goes at once
// with others in the same case, or alone.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <thread>
#include <vector>

#include "util/types.h"

namespace relax {

struct GroupAssignment {
  int64_t group_id = -1;
  std::vector<int> members;      // world ranks, ascending
  std::vector<double> weights;   // per member, summing to 1
  int64_t new_step = 0;          // this rank's logical step after the averaging
};

class GroupService {
 public:
  GroupService() = default;
  ~GroupService();
  GroupService(const GroupService&) = delete;
  GroupService& operator=(const GroupService&) = delete;

  // Collective over `world`: creates the service communicator; rank 0 starts the generator.
  // A request waits for the generator at most `timeout_s` (<= 0: the default peer timeout,
  // transport/liveness.h), then fails naming rank 0.
  Status start(MPI_Comm world, int group_size, int max_lag, double grace_ms, double grace_fraction,
               double timeout_s = 0);
  bool started() const { return comm_ != MPI_COMM_NULL; }
  // Asks the generator for this rank's next group (blocks until assigned, at most the timeout;
  // fails at once once a silent peer was noted).
  Status request(int64_t step, GroupAssignment& out);
  // This rank stopped training (until it asks for a group again): others stop counting on it.
  Status retire();
  void stop();

 private:
  void generate();

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int group_size_ = 2;
  int max_lag_ = 2;
  double grace_seconds_ = 0.002;
  double grace_fraction_ = 0.0;
  double timeout_s_ = 1800.0;  // set by start()
  std::atomic<bool> stopping_{false};
  std::thread generator_;
};

// The pure grouping policy, separate from messaging so it can be tested exhaustively.
class GroupPolicy {
 public:
  struct Waiting {
    int rank;
    int64_t step;
    double since;
    double deadline;  // goes in a smaller group (or alone) from then on
  };
  GroupPolicy(int size, int group_size, int max_lag, double grace_seconds, double grace_fraction = 0.0);
  void arrive(int rank, int64_t step, double now);
  // The rank stopped training: it no longer defines the leading step.
  void retire(int rank);
  // Groups to start now; each listed rank is removed from the waiting list.
  std::vector<GroupAssignment> form(double now);
  size_t waiting() const { return waiting_.size(); }
  // The earliest time after `now` that a waiting rank's grace or adoption wait runs out
  // (infinity if none).
  double next_deadline(double now) const;

 private:
  // Until when a lagging rank waits for a group to adopt from: two step intervals of the fastest
  // rank (its own grace if longer, or if no interval is known yet).
  double adoption_deadline(const Waiting& w) const;
  GroupAssignment make(const std::vector<Waiting>& contributors, const Waiting* adopter);
  // The intended partition of a step (a pseudo-random order of the ranks, cut into groups in
  // that order), followed by each rank's position in the order.
  const std::vector<int>& partition(int64_t step) const;
  // The other members of `w`'s intended group at its step that can still come for that step.
  std::vector<int> intended_partners(const Waiting& w, const std::vector<Waiting>& fresh, int64_t leader) const;
  // The group `w` goes in now from the (fresh) waiting ranks `fresh`; empty: it waits on.
  std::vector<Waiting> group_for(const Waiting& w, const std::vector<Waiting>& fresh, int64_t leader,
                                 double now) const;

  int size_;
  int group_size_;
  int max_lag_;
  double grace_;
  double grace_fraction_;
  int64_t next_id_ = 0;
  std::vector<int64_t> progress_;
  std::vector<double> last_arrival_;  // per rank, -1 before its first request
  std::vector<double> interval_;      // per rank, smoothed time between its requests (0: unknown)
  std::vector<bool> retired_;
  std::vector<Waiting> waiting_;
  mutable std::map<int64_t, std::vector<int>> partitions_;  // partition() by step, from the oldest waited at
};

}  // namespace relax
