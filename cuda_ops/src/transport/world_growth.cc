#include "transport/world_growth.h"

#include <mutex>
#include <string>

#include "transport/mpi_context.h"

namespace relax {
namespace {

std::mutex g_links_mutex;
std::vector<MPI_Comm> g_links;  // intercommunicators with spawned children or with the parents, oldest first

void keep_link(MPI_Comm link) {
  std::lock_guard<std::mutex> lock(g_links_mutex);
  g_links.push_back(link);
}

}  // namespace

void disconnect_spawn_links() {
  std::lock_guard<std::mutex> lock(g_links_mutex);
  // (Also a link to a lost process: left connected, its other ranks' finalize would wait forever;
  // after a survived loss they end without MPI_Finalize, through PMIx_Finalize: mpi_context.cc.)
  for (MPI_Comm& link : g_links) MPI_Comm_disconnect(&link);
  g_links.clear();
}

Status spawn_and_merge(MPI_Comm base, const SpawnRequest& request, MPI_Comm* merged) {
  *merged = MPI_COMM_NULL;
  if (request.count < 1 || request.command.empty()) {
    return Status::error(RELAX_ERR_INVALID_ARGUMENT, "growing the world needs a command and at least one new rank");
  }
  // MPI_Info_set refuses longer values, on MPI_COMM_WORLD's fatal handler in Open MPI 5: say so instead.
  for (const std::string* value : {&request.host, &request.environment}) {
    if (value->size() > static_cast<size_t>(MPI_MAX_INFO_VAL)) {
      return Status::error(RELAX_ERR_INVALID_ARGUMENT,
                           std::string(value == &request.host ? "host" : "environment") + " for the new ranks is " +
                               std::to_string(value->size()) + " characters, over MPI_MAX_INFO_VAL (" +
                               std::to_string(MPI_MAX_INFO_VAL) + "): pass settings on the command line instead");
    }
  }
  std::vector<char*> argv;
  for (const std::string& arg : request.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  MPI_Info info;
  MPI_Info_create(&info);
  if (!request.host.empty()) MPI_Info_set(info, "host", request.host.c_str());
  if (!request.environment.empty()) MPI_Info_set(info, "PMIX_ENVAR", request.environment.c_str());
  std::vector<int> errors(static_cast<size_t>(request.count), MPI_SUCCESS);
  MPI_Comm children = MPI_COMM_NULL;
  // A spawn that fails (no free slot) is reported on `base`: returned, not fatal (base may be
  // MPI_COMM_WORLD, whose own handler is the application's and is put back).
  MPI_Errhandler before;
  MPI_Comm_get_errhandler(base, &before);
  MPI_Comm_set_errhandler(base, MPI_ERRORS_RETURN);
  int rc = MPI_Comm_spawn(request.command.c_str(), argv.data(), request.count, info, 0, base, &children,
                          errors.data());
  MPI_Comm_set_errhandler(base, before);
  MPI_Errhandler_free(&before);
  MPI_Info_free(&info);
  if (rc != MPI_SUCCESS) return mpi_call_failed(rc, "MPI_Comm_spawn of " + request.command);
  for (size_t i = 0; i < errors.size(); ++i) {
    if (errors[i] != MPI_SUCCESS) {
      return Status::error(RELAX_ERR_MPI, "MPI_Comm_spawn: new rank " + std::to_string(i) + " of " +
                                              request.command + " did not start: " + mpi_error_string(errors[i]));
    }
  }
  MPI_Comm_set_errhandler(children, MPI_ERRORS_RETURN);
  keep_link(children);
  rc = MPI_Intercomm_merge(children, /*high=*/0, merged);  // the running ranks first
  if (rc != MPI_SUCCESS) return mpi_call_failed(rc, "MPI_Intercomm_merge with the new ranks");
  MPI_Comm_set_errhandler(*merged, MPI_ERRORS_RETURN);
  return Status::ok();
}

Status merge_with_parents(MPI_Comm* merged) {
  *merged = MPI_COMM_NULL;
  MPI_Comm parents = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parents);
  if (parents == MPI_COMM_NULL) return Status::ok();
  MPI_Comm_set_errhandler(parents, MPI_ERRORS_RETURN);
  keep_link(parents);
  const int rc = MPI_Intercomm_merge(parents, /*high=*/1, merged);  // after the running ranks
  if (rc != MPI_SUCCESS) return mpi_call_failed(rc, "MPI_Intercomm_merge with the running ranks");
  MPI_Comm_set_errhandler(*merged, MPI_ERRORS_RETURN);
  return Status::ok();
}

}  // namespace relax
