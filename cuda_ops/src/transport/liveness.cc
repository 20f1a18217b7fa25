#include "transport/liveness.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

#include "util/text.h"
#include "util/types.h"

namespace relax {
namespace {

// A tag no collective uses (theirs are small or counted up from kPipelineTag) on whichever
// communicator timed out; the tokens are only ever sent once a wait on it has failed.
constexpr int kLivenessTag = 32001;

std::mutex g_silence_mutex;
std::string g_silence_reason;
std::atomic<bool> g_silence{false};

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

std::vector<int> silent_peers(MPI_Comm comm, double grace_seconds) {
  int size = 1, rank = 0;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  static const char token = 1;  // static: a send to a silent peer may outlive this call
  std::vector<char> received(static_cast<size_t>(size), 0);
  std::vector<MPI_Request> receives(static_cast<size_t>(size), MPI_REQUEST_NULL);
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    MPI_Request send = MPI_REQUEST_NULL;
    if (MPI_Isend(&token, 1, MPI_CHAR, r, kLivenessTag, comm, &send) == MPI_SUCCESS) MPI_Request_free(&send);
    MPI_Irecv(&received[static_cast<size_t>(r)], 1, MPI_CHAR, r, kLivenessTag, comm, &receives[static_cast<size_t>(r)]);
  }
  const double until = steady_seconds() + grace_seconds;
  for (;;) {
    // MPI_Test per request (MPI_Testall frees none until all are done): completed ones become
    // MPI_REQUEST_NULL, so the ones left at the end name the silent ranks.
    bool all_done = true;
    for (MPI_Request& request : receives) {
      int done = 1;
      if (request != MPI_REQUEST_NULL) MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      all_done = all_done && done;
    }
    if (all_done || steady_seconds() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::vector<int> silent;
  for (int r = 0; r < size; ++r) {
    MPI_Request& request = receives[static_cast<size_t>(r)];
    if (request == MPI_REQUEST_NULL) continue;
    silent.push_back(r);
    MPI_Cancel(&request);  // a cancelled receive completes locally: `received` may then go
    MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
  if (silent.empty()) {
    for (int r = 0; r < size; ++r) {
      if (r != rank) silent.push_back(r);
    }
  }
  return world_ranks_of(comm, silent);
}

std::string peer_silence_message(const std::vector<int>& world_ranks, double timeout, const std::string& during) {
  const std::string who =
      world_ranks.size() == 1 ? "rank " + std::to_string(world_ranks.front()) : "ranks " + rank_list(world_ranks);
  const std::string limit = timeout == kDefaultPeerTimeoutSeconds
                                ? seconds_text(timeout) + " s (the default; RELAX_OP_TIMEOUT sets it)"
                                : "RELAX_OP_TIMEOUT=" + seconds_text(timeout) + " s";
  return who + " did not answer within " + limit + " during " + during +
         " (frozen, hung or far too slow); collectives are no longer possible in this job.";
}

std::string report_silence(MPI_Comm comm, double timeout, const std::string& during) {
  if (peer_silence_noted()) return peer_silence_reason();  // another lane found the silent rank already
  const std::vector<int> silent = silent_peers(comm, silence_grace_seconds(timeout));
  return note_peer_silence(peer_silence_message(silent, timeout, during));
}

std::string note_peer_silence(const std::string& message) {
  std::lock_guard<std::mutex> lock(g_silence_mutex);
  if (g_silence_reason.empty()) g_silence_reason = message;
  g_silence.store(true);
  return g_silence_reason;
}

bool peer_silence_noted() { return g_silence.load(std::memory_order_relaxed); }

std::string peer_silence_reason() {
  std::lock_guard<std::mutex> lock(g_silence_mutex);
  return g_silence_reason;
}

}  // namespace relax
