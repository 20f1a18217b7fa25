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
  Status acquire(const std::vector<int>& members, Collectives*& out, bool& transient);
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
  // Waits for `requests` (to/from `peers`), warning about a stall and failing after the
  // shutdown time, as the negotiation's stall inspector does.
  // `receive_peers[i]`: the rank that requests[i] receives from (the receives come first), so
  // a timeout names the ranks that did not send.
  Status wait_all(std::vector<MPI_Request>& requests, const LocalRequest& r, const std::vector<int>& receive_peers);

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
