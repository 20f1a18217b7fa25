#include "transport/liveness.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

#include "util/text.h"
#include "util/types.h"

namespace relax {
namespace {

// Tags no collective uses (theirs are small or counted up from kPipelineTag) on whichever
// communicator timed out; these messages are only ever sent once a wait on it has failed.
// A rank that timed out asks every other "did you time out too?" (kPingTag, payload: the
// asker's epoch) and answers every such question it receives while it listens (kPongTag,
// echoing the epoch). Only an answer carrying the asker's current epoch counts: a question
// or an answer left over from an earlier report (by a rank that has since stopped listening)
// can never make a rank look alive.
constexpr int kPingTag = 32001;
constexpr int kPongTag = 32002;
// How much longer report_silence listens for the answer of a peer that asked it (and so is alive)
// but whose answer has not come when the grace ends: the asker answers within moments.
constexpr double kAskerAnswerSeconds = 1.0;

// Per process, counted up by each report: answers are compared with it.
std::atomic<int64_t> g_epoch{0};

std::mutex g_silence_mutex;
std::string g_silence_reason;
std::atomic<bool> g_silence{false};
std::atomic<bool> g_failure{false};   // the silence is a lost process (note_peer_failure)
std::atomic<bool> g_survived{false};  // a failure was cleared by a reset

// register_host_pids' table and the pids report_silence() found silent (under g_silence_mutex).
MPI_Group g_pid_group = MPI_GROUP_NULL;
std::vector<int64_t> g_host_pids;
std::vector<int64_t> g_silent_pids;
std::vector<int64_t> g_lost_pids;  // note_lost_pids

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

}  // namespace

double peer_timeout_seconds(double configured) { return configured > 0 ? configured : kDefaultPeerTimeoutSeconds; }

std::vector<int> world_ranks_of(MPI_Comm comm, const std::vector<int>& ranks) {
  std::vector<int> world(ranks.size(), MPI_UNDEFINED);
  MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
  if (MPI_Comm_group(comm, &group) == MPI_SUCCESS && MPI_Comm_group(MPI_COMM_WORLD, &world_group) == MPI_SUCCESS) {
    MPI_Group_translate_ranks(group, static_cast<int>(ranks.size()), ranks.data(), world_group, world.data());
  }
  if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
  if (world_group != MPI_GROUP_NULL) MPI_Group_free(&world_group);
  for (size_t i = 0; i < world.size(); ++i) {
    if (world[i] == MPI_UNDEFINED) world[i] = ranks[i];
  }
  return world;
}

namespace {

// Sends `value` to `peer` and forgets the request: a send to a rank that no longer listens stays
// posted for good, so its one-word payload is deliberately leaked (at most one per peer and report).
void send_and_forget(int64_t value, int peer, int tag, MPI_Comm comm) {
  auto* payload = new int64_t(value);  // NOLINT: leaked on purpose, see above
  MPI_Request send = MPI_REQUEST_NULL;
  if (MPI_Isend(payload, 1, MPI_INT64_T, peer, tag, comm, &send) == MPI_SUCCESS) MPI_Request_free(&send);
}

// A receive posted for this report: its buffer is heap-allocated and, if the receive cannot be
// cancelled (it completed meanwhile, or MPI refuses), it is completed before the buffer goes.
struct PostedReceive {
  std::unique_ptr<int64_t> value = std::make_unique<int64_t>(0);
  MPI_Request request = MPI_REQUEST_NULL;
  int source = -1;
  void post(int from, int tag, MPI_Comm comm) {
    MPI_Irecv(value.get(), 1, MPI_INT64_T, from, tag, comm, &request);
  }
  bool test() {  // true once a message came (request freed, `source` set)
    if (request == MPI_REQUEST_NULL) return false;
    int done = 0;
    MPI_Status status;
    if (MPI_Test(&request, &done, &status) != MPI_SUCCESS || !done) return false;
    source = status.MPI_SOURCE;
    return true;
  }
  // A cancelled receive completes locally (MPI 3.1, 3.8.4). True when the message came after all
  // (the cancel lost the race with it): the value is then valid.
  bool withdraw() {
    if (request == MPI_REQUEST_NULL) return false;
    MPI_Cancel(&request);
    MPI_Status status;
    if (MPI_Wait(&request, &status) != MPI_SUCCESS) return false;
    int cancelled = 1;
    MPI_Test_cancelled(&status, &cancelled);
    if (!cancelled) source = status.MPI_SOURCE;
    return !cancelled;
  }
};

// Ranks of `comm` (not world ranks) that did not answer within the grace; empty when all did.
std::vector<int> unanswered_peers(MPI_Comm comm, double grace_seconds) {
  int size = 1, rank = 0;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  const int64_t epoch = g_epoch.fetch_add(1) + 1;
  std::vector<char> answered(static_cast<size_t>(size), 0);
  std::vector<PostedReceive> answers(static_cast<size_t>(size));
  PostedReceive question;
  question.post(MPI_ANY_SOURCE, kPingTag, comm);
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    answers[static_cast<size_t>(r)].post(r, kPongTag, comm);
    send_and_forget(epoch, r, kPingTag, comm);
  }
  // Listen for the whole grace, even once every peer answered: a rank that times out a little
  // later asks then, and must hear this one answer (ranks stuck in the same wait time out within
  // moments of each other). A peer that asks near the grace's end answers this rank's question
  // right after its own (it first drains the questions waiting for it), so for a peer that asked
  // but has not answered yet, listening goes on for a moment longer: a frozen rank cannot ask.
  std::vector<char> asked(static_cast<size_t>(size), 0);
  const auto awaiting_an_asker = [&] {
    for (int r = 0; r < size; ++r) {
      if (asked[static_cast<size_t>(r)] && !answered[static_cast<size_t>(r)]) return true;
    }
    return false;
  };
  const double until = steady_seconds() + grace_seconds;
  const double asker_until = until + kAskerAnswerSeconds;
  for (double now = steady_seconds(); now < until || (now < asker_until && awaiting_an_asker());
       now = steady_seconds()) {
    bool quiet = true;
    while (question.test()) {  // answer every question, stale ones too (the asker ignores those)
      send_and_forget(*question.value, question.source, kPongTag, comm);
      if (question.source >= 0 && question.source < size) asked[static_cast<size_t>(question.source)] = 1;
      question.post(MPI_ANY_SOURCE, kPingTag, comm);
      quiet = false;
    }
    for (int r = 0; r < size; ++r) {
      PostedReceive& answer = answers[static_cast<size_t>(r)];
      if (!answer.test()) continue;
      quiet = false;
      if (*answer.value == epoch) {
        answered[static_cast<size_t>(r)] = 1;
      } else {
        answer.post(r, kPongTag, comm);  // an answer to an earlier report: drained, wait on
      }
    }
    if (quiet) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (question.withdraw()) send_and_forget(*question.value, question.source, kPongTag, comm);  // came at the end
  std::vector<int> silent;
  for (int r = 0; r < size; ++r) {
    PostedReceive& answer = answers[static_cast<size_t>(r)];
    if (answer.withdraw() && *answer.value == epoch) answered[static_cast<size_t>(r)] = 1;
    if (r != rank && !answered[static_cast<size_t>(r)]) silent.push_back(r);
  }
  return silent;
}

std::vector<int> every_peer(MPI_Comm comm) {
  int size = 1, rank = 0;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  std::vector<int> peers;
  for (int r = 0; r < size; ++r) {
    if (r != rank) peers.push_back(r);
  }
  return peers;
}

}  // namespace

std::vector<int64_t> host_pids_of(MPI_Comm comm, const std::vector<int>& ranks) {
  std::lock_guard<std::mutex> lock(g_silence_mutex);
  std::vector<int64_t> pids;
  if (ranks.empty()) return pids;
  if (g_pid_group == MPI_GROUP_NULL) return std::vector<int64_t>(ranks.size(), 0);
  std::vector<int> registered(ranks.size(), MPI_UNDEFINED);
  MPI_Group group = MPI_GROUP_NULL;
  if (MPI_Comm_group(comm, &group) != MPI_SUCCESS) return std::vector<int64_t>(ranks.size(), 0);
  MPI_Group_translate_ranks(group, static_cast<int>(ranks.size()), ranks.data(), g_pid_group, registered.data());
  MPI_Group_free(&group);
  for (int r : registered) {
    const bool known = r != MPI_UNDEFINED && r >= 0 && static_cast<size_t>(r) < g_host_pids.size();
    pids.push_back(known ? g_host_pids[static_cast<size_t>(r)] : 0);
  }
  return pids;
}

void note_silent_pids(const std::vector<int64_t>& pids) {
  std::lock_guard<std::mutex> lock(g_silence_mutex);
  if (g_silent_pids.empty() && !g_failure.load()) g_silent_pids = pids;
}

std::string peer_silence_message(const std::vector<int>& world_ranks, double timeout, const std::string& during) {
  const std::string who =
      world_ranks.size() == 1 ? "rank " + std::to_string(world_ranks.front()) : "ranks " + rank_list(world_ranks);
  const std::string limit = timeout == kDefaultPeerTimeoutSeconds
                                ? seconds_text(timeout) + " s (the default; RELAX_OP_TIMEOUT sets it)"
                                : "RELAX_OP_TIMEOUT=" + seconds_text(timeout) + " s";
  return who + " did not answer within " + limit + " during " + during +
         " (frozen, hung, far too slow, or itself waiting on another communicator); collectives are no longer "
         "possible in this job.";
}

std::string report_silence(MPI_Comm comm, double timeout, const std::string& during) {
  if (peer_silence_noted()) return peer_silence_reason();  // another lane found the silent rank already
  const std::vector<int> unanswered = unanswered_peers(comm, silence_grace_seconds(timeout));
  const std::vector<int> named = world_ranks_of(comm, unanswered.empty() ? every_peer(comm) : unanswered);
  note_silent_pids(host_pids_of(comm, unanswered));  // before the note: a waiter told of it reads them
  return note_peer_silence(peer_silence_message(named, timeout, during));
}

void register_host_pids(MPI_Comm world, const std::vector<int64_t>& pids) {
  std::lock_guard<std::mutex> lock(g_silence_mutex);
  if (g_pid_group != MPI_GROUP_NULL) MPI_Group_free(&g_pid_group);
  if (MPI_Comm_group(world, &g_pid_group) != MPI_SUCCESS) g_pid_group = MPI_GROUP_NULL;
  g_host_pids = pids;
}

void note_lost_pids(const std::vector<int64_t>& pids) {
  std::lock_guard<std::mutex> lock(g_silence_mutex);
  g_lost_pids = pids;
}

std::vector<int64_t> lost_peer_pids() {
  std::lock_guard<std::mutex> lock(g_silence_mutex);
  return g_lost_pids;
}

std::vector<int64_t> silent_peer_pids() {
  std::lock_guard<std::mutex> lock(g_silence_mutex);
  return g_silence.load() ? g_silent_pids : std::vector<int64_t>{};
}

std::string note_peer_silence(const std::string& message) {
  std::lock_guard<std::mutex> lock(g_silence_mutex);
  if (g_silence_reason.empty()) g_silence_reason = message;
  g_silence.store(true);
  return g_silence_reason;
}

bool peer_silence_noted() { return g_silence.load(std::memory_order_relaxed); }

std::string note_peer_failure(const std::string& message) {
  std::lock_guard<std::mutex> lock(g_silence_mutex);
  if (g_silence_reason.empty() || !g_failure.load()) g_silence_reason = message;  // a loss explains a silence
  g_failure.store(true);
  g_silence.store(true);
  return g_silence_reason;
}

bool peer_failure_noted() { return g_failure.load(std::memory_order_relaxed); }

Status peer_silence_status() {
  std::lock_guard<std::mutex> lock(g_silence_mutex);
  return Status::error(g_failure.load() ? RELAX_ERR_PROC_FAILED : RELAX_ERR_STALLED, g_silence_reason);
}

void forget_peer_failure_after_reset() {
  std::lock_guard<std::mutex> lock(g_silence_mutex);
  if (g_silence.load()) g_survived.store(true);
  g_silence_reason.clear();
  g_silent_pids.clear();
  g_failure.store(false);
  g_silence.store(false);
}

bool peer_failure_survived() { return g_survived.load(std::memory_order_relaxed); }

void forget_peer_silence_for_tests() {
  std::lock_guard<std::mutex> lock(g_silence_mutex);
  g_silent_pids.clear();
  g_silence_reason.clear();
  g_failure.store(false);
  g_silence.store(false);
}

std::string peer_silence_reason() {
  std::lock_guard<std::mutex> lock(g_silence_mutex);
  return g_silence_reason;
}

}  // namespace relax
