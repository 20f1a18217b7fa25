// The direct lane: collectives that are not negotiated (neighbour averaging, group averaging).
// Relaxed algorithms use deterministic schedules, so every participant submits the same
// requests in the same order; a negotiation round would re-introduce the global wait they exist
// to avoid. The lane has its own thread and communicator, so a rank waiting in a negotiation
// round never blocks a neighbour exchange and vice versa.
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/collectives.h"
#include "engine/config.h"
#include "engine/handles.h"
#include "engine/request.h"

namespace relax {

// Sub-communicators of process groups, created on demand with MPI_Comm_create_group (collective
// over the members only). A group is kept only if every member has room, decided together at
// creation, so members never disagree about which groups are cached; beyond the capacity a
// group's communicator is created for one use and freed.
class GroupCommunicators {
 public:
  GroupCommunicators(MPI_Comm parent, size_t capacity, CollectiveConfig config);
  ~GroupCommunicators();
  // Collectives over `members` (sorted world ranks incl. this rank). `transient` is set when the
  // communicator must be released with release_transient() after use.
  // The membership vote after creation waits at most `timeout_s` (then fails naming the silent
  // members); the creation itself (MPI_Comm_create_group) has no non-blocking form: callers make
  // sure every member answered just before.
  Status acquire(const std::vector<int>& members, Collectives*& out, bool& transient, double timeout_s);
  void release_transient();
  size_t cached() const { return cache_.size(); }
  double creation_seconds() const { return creation_seconds_; }

 private:
  struct Entry {
    MPI_Comm comm = MPI_COMM_NULL;
    std::unique_ptr<Collectives> collectives;
  };
  MPI_Comm parent_;
  size_t capacity_;
  CollectiveConfig config_;
  std::map<std::vector<int>, Entry> cache_;
  Entry transient_;
  double creation_seconds_ = 0;
};

// How long the direct lane waits for a peer's message: RELAX_OP_TIMEOUT / RELAX_STALL_SHUTDOWN_TIME,
// or the default peer timeout (transport/liveness.h) when both are unset, never forever.
double direct_lane_timeout_seconds(const EngineConfig& config);

class DirectLane {
 public:
  DirectLane(MPI_Comm world, HandleTable& handles, const EngineConfig& config, CollectiveConfig collective_config);
  ~DirectLane();
  DirectLane(const DirectLane&) = delete;
  DirectLane& operator=(const DirectLane&) = delete;

  Status submit(LocalRequest request);
  // Fails what is queued and stops the thread.
  void stop(const std::string& reason);
  // Fails the running and queued requests and all later ones with `reason`, without joining the
  // thread (callable from any thread; stop() still joins it later).
  void abort(const std::string& reason);

  // Termination of relaxed schedules when ranks stop at different steps (call while the lane is
  // idle): whether a peer's header for a step this rank has not run yet is waiting — proof that
  // some rank still runs that step — and a non-blocking maximum of every rank's last step, known
  // once all ranks joined.
  bool header_pending();
  Status start_join(int64_t last_step);
  Status test_join(bool& done, int64_t& max_step);  // both fail once a peer shut down (abort)

  // Bytes this rank's neighbour and group averages sent and received, and the lane's busy time.
  const Traffic& traffic() const { return traffic_; }
  int64_t busy_ns() const { return busy_ns_.load(); }

 private:
  Status stopped_status();
  void loop();
  Status execute(LocalRequest& r);
  Status neighbor_average(LocalRequest& r);
  Status choco_average(LocalRequest& r);
  Status group_average(LocalRequest& r);
  // Waits for `requests` (to/from `peers`), warning about a stall and failing after
  // direct_lane_timeout_seconds() (noting the silence process-wide, so the engine and every lane
  // stop), at once when another part noted a silent peer, or when the lane stops.
  // `receive_peers[i]`: the rank that requests[i] receives from (the receives come first), so
  // a timeout names the ranks that did not send. `left_posted`: requests that could not be
  // withdrawn remain, so the caller must bury() every buffer they reference.
  Status wait_all(std::vector<MPI_Request>& requests, const LocalRequest& r, const std::vector<int>& receive_peers,
                  bool& left_posted);
  // Cancels `requests` and tests them for a moment; true if some are still posted.
  static bool withdraw(std::vector<MPI_Request>& requests);
  // Fails STALLED with the recorded reason once a silent peer was noted: called before an
  // exchange posts anything, so nothing is posted once the job is over.
  Status refuse_if_silent() const;
  // Keeps `buffer`'s storage alive (moved, so its heap block stays where MPI was told) for as long
  // as requests may still touch it: for the process's life (~DirectLane leaks the graveyard).
  template <class T>
  void bury(T& buffer) {
    graveyard_.push_back(std::make_shared<T>(std::move(buffer)));
    buffer = T();
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm join_comm_ = MPI_COMM_NULL;
  MPI_Request join_request_ = MPI_REQUEST_NULL;
  int64_t join_step_ = 0;
  int64_t join_max_ = 0;
  double join_stopped_since_ = -1;  // steady seconds test_join first found the lane stopped
  int rank_ = 0;
  int size_ = 1;
  HandleTable& handles_;
  EngineConfig config_;
  GroupCommunicators groups_;
  std::vector<uint8_t> scratch_;
  // Buffers of exchanges whose requests stay posted after a timeout or stop: a peer that wakes
  // up may still write into them (receives) or have them read (sends).
  std::vector<std::shared_ptr<void>> graveyard_;
  Traffic traffic_;
  std::atomic<int64_t> busy_ns_{0};

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<LocalRequest> queue_;
  bool stopping_ = false;
  std::string stop_reason_;
  std::thread thread_;
};

}  // namespace relax
