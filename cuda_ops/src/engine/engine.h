// The background engine: one thread that runs negotiation rounds — woken at once by a
// submission, otherwise every cycle — and executes what every member has submitted. Framework
// threads submit requests (submit() never blocks on MPI). A thread about to wait for its own
// request may instead run the rounds itself while the engine thread is idle (drive()): the same
// rounds in the same order, minus two thread wake-ups. Whoever runs a round holds cycle_mutex_.
//
// Process sets: each set negotiates on its own communicator. Every cycle starts with a round of
// the global set whose header flags which sets have work; the members of those sets then run
// their rounds in ascending id order, so a rank in several sets never waits in two orders.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/config.h"
#include "engine/fast_path.h"
#include "engine/handles.h"
#include "engine/process_set.h"
#include "engine/timeline.h"
#include "transport/mpi_context.h"

namespace relax {

struct EngineStats {
  int64_t rounds = 0;
  int64_t completed = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t negotiation_ns = 0;
  int64_t execution_ns = 0;
  int64_t inline_allreduces = 0;  // all-reduces whose data travelled in their negotiation round
  int64_t fast_path_buckets = 0;  // fused all-reduces the fast path ran and delivered (engine_fast_path.cc)
  int64_t fast_path_engagements = 0;  // times the fast path was taken up
  int64_t fast_path_exits = 0;    // times some rank left it (it was negotiated again)
};

// Members of a process set, as seen by threads other than the engine's.
struct ProcessSetInfo {
  std::vector<int> world_ranks;
  int rank = -1;  // this process within the set, -1 if not a member
};

// The ring/MPI-path settings of collectives, from the engine configuration; shared-memory
// barriers poll only while `spin_gate` is positive (HandleTable::waiting_callers()).
CollectiveConfig collective_config(const EngineConfig& c, const std::atomic<int>* spin_gate);
// Whether RELAX_FAST_PATH asks for the fast path with these settings (after the topology defaults).
bool fast_path_wanted(const EngineConfig& c);

class Engine {
 public:
  Engine(MpiContext& mpi, HandleTable& handles, EngineConfig config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void start();
  // Asks every rank to shut down (collectively, in the next round) and joins the thread.
  void stop();
  bool running() const { return running_.load(); }

  // Accepts all `requests` (a group is negotiated atomically; all in `process_set`) or none:
  // fails on a duplicate pending name, an unknown set, or when the engine is not running.
  // With wake == false the engine thread is not woken: the caller drive()s the request next.
  Status submit(int32_t process_set, std::vector<LocalRequest> requests, bool wake = true);
  // Runs rounds on the calling thread until `handle` completes or a round changes nothing (peers
  // not there yet), if no other thread is running one (it waits up to 20 us for one that is
  // finishing); then leaves the rest to the engine thread.
  // The caller still waits on the handle afterwards. Must not hold locks a completion needs.
  void drive(relax_handle_t handle);
  // True on a thread that is running a round: inside a completion callback, where waiting for
  // another request would wait for this very thread.
  static bool in_round_on_this_thread();
  // Members of a registered process set; false if unknown.
  bool process_set_info(int32_t process_set, ProcessSetInfo& out) const;

  // Called once with the reason when the engine stops because of a round's outcome (a peer shut
  // down, an MPI failure): other lanes of communication must fail too instead of waiting for a
  // peer that is gone. Set before start(); clear it before what it refers to is destroyed.
  void set_stop_listener(std::function<void(const std::string&)> listener);
  // This rank entered shutdown() and will submit no negotiated request again (it may still serve
  // relaxed averages): requests only such ranks have not submitted fail on every rank.
  void set_finishing() { finishing_.store(true); }
  void set_fusion_threshold(int64_t bytes);
  void set_cycle_time_ms(double ms);
  EngineStats stats() const;
  Timeline& timeline() { return timeline_; }

 private:
  void loop();
  bool any_set_busy() const;
  bool blocked_too_long(double now) const;
  void spin_while_idle();
  void wait_for_work();
  bool round_due();
  void wake_engine();
  bool lock_for_driving(std::unique_lock<std::mutex>& lock) const;  // for drive(): cycle_mutex_
  bool cycle(std::vector<RankMessage>& messages);
  bool step(std::vector<RankMessage>& messages, bool& progress);
  // `clock` (steady seconds): when the round began on entry, when it ended on return.
  Status run_round(ProcessSetState& set, bool stopping, double now, std::vector<RankMessage>& messages,
                   bool& progress, double& clock);
  RankMessage announce(ProcessSetState& set, bool stopping, double now);
  const LocalRequest* inline_candidate(const ProcessSetState& set, const RankMessage& mine) const;
  static bool every_member_inlined(const std::vector<RankMessage>& messages, uint32_t id);
  void inspect_stalls(ProcessSetState& set, RankMessage& mine, double now);
  void apply_membership(std::vector<Response>& responses);
  void add_process_set(const Response& response);
  void remove_process_set(const Response& response);
  void finish_membership(const Response& response, ProcessSetState& global, const Status& status, int64_t result);
  std::unique_ptr<ProcessSetState> make_set(int32_t id, std::vector<int> ranks, int rank, MPI_Comm control,
                                            MPI_Comm data, bool owns);
  // The fast path (engine_fast_path.cc).
  void maybe_engage_fast_path(const ProcessSetState& global);
  void leave_fast_path(ProcessSetState& global, bool diverged);
  bool waited_on_fast_path(double now) const;
  Status fast_step(ProcessSetState& global, bool stopping, double now, bool& progress);
  void fail_set(ProcessSetState& set, int32_t status, const std::string& message);
  void fail_everything(int32_t status, const std::string& message);
  void finish(int32_t status, const std::string& message);
  void retire(int32_t process_set, const std::string& name);

  MpiContext& mpi_;
  HandleTable& handles_;
  EngineConfig config_;
  CollectiveConfig collective_config_;
  Timeline timeline_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::pair<int32_t, LocalRequest>> incoming_;
  std::atomic<uint64_t> submissions_{0};  // counts submit() calls, for the lock-free idle poll
  std::atomic<double> last_submission_{0};  // steady seconds of the latest submit()
  // Names of pending requests, by process set (names are unique per set).
  std::unordered_map<int32_t, std::unordered_set<std::string>> active_names_;
  std::map<int32_t, ProcessSetInfo> set_info_;   // replicated registry, readable by submitters
  bool stop_requested_ = false;
  std::atomic<bool> stop_flag_{false};  // stop_requested_, readable without mutex_ (the idle spin polls it)
  bool woken_ = false;       // a driving caller handed work back to the engine thread
  std::function<void(const std::string&)> stop_listener_;
  // Settings changed through the API, applied to config_ at the start of the next round (the
  // round's thread reads config_ without mutex_); negative = unchanged.
  int64_t pending_fusion_threshold_ = -1;
  double pending_cycle_time_ms_ = -1;
  std::string stop_reason_;  // why the engine stopped (for later submissions)
  std::atomic<bool> running_{false};
  std::atomic<bool> finishing_{false};
  std::thread thread_;

  // Whoever holds cycle_mutex_ (the engine thread or a driving caller) runs rounds and owns the
  // state below; the atomics are also read by the engine thread while it waits.
  std::mutex cycle_mutex_;
  std::map<int32_t, std::unique_ptr<ProcessSetState>> sets_;
  int32_t next_set_id_ = 1;
  std::vector<RankMessage> driver_messages_;
  std::vector<std::pair<int32_t, LocalRequest>> step_incoming_;  // step()'s share of incoming_
  bool blocked_ = false;  // this step's rounds carry kFlagBlocked
  std::atomic<double> throttle_ms_{0};
  // How long an idle engine sleeps between rounds (wait_for_work): the cycle time, doubled after
  // each round that changed nothing, up to the larger of the cycle time and RELAX_IDLE_TICK_MAX.
  std::atomic<double> idle_tick_ms_{0};
  std::atomic<bool> busy_{false};            // some set has pending requests after the last round
  std::atomic<bool> last_round_progressed_{false};  // the last step changed something (spin after it)
  std::atomic<bool> finished_{false};        // a round decided that the engine stops
  std::atomic<double> last_round_end_{0};    // steady seconds
  std::atomic<uint64_t> seen_submissions_{0};
  std::atomic<int64_t> rounds_{0};
  std::atomic<int64_t> completed_{0};
  std::atomic<int64_t> negotiation_ns_{0};
  std::atomic<int64_t> execution_ns_{0};
  std::atomic<int64_t> inline_allreduces_{0};
  FastPathState fast_;  // (the global set's; under cycle_mutex_)
  std::atomic<int64_t> fast_buckets_{0};
  std::atomic<int64_t> fast_engagements_{0};
  std::atomic<int64_t> fast_exits_{0};
  const double start_time_;
};

}  // namespace relax
