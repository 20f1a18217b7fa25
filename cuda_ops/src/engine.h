// The background engine: one thread that owns every MPI call. Framework threads submit requests
// (submit() never blocks on MPI); the thread runs negotiation rounds — woken at once by a
// submission, otherwise every cycle — and executes what every rank has submitted.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "collectives.h"
#include "config.h"
#include "coordinator.h"
#include "executor.h"
#include "handles.h"
#include "mpi_context.h"

namespace relax {

struct EngineStats {
  int64_t rounds = 0;
  int64_t completed = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t negotiation_ns = 0;
  int64_t execution_ns = 0;
};

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

  // Accepts all `requests` (a group is negotiated atomically) or none: fails on a duplicate
  // pending name or when the engine is not running.
  Status submit(std::vector<LocalRequest> requests);

  void set_fusion_threshold(int64_t bytes);
  void set_cycle_time_ms(double ms);
  EngineStats stats() const;

 private:
  void loop();
  RankMessage announce(std::vector<LocalRequest>& fresh, bool stopping, double now);
  void inspect_stalls(RankMessage& mine, double now);
  void fail_everything(int32_t status, const std::string& message);
  void retire(const std::string& name);
  double seconds_since_start() const;

  MpiContext& mpi_;
  HandleTable& handles_;
  EngineConfig config_;
  Coordinator coordinator_;
  Collectives collectives_;
  Executor executor_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<LocalRequest> incoming_;
  std::unordered_set<std::string> active_names_;
  bool stop_requested_ = false;
  std::string stop_reason_;  // why the engine stopped (for later submissions)
  std::atomic<bool> running_{false};
  std::thread thread_;

  PendingMap pending_;  // engine thread only
  std::unordered_map<std::string, double> last_stall_warning_;
  double last_stall_check_ = 0;
  std::atomic<int64_t> rounds_{0};
  std::atomic<int64_t> completed_{0};
  std::atomic<int64_t> negotiation_ns_{0};
  std::atomic<int64_t> execution_ns_{0};
  const double start_time_;
};

}  // namespace relax
