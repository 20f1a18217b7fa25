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
  cc.mpi_allgather_max_bytes = c.mpi_allgather_max_bytes;
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
      return Status::error(RELAX_ERR_SHUTDOWN, stop_reason_.empty()
                                                   ? std::string("relaxlib is shutting down on this rank.")
                                                   : stop_reason_);
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
  s.negotiation_ns = negotiation_ns_.load();
  s.execution_ns = execution_ns_.load();
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
    stop_reason_ = message;
    late.swap(incoming_);
  }
  for (LocalRequest& r : late) pending_.emplace(r.desc.name, std::move(r));
  for (auto& [name, request] : pending_) {
    retire(name);
    finish_request(handles_, request, status, message);
  }
  pending_.clear();
}

namespace {

// Whether a round changed anything: new announcements, flags, or responses.
bool made_progress(const std::vector<RankMessage>& messages, const std::vector<Response>& responses) {
  if (!responses.empty()) return true;
  for (const RankMessage& m : messages) {
    if (m.flags || !m.cached.empty() || !m.descriptors.empty() || !m.stall_aborts.empty()) return true;
  }
  return false;
}

}  // namespace

// Scheduling: with nothing pending, the engine sleeps until a submission (or a cycle tick, so
// peers waiting in a round are answered). With requests pending it enters the next round at
// once and waits inside it for the peers, so a peer's submission is matched without a cycle of
// delay. Only rounds that changed nothing and completed instantly (every rank spinning on
// requests the others have not submitted) are throttled, with a growing pause.
void Engine::loop() {
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // short back-off sleeps must stay short
  std::vector<RankMessage> messages;
  double throttle_ms = 0;
  while (true) {
    std::vector<LocalRequest> fresh;
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (pending_.empty() || throttle_ms > 0) {
        const double wait_ms = pending_.empty() ? config_.cycle_time_ms : throttle_ms;
        cv_.wait_for(lock, std::chrono::duration<double, std::milli>(wait_ms),
                     [&] { return !incoming_.empty() || stop_requested_; });
      }
      fresh.swap(incoming_);
      stopping = stop_requested_;
    }
    const double now = seconds_since_start();
    RankMessage mine = announce(fresh, stopping, now);
    const auto round_start = std::chrono::steady_clock::now();
    Status status = exchange_round(mpi_.control(), mine, coordinator_.cache_size(), messages);
    if (!status.is_ok()) {
      RELAX_LOG(Error, status.message);
      fail_everything(status.code, status.message);
      return;
    }
    const double round_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - round_start).count();
    std::vector<Response> responses = coordinator_.process(messages, now);
    const bool progress = made_progress(messages, responses);
    const auto execution_start = std::chrono::steady_clock::now();
    executor_.run(responses, pending_);
    execution_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::steady_clock::now() - execution_start).count(),
                            std::memory_order_relaxed);
    negotiation_ns_.fetch_add(static_cast<int64_t>(round_us * 1000), std::memory_order_relaxed);
    rounds_.fetch_add(1, std::memory_order_relaxed);
    if (!progress && !pending_.empty() && round_us < 50) {
      throttle_ms = std::min(config_.cycle_time_ms, std::max(0.02, throttle_ms * 2));
    } else {
      throttle_ms = 0;
    }
    if (coordinator_.shutdown_requested()) {
      const int who = coordinator_.shutdown_rank();
      fail_everything(RELAX_ERR_SHUTDOWN,
                      who == mpi_.topology().rank
                          ? std::string("relaxlib was shut down on this rank.")
                          : "relaxlib's engine stopped because rank " + std::to_string(who) +
                                " shut down (it finished, called shutdown(), or failed); collectives are no "
                                "longer possible in this job.");
      return;
    }
  }
}

}  // namespace relax
