#include "engine/engine.h"

#include <sched.h>
#include <sys/prctl.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <sstream>

#include "collectives/bounded_wait.h"
#include "engine/request_kind.h"
#include "engine/requests/kind_support.h"
#include "engine/round_exchange.h"
#include "transport/liveness.h"
#include "util/logging.h"
#include "util/text.h"

namespace relax {
namespace {
// Largest all-reduce whose data rides in its negotiation round. Each member then reads every
// member's whole tensor instead of two blocks' worth: measured on 2 ranks (one per core), 4 and
// 8 KiB take 1.1 and 1.3 us instead of 1.5 and 1.7, 16 KiB breaks even, 32 and 64 KiB lose
// (3.1 and 5.7 us against 2.6 and 3.7); with 4 ranks on 2 cores, 4 and 16 KiB halve.
constexpr int64_t kInlineMaxBytes = 16 << 10;

bool is_membership(const Response& r) {
  const RequestKind* kind = request_kind(r.type);
  return kind && kind->lane == Lane::kMembership;
}

// Whether a round changed anything: new announcements, flags, or responses.
bool made_progress(const std::vector<RankMessage>& messages, const std::vector<Response>& responses) {
  if (!responses.empty()) return true;
  for (const RankMessage& m : messages) {
    if ((m.flags & ~kStandingFlags) || !m.cached.empty() || !m.descriptors.empty() || !m.stall_aborts.empty()) return true;
  }
  return false;
}

// " Requests pending here: 'a', 'b'.": what a silent peer held up, for its error message.
std::string pending_names(const ProcessSetState& set) {
  constexpr size_t kMaxNames = 8;
  std::string names;
  size_t listed = 0;
  for (const auto& entry : set.pending) {
    if (listed == kMaxNames) {
      names += ", ...";
      break;
    }
    names += (listed++ ? ", '" : "'") + entry.first + "'";
  }
  return " Requests pending here: " + names + ".";
}

}  // namespace

// RELAX_FAST_PATH=auto: on where collectives leave the node (or avoid shared memory). Through
// shared memory a round costs microseconds and the negotiated path reduces each tensor where it
// lies, while the fast path copies through its fusion buffer: on the transformer it ran 1-3 %
// slower there and 1-2 % faster over 1 and 0.2 Gbit/s links on 4 ranks (docs/performance.md).
bool fast_path_wanted(const EngineConfig& c) {
  return c.fast_path == "on" || (c.fast_path == "auto" && !c.shm_collectives);
}

CollectiveConfig collective_config(const EngineConfig& c, const std::atomic<int>* spin_gate) {
  CollectiveConfig cc;
  cc.segment_bytes = c.ring_segment_bytes;
  cc.receive_window = c.ring_receive_window;
  cc.mpi_allreduce_max_bytes = c.mpi_allreduce_max_bytes;
  cc.mpi_allgather_max_bytes = c.mpi_allgather_max_bytes;
  cc.shm_min_bytes = c.shm_collectives ? c.shm_min_bytes : -1;
  cc.shm_slot_bytes = c.shm_slot_bytes;
  // Barrier waits poll this long before yielding the core; not when ranks share cores, nor
  // while no caller waits (the framework's threads need the cores then).
  constexpr double kShmBarrierSpinUs = 50.0;
  cc.shm_spin_us = c.idle_spin_us > 0 ? kShmBarrierSpinUs : 0.0;
  cc.shm_spin_gate = spin_gate;
  cc.yield_while_waiting = c.yield_while_waiting;
  cc.tcp_ring = c.use_tcp_ring;
  cc.peer_timeout_s = peer_timeout_seconds(c.stall_shutdown_seconds);
  return cc;
}


Engine::Engine(MpiContext& mpi, HandleTable& handles, EngineConfig config)
    : mpi_(mpi),
      handles_(handles),
      config_(config),
      collective_config_(collective_config(config, &handles.waiting_callers())),
      fast_(mpi.topology().rank),
      start_time_(steady_seconds()) {
  const Topology& t = mpi.topology();
  std::vector<int> all(static_cast<size_t>(t.size));
  for (int r = 0; r < t.size; ++r) all[static_cast<size_t>(r)] = r;
  set_info_[0] = ProcessSetInfo{all, t.rank};
  // Rank 0's choice binds every rank: coordinators that disagree would answer differently.
  // Nonblocking and bounded (collectives/bounded_wait.h): a rank frozen at start must not hold the
  // others here. On a timeout the silence is noted, so the first round fails every request with
  // its reason; the buffer stays with the posted request (MPI may still write it).
  // The same holds for the fast path and its bucket size (members that cut the schedule
  // differently would run different collectives).
  auto choices = std::make_unique<std::array<int64_t, 3>>(std::array<int64_t, 3>{
      config_.joined_ranks_gather_nothing ? 1 : 0, fast_path_wanted(config_) ? 1 : 0, config_.fast_path_bucket_bytes});
  MPI_Request request = MPI_REQUEST_NULL;
  Status agreed =
      mpi_status(MPI_Ibcast(choices->data(), 3, MPI_INT64_T, 0, mpi.control(), &request), "MPI_Ibcast");
  if (agreed.is_ok()) {
    agreed = bounded_wait(mpi.control(), request, collective_config_.peer_timeout_s, config_.yield_while_waiting,
                          "MPI_Ibcast", "the engine's start");
  }
  if (agreed.is_ok()) {
    config_.joined_ranks_gather_nothing = (*choices)[0] != 0;
    fast_.enabled = (*choices)[1] != 0;
    config_.fast_path_bucket_bytes = (*choices)[2];
  } else {
    RELAX_LOG(Error, "Engine start: " << agreed.message);
    if (request != MPI_REQUEST_NULL) choices.release();  // NOLINT: owned by the pending request now
  }
  sets_[0] = make_set(0, all, t.rank, mpi.control(), mpi.data(), false);
}

Engine::~Engine() {
  stop();
  timeline_.stop();
}

std::unique_ptr<ProcessSetState> Engine::make_set(int32_t id, std::vector<int> ranks, int rank, MPI_Comm control,
                                                  MPI_Comm data, bool owns) {
  return std::make_unique<ProcessSetState>(
      id, std::move(ranks), rank, control, data, owns, handles_, config_, collective_config_, timeline_,
      [this, id](const std::string& name) { retire(id, name); });
}

void Engine::start() {
  running_ = true;
  idle_tick_ms_.store(config_.cycle_time_ms);
  thread_ = std::thread([this] { loop(); });
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_requested_ = true;
  }
  stop_flag_.store(true);
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Engine::retire(int32_t process_set, const std::string& name) {
  completed_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  auto names = active_names_.find(process_set);
  if (names != active_names_.end()) names->second.erase(name);
}

Status Engine::submit(int32_t process_set, std::vector<LocalRequest> requests, bool wake) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!running_ || stop_requested_) {
      return Status::error(RELAX_ERR_SHUTDOWN, stop_reason_.empty()
                                                   ? std::string("relaxlib is shutting down on this rank.")
                                                   : stop_reason_);
    }
    auto info = set_info_.find(process_set);
    if (info == set_info_.end()) {
      return Status::error(RELAX_ERR_PROCESS_SET, "process set " + std::to_string(process_set) +
                                                      " does not exist (never added, or removed)");
    }
    if (info->second.rank < 0) {
      return Status::error(RELAX_ERR_PROCESS_SET, "rank " + std::to_string(mpi_.topology().rank) +
                                                      " is not a member of process set " +
                                                      std::to_string(process_set) + " (ranks " +
                                                      rank_list(info->second.world_ranks) + ")");
    }
    std::unordered_set<std::string>& active = active_names_[process_set];
    std::unordered_set<std::string> in_group;  // only a group can repeat a name within itself
    for (const LocalRequest& r : requests) {
      if (active.count(r.desc.name) || (requests.size() > 1 && !in_group.insert(r.desc.name).second)) {
        return Status::error(RELAX_ERR_DUPLICATE_NAME,
                             r.desc.name == kJoinRequestName
                                 ? std::string("join() is already pending on this rank.")
                                 : "A request named '" + r.desc.name +
                                       "' is already pending on this rank; names must be unique among "
                                       "outstanding operations.");
      }
    }
    const double now = steady_seconds();
    last_submission_.store(now);
    for (LocalRequest& r : requests) {
      active.insert(r.desc.name);
      r.enqueued_at = now;
      incoming_.emplace_back(process_set, std::move(r));
    }
  }
  if (wake) {
    submissions_.fetch_add(1, std::memory_order_release);
    cv_.notify_one();
  }
  return Status::ok();
}

void Engine::wake_engine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    woken_ = true;
  }
  submissions_.fetch_add(1, std::memory_order_release);
  cv_.notify_one();
}

namespace {
thread_local bool t_running_rounds = false;  // this thread is inside step() (callbacks run there)
}  // namespace

bool Engine::in_round_on_this_thread() { return t_running_rounds; }

// Takes cycle_mutex_ if it comes free within 20 us, yielding the core meanwhile (with a core per
// rank; when ranks share cores, at once or not at all). The holder is usually the engine thread
// finishing the round that completed this caller's previous request, and it may be waiting for
// this very core. Handing the request over instead cost thread wake-ups, made this rank late for
// its next request, and the handovers went on: 4 KiB all-reduces on 2 ranks took 2.1 us instead
// of 1.5 in runs where one rank had handed over once.
bool Engine::lock_for_driving(std::unique_lock<std::mutex>& lock) const {
  if (lock.try_lock()) return true;
  if (config_.idle_spin_us <= 0) return false;
  constexpr double kWaitSeconds = 20e-6;
  const double until = steady_seconds() + kWaitSeconds;
  do {
    sched_yield();
    if (lock.try_lock()) return true;
  } while (steady_seconds() < until);
  return false;
}

void Engine::drive(relax_handle_t handle) {
  HandleTable::WaitingCaller waiting(handles_);
  std::unique_lock<std::mutex> running(cycle_mutex_, std::defer_lock);
  if (lock_for_driving(running)) {
    bool progress = true;
    int done = handles_.poll(handle);
    while (progress && !finished_.load() && done == 0) {
      progress = false;
      if (!step(driver_messages_, progress)) break;
      done = handles_.poll(handle);
    }
    running.unlock();
    if (done != 0 && !busy_.load() && !finished_.load()) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (incoming_.empty() && !stop_requested_) return;  // nothing left for the engine thread
    }
  }
  wake_engine();
}

bool Engine::process_set_info(int32_t process_set, ProcessSetInfo& out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = set_info_.find(process_set);
  if (it == set_info_.end()) return false;
  out = it->second;
  return true;
}

void Engine::set_stop_listener(std::function<void(const std::string&)> listener) {
  std::lock_guard<std::mutex> lock(mutex_);
  stop_listener_ = std::move(listener);
}

void Engine::set_fusion_threshold(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_fusion_threshold_ = bytes;
}

void Engine::set_cycle_time_ms(double ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_cycle_time_ms_ = ms;
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.rounds = rounds_.load();
  s.completed = completed_.load();
  s.negotiation_ns = negotiation_ns_.load();
  s.execution_ns = execution_ns_.load();
  s.inline_allreduces = inline_allreduces_.load();
  s.fast_path_buckets = fast_buckets_.load();
  s.fast_path_engagements = fast_engagements_.load();
  s.fast_path_exits = fast_exits_.load();
  std::lock_guard<std::mutex> lock(mutex_);  // the engine thread changes sets_ under this lock
  for (const auto& entry : sets_) {
    s.bytes_sent += entry.second->collectives.traffic().bytes_sent;
    s.bytes_received += entry.second->collectives.traffic().bytes_received;
  }
  return s;
}

RankMessage Engine::announce(ProcessSetState& set, bool stopping, double now) {
  RankMessage mine;
  if (stopping) mine.flags |= kFlagShutdown;
  if (blocked_) mine.flags |= kFlagBlocked;
  if (finishing_.load()) mine.flags |= kFlagFinishing;
  for (LocalRequest& r : set.fresh) {
    if (request_kind(r.desc.type)->lane == Lane::kJoin) {
      mine.flags |= kFlagJoin;
    } else {
      const int id = set.coordinator.cache_lookup(r.desc);
      if (id >= 0) {
        mine.cached.push_back(static_cast<uint32_t>(id));
      } else {
        mine.descriptors.push_back(r.desc);
      }
    }
    std::string name = r.desc.name;
    set.pending.emplace(std::move(name), std::move(r));
  }
  set.fresh.clear();
  if (set.rank == 0) inspect_stalls(set, mine, now);
  return mine;
}

Status Engine::run_round(ProcessSetState& set, bool stopping, double now, std::vector<RankMessage>& messages,
                         bool& progress, double& clock) {
  RankMessage mine = announce(set, stopping, now);
  if (set.id == 0) {
    for (const auto& entry : sets_) {
      if (entry.first != 0 && entry.second->busy()) mine.active_sets.push_back(static_cast<uint32_t>(entry.first));
    }
  }
  const double round_start = clock;
  InlineData inline_data;
  const LocalRequest* lone = inline_candidate(set, mine);
  if (lone) inline_data = {lone->input, kinds::byte_size(lone->desc)};
  Status status = exchange_round(set.control(), set.collectives.shared_segment(), mine, set.coordinator.cache_size(),
                                 set.id == 0 ? static_cast<size_t>(next_set_id_) : 0, lone ? &inline_data : nullptr,
                                 collective_config_.peer_timeout_s, messages);
  if (!status.is_ok()) {
    if (status.code == RELAX_ERR_STALLED && !set.pending.empty()) status.message += pending_names(set);
    return status;
  }
  if (lone && every_member_inlined(messages, mine.cached.front())) {
    progress = true;
    inline_allreduces_.fetch_add(1, std::memory_order_relaxed);  // before its caller can see it complete
    if (set.id == 0 && fast_.enabled) fast_.learner.observe_inline(lone->desc);
    set.executor.run_inline_allreduce(set.pending);
    clock = steady_seconds();
    // The round was the collective: all of it counts as execution.
    execution_ns_.fetch_add(static_cast<int64_t>((clock - round_start) * 1e9), std::memory_order_relaxed);
    rounds_.fetch_add(1, std::memory_order_relaxed);
    return Status::ok();
  }
  const double round_end = steady_seconds();
  std::vector<Response> responses = set.coordinator.process(messages, now);
  if (set.id == 0 && fast_.enabled) fast_.learner.observe(responses);
  progress = progress || made_progress(messages, responses);
  if (timeline_.active()) {
    for (const Response& r : responses) {
      std::string phase = "NEGOTIATE_" + request_type_name(r.type);
      for (char& c : phase) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      for (const ResponseTensor& t : r.tensors) {
        auto local = set.pending.find(t.name);
        if (local != set.pending.end()) {
          timeline_.record(t.name, request_type_name(r.type), phase.c_str(), local->second.enqueued_at, round_end);
        }
      }
    }
  }
  std::vector<Response> membership;
  if (set.id == 0) {
    auto split = std::stable_partition(responses.begin(), responses.end(),
                                       [](const Response& r) { return !is_membership(r); });
    membership.assign(std::make_move_iterator(split), std::make_move_iterator(responses.end()));
    responses.erase(split, responses.end());
  }
  set.executor.run(responses, set.pending);
  clock = steady_seconds();
  // A transfer that timed out failed its own requests; the silent peer fails everything else.
  if (peer_silence_noted()) return peer_silence_status();
  execution_ns_.fetch_add(static_cast<int64_t>((clock - round_end) * 1e9), std::memory_order_relaxed);
  negotiation_ns_.fetch_add(static_cast<int64_t>((round_end - round_start) * 1e9), std::memory_order_relaxed);
  rounds_.fetch_add(1, std::memory_order_relaxed);
  apply_membership(membership);
  return Status::ok();
}

// A request that may carry its data in this round: this rank announces it alone, by its cache
// id, nothing else is pending on any member (the coordinator's state is the same everywhere),
// and it is an all-reduce the shared segment would run (not Adasum's tree), without prescaling.
// Every member that announces the same request reaches the same answer, except for local state
// (a timeline, an older request still pending here) that the other members then see in the
// round's flags.
const LocalRequest* Engine::inline_candidate(const ProcessSetState& set, const RankMessage& mine) const {
  if (mine.flags != 0 || mine.cached.size() != 1 || !mine.descriptors.empty() || !mine.stall_aborts.empty() ||
      !mine.active_sets.empty() || set.pending.size() != 1 || set.coordinator.pending_count() != 0 ||
      set.coordinator.joined_count() != 0 || timeline_.active()) {
    return nullptr;
  }
  const LocalRequest& local = set.pending.begin()->second;  // (its reduction is valid: checked at submission)
  const Descriptor& d = local.desc;
  const int64_t bytes = kinds::byte_size(d);
  if (d.type != RELAX_REQ_ALLREDUCE || d.reduce_op == RELAX_OP_ADASUM || d.prescale != 1.0 || !d.group.empty() ||
      bytes <= 0 || !local.input || !local.output || bytes > kInlineMaxBytes ||
      !set.collectives.uses_shared_memory(bytes)) {
    return nullptr;
  }
  return &local;
}

// Whether every member announced only request `id` and carried its data in the round.
bool Engine::every_member_inlined(const std::vector<RankMessage>& messages, uint32_t id) {
  for (const RankMessage& m : messages) {
    if (m.flags != kFlagInline || m.cached.size() != 1 || m.cached.front() != id || !m.descriptors.empty() ||
        !m.stall_aborts.empty() || !m.active_sets.empty()) {
      return false;
    }
  }
  return true;
}

bool Engine::any_set_busy() const {
  for (const auto& entry : sets_) {
    if (entry.second->busy()) return true;
  }
  return false;
}

// Polls (yielding the core) for a new submission before the engine sleeps on the condition variable:
// only after a round that changed something, when the next request of a burst is likely to follow.
// After an idle tick the engine sleeps at once (a tick that spun held 10 % of a core per idle rank).
// The poll lasts at most 10 ms whatever RELAX_IDLE_SPIN_US says (a longer one would hold a core
// and keep the peers waiting for this rank's next round), and ends on a stop request, so
// shutdown() never waits for it.
void Engine::spin_while_idle() {
  if (config_.idle_spin_us <= 0 || !last_round_progressed_.load()) return;
  constexpr double kMaxIdleSpinSeconds = 0.01;
  const double spin = std::min(config_.idle_spin_us * 1e-6, kMaxIdleSpinSeconds);
  const double until = steady_seconds() + spin;
  while (submissions_.load(std::memory_order_acquire) == seen_submissions_.load() && !stop_flag_.load() &&
         steady_seconds() < until) {
    sched_yield();
  }
}

// Sleeps until there is work: a submission, a wake from a driving caller, a shutdown, or the
// cycle tick (so peers waiting in a round are answered). With requests pending it returns at once
// (or after the throttle pause).
void Engine::wait_for_work() {
  const bool busy = busy_.load();
  const double throttle = throttle_ms_.load();
  if (!busy) spin_while_idle();
  std::unique_lock<std::mutex> lock(mutex_);
  const auto work = [&] { return !incoming_.empty() || stop_requested_ || woken_; };
  if (busy && throttle > 0) {
    cv_.wait_for(lock, std::chrono::duration<double, std::milli>(throttle), work);
  } else if (!busy) {
    // The tick counts from the last round anyone ran: while a caller drives rounds, the engine
    // thread stays asleep.
    while (!work()) {
      const double due = last_round_end_.load() + idle_tick_ms_.load() * 1e-3 - steady_seconds();
      if (due <= 0) break;
      cv_.wait_for(lock, std::chrono::duration<double>(due), work);
    }
  }
  woken_ = false;
}

// Under cycle_mutex_: whether the engine thread should run a round now (a driving caller may
// have done the work while this thread waited for the lock).
bool Engine::round_due() {
  if (busy_.load()) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  return !incoming_.empty() || stop_requested_ ||
         steady_seconds() - last_round_end_.load() >= idle_tick_ms_.load() * 1e-3;
}

// One engine-thread cycle. Returns false when the engine must stop.
bool Engine::cycle(std::vector<RankMessage>& messages) {
  wait_for_work();
  std::lock_guard<std::mutex> running(cycle_mutex_);
  if (finished_.load()) return false;
  if (!round_due()) return true;
  bool progress = false;
  return step(messages, progress);
}

// A round of the global set, then rounds of the process sets that have work; sets `progress` if
// anything changed. Returns false (and marks the engine finished) when the engine must stop.
bool Engine::step(std::vector<RankMessage>& messages, bool& progress) {
  t_running_rounds = true;
  struct Leave {
    ~Leave() { t_running_rounds = false; }
  } leave;
  std::vector<std::pair<int32_t, LocalRequest>>& fresh = step_incoming_;  // swapped: both keep their capacity
  bool stopping;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    seen_submissions_.store(submissions_.load(std::memory_order_acquire));
    fresh.swap(incoming_);
    stopping = stop_requested_;
    if (pending_fusion_threshold_ >= 0) config_.fusion_threshold_bytes = pending_fusion_threshold_;
    if (pending_cycle_time_ms_ >= 0) config_.cycle_time_ms = pending_cycle_time_ms_;
    pending_fusion_threshold_ = -1;
    pending_cycle_time_ms_ = -1;
  }
  for (auto& [id, request] : fresh) {
    auto it = sets_.find(id);
    if (it != sets_.end()) {
      it->second->fresh.push_back(std::move(request));
    } else {  // the set was removed between submission and now
      retire(id, request.desc.name);
      finish_request(handles_, request, RELAX_ERR_PROCESS_SET,
                     "process set " + std::to_string(id) + " was removed before this request ran");
    }
  }
  fresh.clear();
  const double step_start = steady_seconds();  // one clock read serves the step's bookkeeping
  blocked_ = blocked_too_long(step_start);
  const double now = step_start - start_time_;
  if (timeline_.marks_cycles()) timeline_.instant("CYCLE_START", step_start);
  double clock = step_start;
  Status status;
  // On the fast path no round runs while every member follows the schedule; leaving it puts the
  // requests back in the set's fresh list, and the round below negotiates them at once.
  if (fast_.engaged) {
    status = fast_step(*sets_[0], stopping, step_start, progress);
    clock = steady_seconds();
  }
  const bool negotiate = !fast_.engaged && status.is_ok();
  if (negotiate) status = run_round(*sets_[0], stopping, now, messages, progress, clock);
  const bool instant = clock - step_start < 50e-6;
  std::vector<uint32_t> active;
  if (negotiate) {
    for (const RankMessage& m : messages) active.insert(active.end(), m.active_sets.begin(), m.active_sets.end());
  }
  std::sort(active.begin(), active.end());
  active.erase(std::unique(active.begin(), active.end()), active.end());
  std::vector<RankMessage> set_messages;
  for (uint32_t id : active) {
    if (!status.is_ok()) break;
    auto it = sets_.find(static_cast<int32_t>(id));
    if (it != sets_.end()) status = run_round(*it->second, false, now, set_messages, progress, clock);
  }
  if (negotiate && status.is_ok()) maybe_engage_fast_path(*sets_[0]);
  last_round_end_.store(clock);
  if (!status.is_ok()) {
    RELAX_LOG(Error, status.message);
    finish(status.code, status.message);
    return false;
  }
  busy_.store(any_set_busy());
  last_round_progressed_.store(progress);
  // An idle rank's tick exists to answer peers that wait in a round (their requests are matched
  // when this rank submits, which wakes it at once). While rounds change nothing (a peer waits
  // for this rank's next gradient), each tick only costs every member a round: over TCP, 1 ms
  // ticks were 380 rounds per step of PowerSGD on 4 ranks sharing 2 cores, CPU the framework
  // needed (docs/performance.md). So the tick grows while nothing changes.
  idle_tick_ms_.store(progress || busy_.load()
                          ? config_.cycle_time_ms
                          : std::min(std::max(config_.cycle_time_ms, config_.idle_tick_max_ms),
                                     std::max(config_.cycle_time_ms, idle_tick_ms_.load() * 2)));
  throttle_ms_.store((!progress && busy_.load() && instant)
                         ? std::min(config_.cycle_time_ms, std::max(0.02, throttle_ms_.load() * 2))
                         : 0);
  const Coordinator& global = sets_[0]->coordinator;
  if (global.shutdown_requested()) {
    const int who = global.shutdown_rank();
    const std::string reason =
        who == mpi_.topology().rank
            ? std::string("relaxlib was shut down on this rank.")
            : "relaxlib's engine stopped because rank " + std::to_string(who) +
                  " shut down (it finished, called shutdown(), or failed); collectives are no longer possible in "
                  "this job.";
    finish(RELAX_ERR_SHUTDOWN, reason);
    return false;
  }
  return true;
}

// Scheduling: with nothing pending, the engine sleeps until a submission (or a cycle tick, so
// peers waiting in a round are answered). With requests pending it enters the next round at
// once and waits inside it for the peers, so a peer's submission is matched without a cycle of
// delay. Only rounds that changed nothing and completed instantly (every rank spinning on
// requests the others have not submitted) are throttled, with a growing pause.
void Engine::loop() {
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // short throttle waits must stay short
  std::vector<RankMessage> messages;
  while (cycle(messages)) {
  }
  std::lock_guard<std::mutex> running(cycle_mutex_);
  std::lock_guard<std::mutex> lock(mutex_);
  sets_.clear();  // frees the sets' communicators on this thread, before MPI can be finalized
}

}  // namespace relax
