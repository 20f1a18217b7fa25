// Cached sub-communicators of the direct lane's group averages (relaxed/direct_lane.h declares
// GroupCommunicators): created collectively by a group's members, kept while every member has room.
#include <chrono>

#include "relaxed/direct_lane.h"
#include "relaxed/lane_support.h"
#include "transport/liveness.h"
#include "transport/mpi_context.h"
#include "util/backoff.h"
#include "util/logging.h"
#include "util/text.h"

namespace relax {

GroupCommunicators::GroupCommunicators(MPI_Comm parent, size_t capacity, CollectiveConfig config)
    : parent_(parent), capacity_(capacity), config_(config) {
  // Groups change from step to step: a shared-memory segment per group would cost its creation
  // each time and up to capacity x segment of memory. Groups use MPI.
  config_.shm_allowed = false;
}

GroupCommunicators::~GroupCommunicators() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& [members, entry] : cache_) {
    entry.collectives.reset();
    MPI_Comm_free(&entry.comm);
  }
  release_transient();
}

Status GroupCommunicators::acquire(const std::vector<int>& members, Collectives*& out, bool& transient,
                                   double timeout_s) {
  transient = false;
  auto it = cache_.find(members);
  if (it != cache_.end()) {
    out = it->second.collectives.get();
    return Status::ok();
  }
  const auto start = std::chrono::steady_clock::now();
  MPI_Group parent_group, group;
  MPI_Comm_group(parent_, &parent_group);
  MPI_Group_incl(parent_group, static_cast<int>(members.size()), members.data(), &group);
  MPI_Comm comm = MPI_COMM_NULL;
  const int tag = static_cast<int>(fnv1a(rank_list(members)) & 0x3fff);
  int rc = MPI_Comm_create_group(parent_, group, tag, &comm);
  MPI_Group_free(&group);
  MPI_Group_free(&parent_group);
  if (rc != MPI_SUCCESS) return mpi_failure(rc, "MPI_Comm_create_group");
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  // Cache only if every member can (decided together: caches never disagree). Non-blocking and
  // bounded: a member that stops answering here fails the wait naming it; the reduction then
  // stays posted (it cannot be cancelled), so its two words and the communicator are leaked.
  auto room = std::make_unique<int[]>(2);
  room[0] = cache_.size() < capacity_ ? 1 : 0;
  MPI_Request request = MPI_REQUEST_NULL;
  rc = MPI_Iallreduce(&room[0], &room[1], 1, MPI_INT, MPI_MIN, comm, &request);
  if (rc != MPI_SUCCESS) return mpi_failure(rc, "MPI_Iallreduce");
  bool timed_out = false;
  rc = poll_with_backoff([&](int& done) { return MPI_Test(&request, &done, MPI_STATUS_IGNORE); }, 200,
                         /*yield=*/false, 1.0 / 32, timeout_s, timed_out);
  if (timed_out || peer_silence_noted()) {
    room.release();  // NOLINT: deliberately leaked, see above (comm likewise: never freed)
    return Status::error(RELAX_ERR_STALLED, report_silence(comm, timeout_s, "the creation of a group's communicator"));
  }
  if (rc != MPI_SUCCESS) return mpi_failure(rc, "MPI_Test");
  const int all_have_room = room[1];
  creation_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Entry entry{comm, std::make_unique<Collectives>(comm, config_)};
  out = entry.collectives.get();
  if (all_have_room) {
    cache_.emplace(members, std::move(entry));
  } else {
    transient_ = std::move(entry);
    transient = true;
  }
  return Status::ok();
}

void GroupCommunicators::release_transient() {
  if (transient_.comm == MPI_COMM_NULL) return;
  transient_.collectives.reset();
  MPI_Comm_free(&transient_.comm);
  transient_.comm = MPI_COMM_NULL;
}

}  // namespace relax
