// Process-set membership changes, decided in a round of the global set: every rank applies the
// same responses in the same round, so the communicator creation below lines up across ranks.
#include <algorithm>

#include "engine/engine.h"
#include "transport/setup_wait.h"
#include "util/logging.h"
#include "util/text.h"

namespace relax {

void Engine::finish_membership(const Response& response, ProcessSetState& global, const Status& status,
                               int64_t result) {
  for (const ResponseTensor& t : response.tensors) {
    auto local = global.pending.find(t.name);
    if (local == global.pending.end()) continue;
    LocalRequest request = std::move(local->second);
    global.pending.erase(local);
    retire(0, t.name);
    finish_request(handles_, request, status.code, status.message, result);
  }
}

void Engine::apply_membership(std::vector<Response>& responses) {
  for (const Response& r : responses) {
    if (r.kind == Response::Kind::Error) {
      finish_membership(r, *sets_[0], Status::error(r.status, r.message), -1);
    } else if (r.type == RELAX_REQ_ADD_PROCESS_SET) {
      add_process_set(r);
    } else {
      remove_process_set(r);
    }
  }
}

void Engine::add_process_set(const Response& response) {
  ProcessSetState& global = *sets_[0];
  const std::vector<int64_t>& ranks64 = response.tensors.front().first().splits;
  std::vector<int> ranks(ranks64.begin(), ranks64.end());
  for (const auto& entry : set_info_) {
    if (entry.second.world_ranks == ranks) {
      finish_membership(response, global,
                        Status::error(RELAX_ERR_PROCESS_SET, "a process set with ranks " + rank_list(ranks) +
                                                                 " already exists (id " +
                                                                 std::to_string(entry.first) + ")"),
                        -1);
      return;
    }
  }
  // MPI_Comm_create has no nonblocking form: a bounded barrier over the same ranks first, so a
  // rank frozen or gone before it is named on every other rank instead of holding them inside
  // it (setup_wait.h; the window left between the two: docs/security.md).
  const double timeout = collective_config_.peer_timeout_s;
  Status ready = bounded_barrier(mpi_.control(), timeout, "the creation of process set " + rank_list(ranks));
  if (!ready.is_ok()) {
    finish_membership(response, global, ready, -1);
    return;
  }
  MPI_Group world_group, group;
  MPI_Comm_group(mpi_.control(), &world_group);
  MPI_Group_incl(world_group, static_cast<int>(ranks.size()), ranks.data(), &group);
  MPI_Comm control = MPI_COMM_NULL, data = MPI_COMM_NULL;
  const int rc = MPI_Comm_create(mpi_.control(), group, &control);  // collective over all ranks
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  const int32_t id = next_set_id_++;
  if (rc != MPI_SUCCESS) {
    finish_membership(response, global,
                      mpi_call_failed(rc, "creating process set " + rank_list(ranks)),
                      -1);
    return;
  }
  const auto me = std::find(ranks.begin(), ranks.end(), mpi_.topology().rank);
  const int rank = me == ranks.end() ? -1 : static_cast<int>(me - ranks.begin());
  if (rank >= 0) {
    MPI_Comm_set_errhandler(control, MPI_ERRORS_RETURN);
    const Status duplicated = bounded_comm_dup(control, data, timeout, "the creation of process set " + rank_list(ranks));
    if (!duplicated.is_ok()) {  // `control` may still be in use by the posted duplication: kept
      finish_membership(response, global, duplicated, -1);
      return;
    }
    MPI_Comm_set_errhandler(data, MPI_ERRORS_RETURN);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (rank >= 0) sets_[id] = make_set(id, ranks, rank, control, data, true);
    set_info_[id] = ProcessSetInfo{ranks, rank};
  }
  RELAX_LOG(Debug, "added process set " << id << " with ranks " << rank_list(ranks));
  finish_membership(response, global, Status::ok(), id);
}

void Engine::remove_process_set(const Response& response) {
  ProcessSetState& global = *sets_[0];
  const int32_t id = response.tensors.front().first().root_rank;
  bool known;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    known = set_info_.erase(id) > 0;
  }
  if (!known) {
    finish_membership(response, global,
                      Status::error(RELAX_ERR_PROCESS_SET, "process set " + std::to_string(id) + " does not exist"), -1);
    return;
  }
  auto it = sets_.find(id);
  if (it != sets_.end()) {
    fail_set(*it->second, RELAX_ERR_PROCESS_SET,
             "process set " + std::to_string(id) + " was removed before this request completed");
    std::lock_guard<std::mutex> lock(mutex_);
    sets_.erase(it);
    active_names_.erase(id);  // fail_set retired them all; a later set may reuse the id
  }
  RELAX_LOG(Debug, "removed process set " << id);
  finish_membership(response, global, Status::ok(), id);
}

}  // namespace relax
