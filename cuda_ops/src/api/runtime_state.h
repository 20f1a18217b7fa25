// The process-wide state behind the C ABI (relax.h), shared by the files that implement it:
// runtime.cc (lifecycle, requests, waits) and runtime_services.cc (process sets, codecs, neighbour
// and group averages, timeline, settings, statistics).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "engine/engine.h"
#include "relaxed/direct_lane.h"
#include "relaxed/group_service.h"
#include "transport/failure_watch.h"
#include "transport/mpi_context.h"
#include "util/types.h"

namespace relax {

struct Runtime {
  std::mutex mutex;
  MpiContext mpi;
  HandleTable handles;
  std::shared_ptr<Engine> engine;  // shared: a driving caller keeps it alive through a shutdown
  std::unique_ptr<DirectLane> lane;  // null when MPI lacks MPI_THREAD_MULTIPLE
  GroupService groups;
  std::unique_ptr<FailureWatch> failure_watch;  // with fault tolerance on: turns a lost rank into errors
  double peer_timeout_s = 0;  // the engine's RELAX_OP_TIMEOUT / stall shutdown time (0: the default)
  MPI_Request rendezvous = MPI_REQUEST_NULL;  // relax_init_rendezvous's barrier, while pending
  bool initialized_once = false;
};

Runtime& runtime();

// The message and code relax_last_error() / relax_last_error_code() report on this thread.
extern thread_local std::string t_last_error;
extern thread_local int t_last_error_code;

// Records `s` as this thread's last error and returns its code.
int fail(const Status& s);
int not_initialized();
// The engine between init() and this rank's shutdown(). It may have stopped running because a
// peer shut down; rank and size stay available then, and submissions fail with the reason.
Engine* current_engine();
// The error of neighbour and group averages without MPI_THREAD_MULTIPLE.
Status no_lane();

}  // namespace relax
