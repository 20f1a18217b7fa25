#include "relaxed/direct_lane.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <sstream>

#include "codecs/codec.h"
#include "relaxed/lane_support.h"
#include "collectives/reduce.h"
#include "engine/request_kind.h"
#include "transport/liveness.h"
#include "transport/mpi_context.h"
#include "transport/setup_wait.h"
#include "transport/tags.h"
#include "util/flush_denormals.h"
#include "util/backoff.h"
#include "util/logging.h"
#include "util/text.h"
#include "util/types.h"

namespace relax {
namespace {

constexpr int kHeaderTag = tags::kDirectHeader;
constexpr int kDataTag = tags::kDirectData;

// What travels ahead of a neighbour's data, so a mismatch is an error, not silent garbage.
struct Header {
  uint64_t name_hash;
  uint64_t variant;  // group average: hash of the member list; neighbour average: the codec
  int64_t count;
  int32_t dtype;
  int32_t poisoned_by;  // CHOCO: the rank whose input was not finite, or -1
};


Status check_headers(const LocalRequest& r, const Header& mine, const std::vector<Header>& theirs) {
  for (size_t k = 0; k < theirs.size(); ++k) {
    const Header& h = theirs[k];
    if (h.variant != mine.variant) {
      const bool group = r.desc.type == RELAX_REQ_GROUP_AVERAGE;
      return Status::error(RELAX_ERR_MISMATCH,
                           request_type_name(r.desc.type) + " '" + r.desc.name + "': rank " +
                               std::to_string(r.direct.peers[k]) +
                               (group ? " averages over a different group than " + rank_list(r.direct.peers) +
                                            "; every member must use the same group generator and seed"
                                      : " uses a different codec (" + std::to_string(h.variant) + " vs " +
                                            std::to_string(mine.variant) + ")"));
    }
    if (h.name_hash != mine.name_hash || h.count != mine.count || h.dtype != mine.dtype) {
      return Status::error(RELAX_ERR_MISMATCH,
                           request_type_name(r.desc.type) + " '" + r.desc.name + "': rank " +
                               std::to_string(r.direct.peers[k]) + " sent a different operation (" +
                               std::to_string(h.count) + " elements of " + dtype_name(h.dtype) + ", other name: " +
                               (h.name_hash == mine.name_hash ? "no" : "yes") +
                               "); neighbours must run the same schedule");
    }
  }
  return Status::ok();
}

// out = self_weight * x + sum_k weights[k] * peers[k], block by block so each input is read
// once from memory and out written once (out may alias x).
template <typename T>
void mix(const T* x, const std::vector<const void*>& peers, double self_weight, const std::vector<double>& weights,
         int64_t count, T* out) {
  constexpr int64_t kBlock = 2048;
  const T ws = static_cast<T>(self_weight);
  for (int64_t start = 0; start < count; start += kBlock) {
    const int64_t end = std::min(count, start + kBlock);
    for (int64_t i = start; i < end; ++i) out[i] = ws * x[i];
    for (size_t k = 0; k < peers.size(); ++k) {
      const T* p = static_cast<const T*>(peers[k]);
      const T w = static_cast<T>(weights[k]);
      for (int64_t i = start; i < end; ++i) out[i] += w * p[i];
    }
  }
}

}  // namespace

// ---- DirectLane ----

namespace {

// Nonblocking and bounded (transport/setup_wait.h): a rank that never joins the duplication is
// named instead of holding init() forever; MPI_COMM_NULL then (the lane starts stopped).
MPI_Comm duplicate(MPI_Comm world, double timeout_s) {
  MPI_Comm comm = MPI_COMM_NULL;
  const Status s = bounded_comm_dup(world, comm, timeout_s, "the direct lane's set-up");
  if (!s.is_ok()) RELAX_LOG(Error, "Direct lane not set up: " << s.message);
  return comm;
}

}  // namespace

DirectLane::DirectLane(MPI_Comm world, HandleTable& handles, const EngineConfig& config,
                       CollectiveConfig collective_config)
    : comm_(duplicate(world, direct_lane_timeout_seconds(config))),
      join_comm_(duplicate(world, direct_lane_timeout_seconds(config))),
      handles_(handles),
      config_(config),
      groups_(comm_, static_cast<size_t>(config.group_cache_capacity), collective_config) {
  if (comm_ == MPI_COMM_NULL || join_comm_ == MPI_COMM_NULL) {  // a peer went silent: every request fails
    abort(peer_silence_noted() ? peer_silence_reason() : "the direct lane could not be set up");
    thread_ = std::thread([this] { loop(); });
    return;
  }
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  thread_ = std::thread([this] { loop(); });
}

DirectLane::~DirectLane() {
  stop("relaxlib was shut down");
  // Requests still posted may touch these buffers for as long as the process lives.
  if (!graveyard_.empty()) new std::vector<std::shared_ptr<void>>(std::move(graveyard_));  // NOLINT: leaked
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // An abandoned join (a peer crashed before joining) stays pending: a non-blocking collective
  // can be neither cancelled nor freed (MPI_Cancel on it aborts the job).
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  if (join_comm_ != MPI_COMM_NULL) MPI_Comm_free(&join_comm_);
}

Status DirectLane::submit(LocalRequest request) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return Status::error(RELAX_ERR_SHUTDOWN, stop_reason_);
    queue_.push_back(std::move(request));
  }
  cv_.notify_one();
  return Status::ok();
}

void DirectLane::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stopping_) {
      stopping_ = true;
      stop_reason_ = reason;
    }
  }
  cv_.notify_all();
}

void DirectLane::stop(const std::string& reason) {
  abort(reason);
  if (thread_.joinable()) thread_.join();
}

void DirectLane::loop() {
  while (true) {
    LocalRequest request;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) {
        for (LocalRequest& r : queue_) finish_request(handles_, r, RELAX_ERR_SHUTDOWN, stop_reason_);
        queue_.clear();
        return;
      }
      request = std::move(queue_.front());
      queue_.pop_front();
    }
    Status status;
    try {
      status = execute(request);
    } catch (const std::exception& e) {
      status = Status::error(RELAX_ERR_INTERNAL, e.what());
    }
    finish_request(handles_, request, status.code, status.message);
  }
}

Status DirectLane::execute(LocalRequest& r) {
  const double start = steady_seconds();
  Status st = r.desc.type == RELAX_REQ_GROUP_AVERAGE ? group_average(r)
              : r.direct.codec                                   ? choco_average(r)
                                                          : neighbor_average(r);
  busy_ns_ += static_cast<int64_t>((steady_seconds() - start) * 1e9);
  return st;
}

namespace {
// Each peer twice, as the exchanges post their receives: a header, then the data.
std::vector<int> paired(const std::vector<int>& peers) {
  std::vector<int> twice;
  for (int peer : peers) twice.insert(twice.end(), {peer, peer});
  return twice;
}
}  // namespace

double direct_lane_timeout_seconds(const EngineConfig& config) {
  return peer_timeout_seconds(config.stall_shutdown_seconds);
}

Status DirectLane::refuse_if_silent() const {
  return peer_silence_noted() ? peer_silence_status() : Status::ok();
}

bool DirectLane::withdraw(std::vector<MPI_Request>& requests) {
  for (MPI_Request& q : requests) {
    if (q != MPI_REQUEST_NULL) MPI_Cancel(&q);
  }
  // A cancelled receive completes locally at once; a send MPI cannot cancel completes only once
  // its peer receives it. Test briefly, then give up on (and keep the buffers of) the rest.
  constexpr double kWithdrawSeconds = 0.1;
  const double until = steady_seconds() + kWithdrawSeconds;
  for (;;) {
    bool posted = false;
    for (MPI_Request& q : requests) {
      int done = 0;
      if (q != MPI_REQUEST_NULL && MPI_Test(&q, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) posted = true;
    }
    if (!posted || steady_seconds() >= until) return posted;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Status DirectLane::wait_all(std::vector<MPI_Request>& requests, const LocalRequest& r,
                            const std::vector<int>& receive_peers, bool& left_posted) {
  left_posted = false;
  const double start = steady_seconds();
  double idle_since = start;
  // Bounded whatever the settings: RELAX_OP_TIMEOUT / RELAX_STALL_SHUTDOWN_TIME, else the default.
  const double limit = direct_lane_timeout_seconds(config_);
  // ~1 ms plus the transfer at 500 MB/s: beyond that, a missing completion means a late peer
  const double bytes = static_cast<double>(r.desc.num_elements()) * static_cast<double>(dtype_size(r.desc.dtype));
  const double spin_seconds = 1e-3 + bytes * static_cast<double>(std::max<size_t>(1, r.direct.peers.size())) / 500e6;
  double warned = 0;
  const std::string what = request_type_name(r.desc.type) + " '" + r.desc.name + "'";
  Status failure;  // the first failed request; the others are still completed (no stale messages)
  std::vector<int> indices(requests.size());
  std::vector<MPI_Status> statuses(requests.size());
  while (true) {
    int completed = 0;
    int rc = MPI_Testsome(static_cast<int>(requests.size()), requests.data(), &completed, indices.data(),
                          statuses.data());
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
      left_posted = withdraw(requests);
      return mpi_failure(rc, "MPI_Testsome");
    }
    if (rc == MPI_ERR_IN_STATUS && failure.is_ok()) {
      for (int i = 0; i < completed; ++i) {
        if (statuses[static_cast<size_t>(i)].MPI_ERROR != MPI_SUCCESS) {
          failure = mpi_failure(statuses[static_cast<size_t>(i)].MPI_ERROR, "receiving from a peer");
          break;
        }
      }
    }
    if (completed == MPI_UNDEFINED) return failure;  // every request is complete
    const double waited = steady_seconds() - start;
    bool stopping;
    std::string stop_reason;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping = stopping_;
      stop_reason = stop_reason_;
    }
    if (peer_silence_noted()) {  // another lane (or the engine) found a silent rank: the job is over
      left_posted = withdraw(requests);
      return peer_silence_status();
    }
    if (stopping) {  // shutdown: peers may be gone
      left_posted = withdraw(requests);
      return Status::error(RELAX_ERR_SHUTDOWN, "relaxlib was shut down during " + what + ": " + stop_reason);
    }
    if (config_.stall_check_seconds > 0 && waited > config_.stall_check_seconds &&
        waited - warned > config_.stall_check_seconds) {
      warned = waited;
      RELAX_LOG(Warning, "Stall: " << what << " has waited " << static_cast<int>(waited) << " s for ranks "
                                   << rank_list(r.direct.peers) << "; they may run a different schedule or be stuck.");
    }
    if (waited > limit) {
      std::vector<int> silent;  // the ranks whose message has not come
      for (size_t i = 0; i < receive_peers.size() && i < requests.size(); ++i) {
        const int peer = receive_peers[i];
        if (requests[i] != MPI_REQUEST_NULL && std::find(silent.begin(), silent.end(), peer) == silent.end()) {
          silent.push_back(peer);
        }
      }
      left_posted = withdraw(requests);
      // The lane's communicator spans every rank but its exchanges only the peers: the ranks whose
      // message is missing are the silent ones (no token exchange needed). Noting the silence
      // stops the engine and every lane, and skips MPI_Finalize (requests may stay posted).
      const std::vector<int>& named = silent.empty() ? r.direct.peers : silent;
      note_silent_pids(host_pids_of(comm_, silent));  // (before the note: a waiter told of it reads them)
      return Status::error(RELAX_ERR_STALLED,
                           note_peer_silence(peer_silence_message(named, limit, what + " on the direct lane")));
    }
    // MPI moves large messages only inside MPI calls: keep calling (yielding the core) for as
    // long as the transfer itself could take, then back off to sleeps (a peer is late).
    if (completed > 0) {
      idle_since = steady_seconds();
    } else if (steady_seconds() - idle_since < spin_seconds) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

Status DirectLane::neighbor_average(LocalRequest& r) {
  const Descriptor& d = r.desc;
  const int64_t count = d.num_elements();
  const size_t esize = dtype_size(d.dtype);
  const size_t bytes = static_cast<size_t>(count) * esize;
  const size_t npeers = r.direct.peers.size();
  Status st = refuse_if_silent();  // before posting anything: nothing may stay posted needlessly
  if (!st.is_ok()) return st;
  // Receives land only in lane-owned buffers (scratch_, theirs), the result reaches r.output only
  // on success, and the header sent lives on the heap: all are buried if requests stay posted.
  if (scratch_.size() < bytes * npeers) scratch_.resize(bytes * npeers);
  std::vector<Header> mine{Header{fnv1a(d.name), 0, count, d.dtype, -1}};
  std::vector<Header> theirs(npeers);
  std::vector<MPI_Request> requests;
  for (size_t k = 0; k < npeers; ++k) {
    requests.emplace_back();
    MPI_Irecv(&theirs[k], sizeof(Header), MPI_BYTE, r.direct.peers[k], kHeaderTag, comm_, &requests.back());
    requests.emplace_back();
    MPI_Irecv(scratch_.data() + k * bytes, static_cast<int>(bytes), MPI_BYTE, r.direct.peers[k], kDataTag, comm_,
              &requests.back());
  }
  for (size_t k = 0; k < npeers; ++k) {
    requests.emplace_back();
    MPI_Isend(mine.data(), sizeof(Header), MPI_BYTE, r.direct.peers[k], kHeaderTag, comm_, &requests.back());
    requests.emplace_back();
    MPI_Isend(r.input, static_cast<int>(bytes), MPI_BYTE, r.direct.peers[k], kDataTag, comm_, &requests.back());
  }
  bool left_posted = false;
  const Status waited = wait_all(requests, r, paired(r.direct.peers), left_posted);
  if (left_posted) {
    bury(scratch_);
    bury(mine);
    bury(theirs);
  }
  traffic_.bytes_sent += static_cast<int64_t>(bytes * npeers);
  traffic_.bytes_received += static_cast<int64_t>(bytes * npeers);
  if (waited.code == RELAX_ERR_SHUTDOWN || waited.code == RELAX_ERR_STALLED || waited.code == RELAX_ERR_PROC_FAILED ||
      left_posted) {
    return waited;  // (a lost peer sent no header: its zeros are no mismatch)
  }
  st = check_headers(r, mine.front(), theirs);  // a size mismatch also truncates: name it first
  if (!st.is_ok()) return st;
  if (!waited.is_ok()) return waited;
  // x' = w_self x + sum_k w_k x_k in one cache-blocked pass, in the tensor's own precision.
  std::vector<const void*> received(npeers);
  for (size_t k = 0; k < npeers; ++k) received[k] = scratch_.data() + k * bytes;
  if (d.dtype == RELAX_FLOAT32) {
    mix(static_cast<const float*>(r.input), received, r.direct.self_weight, r.direct.weights, count,
        static_cast<float*>(r.output));
  } else {
    mix(static_cast<const double*>(r.input), received, r.direct.self_weight, r.direct.weights, count,
        static_cast<double*>(r.output));
  }
  return Status::ok();
}

// CHOCO-gossip: send Q(x - x^) so every neighbour can track x^; errors do not accumulate because
// the estimate, not x, is what neighbours average with.
Status DirectLane::choco_average(LocalRequest& r) {
  const Descriptor& d = r.desc;
  Status st = refuse_if_silent();
  if (!st.is_ok()) return st;
  std::unique_ptr<Codec> codec = make_codec(r.direct.codec);
  const FlushDenormals flush;
  const int64_t count = d.num_elements();
  const size_t npeers = r.direct.peers.size();
  const size_t encoded = static_cast<size_t>(codec->encoded_bytes(count));
  const auto* x = static_cast<const float*>(r.input);
  std::vector<float> delta(static_cast<size_t>(count));
  bool finite = true;
  for (int64_t i = 0; i < count; ++i) {
    delta[static_cast<size_t>(i)] = x[i] - r.direct.estimate_self[i];
    finite &= std::isfinite(delta[static_cast<size_t>(i)]);
  }
  std::vector<uint8_t> mine(encoded), theirs(encoded * npeers);
  if (finite) codec->encode(delta.data(), count, mine.data());
  std::vector<Header> header{Header{fnv1a(d.name), static_cast<uint64_t>(r.direct.codec), count, d.dtype,
                                    finite ? -1 : rank_}};
  std::vector<Header> headers(npeers);
  std::vector<MPI_Request> requests;
  for (size_t k = 0; k < npeers; ++k) {
    requests.emplace_back();
    MPI_Irecv(&headers[k], sizeof(Header), MPI_BYTE, r.direct.peers[k], kHeaderTag, comm_, &requests.back());
    requests.emplace_back();
    MPI_Irecv(theirs.data() + k * encoded, static_cast<int>(encoded), MPI_BYTE, r.direct.peers[k], kDataTag, comm_,
              &requests.back());
  }
  for (size_t k = 0; k < npeers; ++k) {
    requests.emplace_back();
    MPI_Isend(header.data(), sizeof(Header), MPI_BYTE, r.direct.peers[k], kHeaderTag, comm_, &requests.back());
    requests.emplace_back();
    MPI_Isend(mine.data(), static_cast<int>(encoded), MPI_BYTE, r.direct.peers[k], kDataTag, comm_, &requests.back());
  }
  bool left_posted = false;
  const Status waited = wait_all(requests, r, paired(r.direct.peers), left_posted);
  if (left_posted) {  // every buffer of this exchange is the lane's own: keep them all
    bury(header);
    bury(headers);
    bury(mine);
    bury(theirs);
  }
  traffic_.bytes_sent += static_cast<int64_t>(encoded * npeers);
  traffic_.bytes_received += static_cast<int64_t>(encoded * npeers);
  if (waited.code == RELAX_ERR_SHUTDOWN || waited.code == RELAX_ERR_STALLED || waited.code == RELAX_ERR_PROC_FAILED ||
      left_posted) {
    return waited;  // (a lost peer sent no header: its zeros are no mismatch)
  }
  st = check_headers(r, header.front(), headers);
  if (!st.is_ok()) return st;
  if (!waited.is_ok()) return waited;
  for (const Header& h : headers) {
    if (h.poisoned_by >= 0 || !finite) {
      return Status::error(RELAX_ERR_INVALID_ARGUMENT,
                           "neighbour average '" + d.name + "': non-finite values (NaN or Inf) in the input of rank " +
                               std::to_string(finite ? h.poisoned_by : rank_) + " (estimates unchanged)");
    }
  }
  codec->decode_add(mine.data(), count, r.direct.estimate_self);
  for (size_t k = 0; k < npeers; ++k) {
    codec->decode_add(theirs.data() + k * encoded, count, r.direct.estimate_peers + k * static_cast<size_t>(count));
  }
  // x' = x + gamma (w_self x^_self + sum_k w_k x^_k - x^_self)
  auto* out = static_cast<float*>(r.output);
  const float gamma = static_cast<float>(r.direct.consensus_step);
  const float self_weight = static_cast<float>(r.direct.self_weight);
  for (int64_t i = 0; i < count; ++i) {
    float mixed = self_weight * r.direct.estimate_self[i];
    for (size_t k = 0; k < npeers; ++k) {
      mixed += static_cast<float>(r.direct.weights[k]) * r.direct.estimate_peers[k * static_cast<size_t>(count) + static_cast<size_t>(i)];
    }
    out[i] = x[i] + gamma * (mixed - r.direct.estimate_self[i]);
  }
  return Status::ok();
}

Status DirectLane::group_average(LocalRequest& r) {
  const Descriptor& d = r.desc;
  const int64_t count = d.num_elements();
  const size_t bytes = static_cast<size_t>(count) * dtype_size(d.dtype);
  const auto me = std::find(r.direct.peers.begin(), r.direct.peers.end(), rank_);
  const double my_weight = r.direct.weights[static_cast<size_t>(me - r.direct.peers.begin())];
  // Headers between all members first: a member running a different schedule is reported by name
  // (instead of a collective over mismatched groups), and a joined rank sees that a step is due.
  std::vector<int> others;
  for (int member : r.direct.peers) {
    if (member != rank_) others.push_back(member);
  }
  Status st = refuse_if_silent();
  if (!st.is_ok()) return st;
  std::vector<Header> mine{Header{fnv1a(d.name), fnv1a(rank_list(r.direct.peers)), count, d.dtype, -1}};
  std::vector<Header> theirs(others.size());
  std::vector<MPI_Request> requests;
  for (size_t k = 0; k < others.size(); ++k) {
    requests.emplace_back();
    MPI_Irecv(&theirs[k], sizeof(Header), MPI_BYTE, others[k], kHeaderTag, comm_, &requests.back());
  }
  for (int other : others) {
    requests.emplace_back();
    MPI_Isend(mine.data(), sizeof(Header), MPI_BYTE, other, kHeaderTag, comm_, &requests.back());
  }
  bool left_posted = false;
  st = wait_all(requests, r, others, left_posted);
  if (left_posted) {
    bury(mine);
    bury(theirs);
  }
  if (!st.is_ok()) return st;
  LocalRequest named = r;  // check_headers names peers by position
  named.direct.peers = others;
  st = check_headers(named, mine.front(), theirs);
  if (!st.is_ok()) return st;
  if (r.output != r.input) std::memcpy(r.output, r.input, bytes);
  scale_buffer(r.output, count, d.dtype, my_weight);
  if (others.empty()) return Status::ok();
  Collectives* collectives = nullptr;
  bool transient = false;
  // Every member just answered the headers; the (blocking) group creation follows at once.
  st = groups_.acquire(r.direct.peers, collectives, transient, direct_lane_timeout_seconds(config_));
  if (!st.is_ok()) return st;
  st = refuse_if_silent();  // no collective is posted once the job is over
  if (!st.is_ok()) return st;
  const int64_t sent_before = collectives->traffic().bytes_sent;
  const int64_t received_before = collectives->traffic().bytes_received;
  st = collectives->allreduce(r.output, r.output, count, d.dtype, RELAX_OP_SUM, 1.0);
  traffic_.bytes_sent += collectives->traffic().bytes_sent - sent_before;
  traffic_.bytes_received += collectives->traffic().bytes_received - received_before;
  if (transient) groups_.release_transient();
  return st;
}

bool DirectLane::header_pending() {
  int flag = 0;
  if (comm_ == MPI_COMM_NULL) return false;  // never set up (a peer went silent)
  MPI_Iprobe(MPI_ANY_SOURCE, kHeaderTag, comm_, &flag, MPI_STATUS_IGNORE);
  return flag != 0;
}

// A join (a non-blocking maximum over every rank) cannot complete once a peer shut down.
Status DirectLane::stopped_status() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stopping_ ? Status::error(RELAX_ERR_SHUTDOWN, stop_reason_) : Status::ok();
}

Status DirectLane::start_join(int64_t last_step) {
  if (join_request_ != MPI_REQUEST_NULL) return Status::error(RELAX_ERR_INVALID_ARGUMENT, "a join is already pending");
  if (join_comm_ == MPI_COMM_NULL) return stopped_status();  // never set up (a peer went silent)
  join_step_ = last_step;
  join_stopped_since_ = -1;
  int rc = MPI_Iallreduce(&join_step_, &join_max_, 1, MPI_INT64_T, MPI_MAX, join_comm_, &join_request_);
  return rc == MPI_SUCCESS ? Status::ok() : mpi_failure(rc, "MPI_Iallreduce");
}

Status DirectLane::test_join(bool& done, int64_t& max_step) {
  if (join_request_ == MPI_REQUEST_NULL) return Status::error(RELAX_ERR_INVALID_ARGUMENT, "no join is pending");
  int flag = 0;
  int rc = MPI_Test(&join_request_, &flag, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) return mpi_failure(rc, "MPI_Test");
  done = flag != 0;
  if (done) {
    max_step = join_max_;
    return Status::ok();
  }
  // A peer that shut down cleanly joined first, so the join still completes (at once); one that
  // crashed never will. Once the lane stopped, give the join a moment, then report the stop.
  Status stopped = stopped_status();
  if (stopped.is_ok()) return Status::ok();
  constexpr double kJoinGraceSeconds = 1.0;
  if (join_stopped_since_ < 0) join_stopped_since_ = steady_seconds();
  return steady_seconds() - join_stopped_since_ < kJoinGraceSeconds ? Status::ok() : stopped;
}

}  // namespace relax
