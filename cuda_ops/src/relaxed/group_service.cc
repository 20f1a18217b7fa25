#include "relaxed/group_service.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <chrono>
#include <cstring>
#include <memory>

#include "transport/liveness.h"
#include "transport/mpi_context.h"
#include "transport/setup_wait.h"
#include "transport/tags.h"
#include "util/backoff.h"

namespace relax {
namespace {

constexpr int kRequestTag = tags::kGroupRequest;
constexpr int kReplyTag = tags::kGroupReply;

// Reply layout: int64 group id, int64 new step, int64 count, then count int32 ranks (padded to
// 8 bytes each) and count doubles.
std::vector<uint8_t> encode(const GroupAssignment& a) {
  const size_t n = a.members.size();
  std::vector<uint8_t> bytes(24 + 16 * n);
  const int64_t header[3] = {a.group_id, a.new_step, static_cast<int64_t>(n)};
  std::memcpy(bytes.data(), header, 24);
  for (size_t i = 0; i < n; ++i) {
    const int64_t rank = a.members[i];
    std::memcpy(bytes.data() + 24 + 8 * i, &rank, 8);
    std::memcpy(bytes.data() + 24 + 8 * n + 8 * i, &a.weights[i], 8);
  }
  return bytes;
}

GroupAssignment decode(const std::vector<uint8_t>& bytes) {
  GroupAssignment a;
  int64_t header[3];
  std::memcpy(header, bytes.data(), 24);
  a.group_id = header[0];
  a.new_step = header[1];
  const size_t n = static_cast<size_t>(header[2]);
  for (size_t i = 0; i < n; ++i) {
    int64_t rank;
    double weight;
    std::memcpy(&rank, bytes.data() + 24 + 8 * i, 8);
    std::memcpy(&weight, bytes.data() + 24 + 8 * n + 8 * i, 8);
    a.members.push_back(static_cast<int>(rank));
    a.weights.push_back(weight);
  }
  return a;
}

}  // namespace

// ---- policy ----

GroupPolicy::GroupPolicy(int size, int group_size, int max_lag, double grace_seconds, double grace_fraction)
    : size_(size), group_size_(group_size), max_lag_(max_lag), grace_(grace_seconds), grace_fraction_(grace_fraction),
      progress_(static_cast<size_t>(size), -1), last_arrival_(static_cast<size_t>(size), -1.0),
      interval_(static_cast<size_t>(size), 0.0), retired_(static_cast<size_t>(size), false) {}

void GroupPolicy::retire(int rank) { retired_[static_cast<size_t>(rank)] = true; }

void GroupPolicy::arrive(int rank, int64_t step, double now) {
  const auto r = static_cast<size_t>(rank);
  // A rank back after retiring (a new training run in the same job) numbers its steps anew: its
  // old progress would make it, or everyone else, look lagging. The pause is not a step either.
  progress_[r] = retired_[r] ? step : std::max(progress_[r], step);
  if (retired_[r]) last_arrival_[r] = -1.0;
  retired_[r] = false;
  if (last_arrival_[r] >= 0) {
    const double gap = now - last_arrival_[r];
    interval_[r] = interval_[r] > 0 ? 0.75 * interval_[r] + 0.25 * gap : gap;
  }
  last_arrival_[r] = now;
  waiting_.push_back({rank, step, now, now + std::max(grace_, grace_fraction_ * interval_[r])});
}

double GroupPolicy::next_deadline(double now) const {
  double earliest = std::numeric_limits<double>::infinity();
  for (const Waiting& w : waiting_) {
    for (double t : {w.deadline, adoption_deadline(w)}) {
      if (t > now) earliest = std::min(earliest, t);
    }
  }
  return earliest;
}

double GroupPolicy::adoption_deadline(const Waiting& w) const {
  double fastest = std::numeric_limits<double>::infinity();
  for (size_t r = 0; r < interval_.size(); ++r) {
    if (!retired_[r] && interval_[r] > 0) fastest = std::min(fastest, interval_[r]);
  }
  const double wait = std::isfinite(fastest) ? 2 * fastest : 0;
  return std::max(w.deadline, w.since + wait);
}

GroupAssignment GroupPolicy::make(const std::vector<Waiting>& contributors, const Waiting* adopter) {
  GroupAssignment a;
  a.group_id = next_id_++;
  int64_t newest = 0;
  for (const Waiting& w : contributors) newest = std::max(newest, w.step);
  std::vector<std::pair<int, double>> members;
  for (const Waiting& w : contributors) members.push_back({w.rank, 1.0 / static_cast<double>(contributors.size())});
  if (adopter) members.push_back({adopter->rank, 0.0});
  std::sort(members.begin(), members.end());
  for (const auto& [rank, weight] : members) {
    a.members.push_back(rank);
    a.weights.push_back(weight);
  }
  a.new_step = newest;  // per member, the service replies max(own step, newest) for adopters
  if (adopter) progress_[static_cast<size_t>(adopter->rank)] = newest;
  return a;
}

const std::vector<int>& GroupPolicy::partition(int64_t step) const {
  auto found = partitions_.find(step);
  if (found != partitions_.end()) return found->second;
  const auto n = static_cast<size_t>(size_);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  uint64_t state = static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  for (size_t i = n; i > 1; --i) {  // Fisher-Yates with splitmix64
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    std::swap(order[i - 1], order[(z ^ (z >> 31)) % i]);
  }
  order.resize(2 * n);
  for (size_t at = 0; at < n; ++at) order[n + static_cast<size_t>(order[at])] = static_cast<int>(at);
  return partitions_.emplace(step, std::move(order)).first->second;
}

std::vector<int> GroupPolicy::intended_partners(const Waiting& w, const std::vector<Waiting>& fresh,
                                                int64_t leader) const {
  const std::vector<int>& order = partition(w.step);
  const auto n = static_cast<size_t>(size_), g = static_cast<size_t>(group_size_);
  const size_t first = static_cast<size_t>(order[n + static_cast<size_t>(w.rank)]) / g * g;
  std::vector<int> partners;
  for (size_t at = first; at < std::min(n, first + g); ++at) {
    const int r = order[at];
    if (r == w.rank) continue;
    const auto i = static_cast<size_t>(r);
    const bool waiting_here = std::any_of(fresh.begin(), fresh.end(),
                                          [&](const Waiting& x) { return x.rank == r && x.step == w.step; });
    if (waiting_here || (!retired_[i] && progress_[i] < w.step && progress_[i] + max_lag_ >= leader)) {
      partners.push_back(r);
    }
  }
  return partners;
}

std::vector<GroupPolicy::Waiting> GroupPolicy::group_for(const Waiting& w, const std::vector<Waiting>& fresh,
                                                         int64_t leader, double now) const {
  const std::vector<int> wanted = intended_partners(w, fresh, leader);
  std::vector<Waiting> chosen{w};
  auto add_if = [&](auto&& take) {
    for (const Waiting& x : fresh) {
      if (x.rank != w.rank && static_cast<int>(chosen.size()) < group_size_ && take(x)) chosen.push_back(x);
    }
  };
  if (wanted.empty()) {  // with others whose intended partners cannot come either, or alone
    add_if([&](const Waiting& x) { return intended_partners(x, fresh, leader).empty(); });
    return chosen;
  }
  add_if([&](const Waiting& x) {
    return x.step == w.step && std::find(wanted.begin(), wanted.end(), x.rank) != wanted.end();
  });
  if (chosen.size() == wanted.size() + 1) return chosen;
  if (now < w.deadline) return {};
  chosen.resize(1);  // grace over: whoever waits, in arrival order, or alone
  add_if([](const Waiting&) { return true; });
  return chosen;
}

std::vector<GroupAssignment> GroupPolicy::form(double now) {
  if (!waiting_.empty()) {  // keep the partitions of the steps still waited at (form() runs every poll)
    int64_t oldest = waiting_.front().step;
    for (const Waiting& w : waiting_) oldest = std::min(oldest, w.step);
    partitions_.erase(partitions_.begin(), partitions_.lower_bound(oldest));
  }
  std::vector<GroupAssignment> formed;
  while (!waiting_.empty()) {
    int64_t leader = -1;
    size_t active = 0;
    for (size_t r = 0; r < progress_.size(); ++r) {
      if (retired_[r]) continue;
      leader = std::max(leader, progress_[r]);
      ++active;
    }
    std::vector<Waiting> fresh, stale;
    for (const Waiting& w : waiting_) (w.step + max_lag_ >= leader ? fresh : stale).push_back(w);
    std::vector<Waiting> chosen;
    for (const Waiting& w : fresh) {  // oldest first
      chosen = group_for(w, fresh, leader, now);
      if (!chosen.empty()) break;
    }
    if (chosen.empty() && !stale.empty() &&
        ((fresh.empty() && waiting_.size() >= active) || now >= adoption_deadline(stale.front()))) {
      // Nobody can come to adopt from (the most advanced rank is waiting or retired), or nobody
      // came within about a step of the fastest rank (the ranks ahead may be blocked in a
      // collective of the whole job that waits for these): lagging ranks average among
      // themselves rather than wait forever.
      chosen.assign(stale.begin(), stale.begin() + std::min<size_t>(stale.size(), static_cast<size_t>(group_size_)));
      stale.clear();
    }
    // Otherwise a lagging rank waits for the next group of ranks that are ready: the most
    // advanced rank is computing and will arrive, so the wait is at most about one of its steps.
    if (chosen.empty()) break;
    const Waiting* adopter = stale.empty() ? nullptr : &stale.front();  // catches up through this group
    formed.push_back(make(chosen, adopter));
    auto picked = [&](const Waiting& w) {
      return std::find(formed.back().members.begin(), formed.back().members.end(), w.rank) !=
             formed.back().members.end();
    };
    waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), picked), waiting_.end());
  }
  return formed;
}

// ---- service ----

GroupService::~GroupService() { stop(); }

Status GroupService::start(MPI_Comm world, int group_size, int max_lag, double grace_ms, double grace_fraction,
                           double timeout_s) {
  if (started()) return Status::ok();
  timeout_s_ = peer_timeout_seconds(timeout_s);
  if (group_size < 1 || max_lag < 0 || grace_ms < 0 || grace_fraction < 0 || grace_fraction >= 1) {
    return Status::error(RELAX_ERR_INVALID_ARGUMENT,
                         "group generator: group_size >= 1, max_lag >= 0, grace_ms >= 0, 0 <= grace_fraction < 1");
  }
  // Collective over `world`: bounded, so a member frozen before it joins is named instead of
  // holding the others here (comm_ stays null and the service unstarted).
  Status dup = bounded_comm_dup(world, comm_, timeout_s_, "the group generator's start");
  if (!dup.is_ok()) return dup;
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  group_size_ = group_size;
  max_lag_ = max_lag;
  grace_seconds_ = grace_ms / 1000.0;
  grace_fraction_ = grace_fraction;
  stopping_ = false;
  if (rank_ == 0) generator_ = std::thread([this] { generate(); });
  return Status::ok();
}

void GroupService::generate() {
  GroupPolicy policy(size_, group_size_, max_lag_, grace_seconds_, grace_fraction_);
  int64_t incoming[2];
  MPI_Request receive;
  MPI_Irecv(incoming, 2, MPI_INT64_T, MPI_ANY_SOURCE, kRequestTag, comm_, &receive);
  std::vector<std::vector<uint8_t>> replies;  // kept alive until their sends complete
  std::vector<MPI_Request> sends;
  while (!stopping_) {
    int arrived = 0;
    MPI_Test(&receive, &arrived, MPI_STATUS_IGNORE);
    const double now = steady_seconds();
    if (arrived) {
      if (incoming[1] < 0) {
        policy.retire(static_cast<int>(incoming[0]));
      } else {
        policy.arrive(static_cast<int>(incoming[0]), incoming[1], now);
      }
      MPI_Irecv(incoming, 2, MPI_INT64_T, MPI_ANY_SOURCE, kRequestTag, comm_, &receive);
    }
    for (GroupAssignment& group : policy.form(now)) {
      for (int member : group.members) {
        replies.push_back(encode(group));
        sends.emplace_back();
        MPI_Isend(replies.back().data(), static_cast<int>(replies.back().size()), MPI_BYTE, member, kReplyTag,
                  comm_, &sends.back());
      }
    }
    if (!sends.empty()) {
      int done = 0;
      MPI_Testall(static_cast<int>(sends.size()), sends.data(), &done, MPI_STATUSES_IGNORE);
      if (done) {
        sends.clear();
        replies.clear();
      }
    }
    if (!arrived) std::this_thread::sleep_for(std::chrono::microseconds(policy.waiting() ? 20 : 200));
  }
  MPI_Cancel(&receive);  // a cancelled receive completes locally: `incoming` may then go
  MPI_Wait(&receive, MPI_STATUS_IGNORE);
  // Replies to members that never take them (frozen, gone): bounded, then left posted with
  // their buffers leaked instead of waiting forever.
  bool timed_out = false;
  poll_with_backoff(
      [&](int& done) { return MPI_Testall(static_cast<int>(sends.size()), sends.data(), &done, MPI_STATUSES_IGNORE); },
      200, /*yield=*/false, 1.0 / 32, peer_silence_noted() ? 1e-3 : std::min(timeout_s_, 1.0), timed_out);
  if (timed_out) new std::vector<std::vector<uint8_t>>(std::move(replies));  // NOLINT: leaked on purpose
}

Status GroupService::request(int64_t step, GroupAssignment& out) {
  if (!started()) return Status::error(RELAX_ERR_NOT_INITIALIZED, "the group generator was not started");
  if (peer_silence_noted()) return peer_silence_status();
  // Heap buffers: if the generator (rank 0) stops answering, the request and the reply's receive
  // stay posted and their buffers are leaked rather than freed under MPI.
  auto message = std::make_unique<int64_t[]>(2);
  message[0] = rank_;
  message[1] = step;
  auto bytes = std::make_unique<std::vector<uint8_t>>(24 + 16 * static_cast<size_t>(size_ + 1));
  MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int rc = MPI_Irecv(bytes->data(), static_cast<int>(bytes->size()), MPI_BYTE, 0, kReplyTag, comm_, &requests[0]);
  if (rc == MPI_SUCCESS) rc = MPI_Isend(message.get(), 2, MPI_INT64_T, 0, kRequestTag, comm_, &requests[1]);
  if (rc != MPI_SUCCESS) return mpi_call_failed(rc, "group request");
  int done = 0;
  const double start = steady_seconds();
  while (!done) {  // poll with back-off: a blocking receive would spin a core
    rc = MPI_Testall(2, requests, &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {  // the generator's rank was lost (ULFM): no reply is coming
      message.release();  // NOLINT: one of the two may still be posted, leaked on purpose
      bytes.release();    // NOLINT: likewise
      return mpi_call_failed(rc, "a request to the group generator");
    }
    if (done) break;
    const double waited = steady_seconds() - start;
    const bool silent = peer_silence_noted(), too_long = waited > timeout_s_;
    if (stopping_ || silent || too_long) {
      MPI_Cancel(&requests[0]);  // the reply's receive; the small request went out eagerly or stays
      int cancelled = 0;
      MPI_Test(&requests[0], &cancelled, MPI_STATUS_IGNORE);
      MPI_Test(&requests[1], &done, MPI_STATUS_IGNORE);
      if (requests[0] != MPI_REQUEST_NULL || requests[1] != MPI_REQUEST_NULL) {
        message.release();  // NOLINT: still posted, leaked on purpose
        bytes.release();    // NOLINT: likewise
      }
      if (silent) return peer_silence_status();
      if (too_long) {
        return Status::error(RELAX_ERR_STALLED,
                             note_peer_silence(peer_silence_message(world_ranks_of(comm_, {0}), timeout_s_,
                                                                    "a request to the group generator")));
      }
      return Status::error(RELAX_ERR_SHUTDOWN, "relaxlib was shut down while waiting for a group");
    }
    if (waited > 50e-6) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  out = decode(*bytes);
  // Only a rank that adopts the average (weight 0) takes over the group's step.
  const auto me = std::find(out.members.begin(), out.members.end(), rank_);
  const bool adopts = me != out.members.end() && out.weights[static_cast<size_t>(me - out.members.begin())] == 0.0;
  out.new_step = adopts ? std::max(out.new_step, step) : step;
  return Status::ok();
}

Status GroupService::retire() {
  if (!started()) return Status::ok();
  if (peer_silence_noted()) return peer_silence_status();
  const int64_t message[2] = {rank_, -1};  // two words: sent eagerly, the blocking send returns at once
  int rc = MPI_Send(message, 2, MPI_INT64_T, 0, kRequestTag, comm_);
  return rc == MPI_SUCCESS ? Status::ok() : mpi_call_failed(rc, "group retire");
}

void GroupService::stop() {
  stopping_ = true;
  if (generator_.joinable()) generator_.join();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  comm_ = MPI_COMM_NULL;
}

}  // namespace relax
