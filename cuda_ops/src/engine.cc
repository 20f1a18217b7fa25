#include "engine.h"

#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "logging.h"
#include "round_exchange.h"

namespace relax {
namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  os << ']';
  return os.str();
}

CollectiveConfig collective_config(const EngineConfig& c) {
  CollectiveConfig cc;
  cc.segment_bytes = c.ring_segment_bytes;
  cc.mpi_allreduce_max_bytes = c.mpi_allreduce_max_bytes;
  return cc;
}

}  // namespace

Engine::Engine(MpiContext& mpi, HandleTable& handles, EngineConfig config)
    : mpi_(mpi),
      handles_(handles),
      config_(config),
      coordinator_(mpi.topology().size, static_cast<size_t>(config.cache_capacity)),
      collectives_(mpi.data(), collective_config(config)),
      executor_(collectives_, handles_, config_, [this](const std::string& name) { retire(name); }),
      start_time_(steady_seconds()) {}

Engine::~Engine() { stop(); }

double Engine::seconds_since_start() const { return steady_seconds() - start_time_; }

void Engine::start() {
  running_ = true;
  thread_ = std::thread([this] { loop(); });
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_requested_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Engine::retire(const std::string& name) {
  completed_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  active_names_.erase(name);
}

Status Engine::submit(std::vector<LocalRequest> requests) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!running_ || stop_requested_) {
      return Status::error(RELAX_ERR_SHUTDOWN,
                           "relaxlib has been shut down (shutdown() was called, or another rank shut down or "
                           "failed); call init() to start again.");
    }
    std::unordered_set<std::string> in_group;
    for (const LocalRequest& r : requests) {
      if (active_names_.count(r.desc.name) || !in_group.insert(r.desc.name).second) {
        return Status::error(RELAX_ERR_DUPLICATE_NAME,
                             r.desc.name == kJoinRequestName
                                 ? std::string("join() is already pending on this rank.")
                                 : "A request named '" + r.desc.name +
                                       "' is already pending on this rank; names must be unique among "
                                       "outstanding operations.");
      }
    }
    const double now = seconds_since_start();
    for (LocalRequest& r : requests) {
      active_names_.insert(r.desc.name);
      r.enqueued_at = now;
      incoming_.push_back(std::move(r));
    }
  }
  cv_.notify_one();
  return Status::ok();
}

void Engine::set_fusion_threshold(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  config_.fusion_threshold_bytes = bytes;
}

void Engine::set_cycle_time_ms(double ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  config_.cycle_time_ms = ms;
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.rounds = rounds_.load();
  s.completed = completed_.load();
  s.bytes_sent = collectives_.traffic().bytes_sent;
  s.bytes_received = collectives_.traffic().bytes_received;
  return s;
}

RankMessage Engine::announce(std::vector<LocalRequest>& fresh, bool stopping, double now) {
  RankMessage mine;
  if (stopping) mine.flags |= kFlagShutdown;
  for (LocalRequest& r : fresh) {
    if (r.desc.type == RELAX_REQ_JOIN) {
      mine.flags |= kFlagJoin;
    } else {
      const int id = coordinator_.cache_lookup(r.desc);
      if (id >= 0) {
        mine.cached.push_back(static_cast<uint32_t>(id));
      } else {
        mine.descriptors.push_back(r.desc);
      }
    }
    std::string name = r.desc.name;
    pending_.emplace(std::move(name), std::move(r));
  }
  if (mpi_.topology().rank == 0) inspect_stalls(mine, now);
  return mine;
}

// Rank 0 warns about requests that only some ranks submitted, and (with a shutdown time) fails
// them on every rank through its round message, so that all ranks fail them in the same round.
void Engine::inspect_stalls(RankMessage& mine, double now) {
  const double check = config_.stall_check_seconds;
  const double abort_after = config_.stall_shutdown_seconds;
  if (check <= 0 && abort_after <= 0) return;
  if (now - last_stall_check_ < 1.0) return;
  last_stall_check_ = now;
  const double threshold = check > 0 ? (abort_after > 0 ? std::min(check, abort_after) : check) : abort_after;
  for (const StallInfo& info : coordinator_.stalled(now, threshold)) {
    if (abort_after > 0 && info.waited_seconds >= abort_after) {
      RELAX_LOG(Error, "Request '" << info.name << "' stalled for " << static_cast<int>(info.waited_seconds)
                                   << " s (RELAX_STALL_SHUTDOWN_TIME=" << abort_after << "): submitted by ranks "
                                   << rank_list(info.submitted) << ", missing ranks " << rank_list(info.missing)
                                   << ". Failing it on every rank.");
      mine.stall_aborts.push_back(info.name);
      continue;
    }
    if (check <= 0 || info.waited_seconds < check) continue;
    double& last = last_stall_warning_[info.name];
    if (last > 0 && now - last < check) continue;
    last = now;
    RELAX_LOG(Warning, "Stall: request '" << info.name << "' was submitted by ranks " << rank_list(info.submitted)
                                          << " " << static_cast<int>(info.waited_seconds)
                                          << " s ago but ranks " << rank_list(info.missing)
                                          << " have not submitted it. One or more ranks may have skipped this "
                                             "operation, run operations in a different order, or be stuck. "
                                             "(RELAX_STALL_CHECK_TIME="
                                          << check << " s; set RELAX_STALL_SHUTDOWN_TIME to fail instead.)");
  }
  if (last_stall_warning_.size() > 4096) last_stall_warning_.clear();
}

void Engine::fail_everything(int32_t status, const std::string& message) {
  std::vector<LocalRequest> late;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
    late.swap(incoming_);
  }
  for (LocalRequest& r : late) pending_.emplace(r.desc.name, std::move(r));
  for (auto& [name, request] : pending_) {
    retire(name);
    finish_request(handles_, request, status, message);
  }
  pending_.clear();
}

void Engine::loop() {
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // short back-off sleeps must stay short
  std::vector<RankMessage> messages;
  while (true) {
    std::vector<LocalRequest> fresh;
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      const auto cycle = std::chrono::duration<double, std::milli>(config_.cycle_time_ms);
      cv_.wait_for(lock, cycle, [&] { return !incoming_.empty() || stop_requested_; });
      fresh.swap(incoming_);
      stopping = stop_requested_;
    }
    const double now = seconds_since_start();
    RankMessage mine = announce(fresh, stopping, now);
    Status status = exchange_round(mpi_.control(), mine, coordinator_.cache_size(), messages);
    if (!status.is_ok()) {
      RELAX_LOG(Error, status.message);
      fail_everything(status.code, status.message);
      return;
    }
    std::vector<Response> responses = coordinator_.process(messages, now);
    executor_.run(responses, pending_);
    rounds_.fetch_add(1, std::memory_order_relaxed);
    if (coordinator_.shutdown_requested()) {
      const int who = coordinator_.shutdown_rank();
      fail_everything(RELAX_ERR_SHUTDOWN,
                      who == mpi_.topology().rank
                          ? std::string("relaxlib was shut down on this rank before the request completed.")
                          : "relaxlib was shut down because rank " + std::to_string(who) +
                                " shut down (it finished, called shutdown(), or failed) before this request "
                                "completed.");
      return;
    }
  }
}

}  // namespace relax
