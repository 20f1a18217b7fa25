#include "transport/ulfm.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "transport/mpi_context.h"
#include "transport/tags.h"
#include "util/text.h"

#ifndef RELAX_HAVE_ULFM
#if defined(OPEN_MPI) && defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif
#if defined(OMPI_HAVE_MPI_EXT_FTMPI) && OMPI_HAVE_MPI_EXT_FTMPI
#define RELAX_HAVE_ULFM 1
#else
#define RELAX_HAVE_ULFM 0
#endif
#elif RELAX_HAVE_ULFM
#include <mpi-ext.h>
#endif

namespace relax {
namespace {

#if !RELAX_HAVE_ULFM
Status unavailable(const char* what) {
  return Status::error(RELAX_ERR_MPI, std::string(what) +
                                          " is unavailable: relaxlib was built against an MPI without ULFM "
                                          "(fault tolerance needs Open MPI 5 or later)");
}
#else
Status mpi_result(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::ok();
  return Status::error(RELAX_ERR_MPI, std::string(what) + " failed: " + mpi_error_string(rc));
}

// World ranks of the members of `group` (which must be a subgroup of MPI_COMM_WORLD's), ascending.
std::vector<int> world_ranks_of_group(MPI_Group group) {
  int size = 0;
  MPI_Group_size(group, &size);
  std::vector<int> ranks(static_cast<size_t>(size)), world(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) ranks[static_cast<size_t>(i)] = i;
  MPI_Group world_group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  if (size > 0) MPI_Group_translate_ranks(group, size, ranks.data(), world_group, world.data());
  MPI_Group_free(&world_group);
  std::sort(world.begin(), world.end());
  return world;
}

// Ranks in `other` of the members of `group` (a subgroup of it), ascending.
std::vector<int> ranks_of_group_in(MPI_Group group, MPI_Group other) {
  int size = 0;
  MPI_Group_size(group, &size);
  std::vector<int> ranks(static_cast<size_t>(size)), translated(static_cast<size_t>(size), MPI_UNDEFINED);
  for (int i = 0; i < size; ++i) ranks[static_cast<size_t>(i)] = i;
  if (size > 0) MPI_Group_translate_ranks(group, size, ranks.data(), other, translated.data());
  std::sort(translated.begin(), translated.end());
  return translated;
}
#endif

}  // namespace

bool ulfm_compiled() { return RELAX_HAVE_ULFM != 0; }

bool ulfm_enabled(std::string* why) {
  std::string reason;
  if (!ulfm_compiled()) {
    reason = "MPI lacks ULFM (relaxlib was built against an MPI without MPIX_Comm_revoke/shrink/agree; "
             "Open MPI 5 has them)";
  } else {
    const char* ft = std::getenv("OMPI_MCA_mpi_ft_enable");
    const std::string value = ft ? ft : "";
    if (value != "1" && value != "true" && value != "yes") {
      reason = "mpirun not started with --with-ft ulfm (OMPI_MCA_mpi_ft_enable is not set)";
    }
  }
  if (why) *why = reason;
  return reason.empty();
}

bool is_process_failure(int rc) {
#if RELAX_HAVE_ULFM
  if (rc == MPI_SUCCESS) return false;
  int error_class = rc;
  if (MPI_Error_class(rc, &error_class) != MPI_SUCCESS) error_class = rc;
  return error_class == MPIX_ERR_PROC_FAILED || error_class == MPIX_ERR_PROC_FAILED_PENDING ||
         error_class == MPIX_ERR_REVOKED;
#else
  (void)rc;
  return false;
#endif
}

Status revoke_comm(MPI_Comm comm) {
#if RELAX_HAVE_ULFM
  return mpi_result(MPIX_Comm_revoke(comm), "MPIX_Comm_revoke");
#else
  (void)comm;
  return unavailable("MPIX_Comm_revoke");
#endif
}

Status shrink_comm(MPI_Comm comm, MPI_Comm* survivors, std::vector<int>* lost_world_ranks,
                   std::vector<int>* lost_comm_ranks) {
#if RELAX_HAVE_ULFM
  *survivors = MPI_COMM_NULL;
  // Revoking twice is harmless; without it a rank that has not seen the failure yet could stay
  // blocked in an operation on `comm` and never reach the shrink.
  Status s = revoke_comm(comm);
  if (!s.is_ok()) return s;
  s = mpi_result(MPIX_Comm_shrink(comm, survivors), "MPIX_Comm_shrink");
  if (!s.is_ok()) return s;
  MPI_Comm_set_errhandler(*survivors, MPI_ERRORS_RETURN);
  if (lost_world_ranks || lost_comm_ranks) {
    MPI_Group before, after, lost;
    MPI_Comm_group(comm, &before);
    MPI_Comm_group(*survivors, &after);
    MPI_Group_difference(before, after, &lost);
    if (lost_world_ranks) *lost_world_ranks = world_ranks_of_group(lost);
    if (lost_comm_ranks) *lost_comm_ranks = ranks_of_group_in(lost, before);
    MPI_Group_free(&lost);
    MPI_Group_free(&after);
    MPI_Group_free(&before);
  }
  return Status::ok();
#else
  (void)comm;
  (void)lost_world_ranks;
  (void)lost_comm_ranks;
  *survivors = MPI_COMM_NULL;
  return unavailable("MPIX_Comm_shrink");
#endif
}

void drive_mpi_progress(MPI_Comm comm) {
  int arrived = 0;
  MPI_Iprobe(MPI_ANY_SOURCE, tags::kProgressProbe, comm, &arrived, MPI_STATUS_IGNORE);
}

Status failed_world_ranks(MPI_Comm comm, std::vector<int>* world_ranks, std::vector<int>* comm_ranks) {
  world_ranks->clear();
  if (comm_ranks) comm_ranks->clear();
#if RELAX_HAVE_ULFM
  // MPI's progress processes the runtime's failure notices (without it a thread that only asks
  // below never hears of a failure).
  drive_mpi_progress(comm);
  int revoked = 0;
  // A survivor that saw the failure revoked the communicator: the runtime's notice of the failure
  // itself may come later here, or (seen on Open MPI 5.0.11) not at all.
  if (MPIX_Comm_is_revoked(comm, &revoked) == MPI_SUCCESS && revoked) {
    return Status::error(RELAX_ERR_PROC_FAILED, "revoked by another rank after a failure");
  }
  MPI_Group failed = MPI_GROUP_NULL;
  Status s = mpi_result(MPIX_Comm_get_failed(comm, &failed), "MPIX_Comm_get_failed");
  if (!s.is_ok()) return s;
  *world_ranks = world_ranks_of_group(failed);
  if (comm_ranks) {
    MPI_Group members = MPI_GROUP_NULL;
    MPI_Comm_group(comm, &members);
    *comm_ranks = ranks_of_group_in(failed, members);
    MPI_Group_free(&members);
  }
  MPI_Group_free(&failed);
  return Status::ok();
#else
  (void)comm;
  (void)comm_ranks;
  return unavailable("MPIX_Comm_get_failed");
#endif
}

Status agree_comm(MPI_Comm comm, int* flag) {
#if RELAX_HAVE_ULFM
  return mpi_result(MPIX_Comm_agree(comm, flag), "MPIX_Comm_agree");
#else
  (void)comm;
  (void)flag;
  return unavailable("MPIX_Comm_agree");
#endif
}

std::string lost_ranks_text(const std::vector<int>& world_ranks) {
  if (world_ranks.empty()) return "a rank";
  if (world_ranks.size() == 1) return "rank " + std::to_string(world_ranks.front()) + " of the original world";
  return "ranks " + rank_list(world_ranks) + " of the original world";
}

}  // namespace relax
