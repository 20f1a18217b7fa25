#include "transport/mpi_context.h"

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <unistd.h>

#include "transport/exit_agreement.h"
#include "transport/liveness.h"
#include "transport/progress_pump.h"
#include "transport/setup_wait.h"
#include "transport/ulfm.h"
#include "util/logging.h"

namespace relax {
namespace {

std::once_flag g_finalize_registered;

// Tells the launcher this process ends cleanly without MPI_Finalize, where MPI runs on PMIx (Open
// MPI 5): a worker added to the job (MPI_Comm_spawn: a job of its own) that ends without finalizing
// is otherwise reported as an improper exit, and mpirun exits 1 although every rank finished.
// PMIx_Finalize only tells this host's daemon (no fence with the lost rank, unlike MPI_Finalize).
// Looked up at run time: other MPIs have no PMIx, and its header is not installed with Open MPI.
void finalize_pmix_client() {
  using Finalize = int (*)(const void* info, size_t ninfo);
  if (auto finalize = reinterpret_cast<Finalize>(dlsym(RTLD_DEFAULT, "PMIx_Finalize"))) finalize(nullptr, 0);
}

void finalize_at_exit() {
  // A peer that stopped answering would never reach MPI_Finalize's fence: leave without it (mpirun
  // then reports this rank as failed and ends the job, the silent rank with it).
  // After a lost rank (survived or not) MPI_Finalize waits for it forever (open-mpi/ompi#11404);
  // one lost after the last collective is found by the exit agreement (exit_agreement.h).
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  stop_progress_pump();  // (its probes must end before MPI does)
  // A peer that stopped answering and that MPI has not reported lost would hold any meeting too.
  if (peer_silence_noted() && !peer_failure_noted()) return;
  const bool all_arrived = agree_on_exit();  // (with fault tolerance on: a rank lost meanwhile is noted)
  disconnect_spawn_links();  // (workers added to the world: Open MPI 5 needs this first)
  if (all_arrived && !peer_failure_noted() && !peer_failure_survived()) {
    MPI_Finalize();
  } else {
    finalize_pmix_client();
  }
}

void free_comm(MPI_Comm& comm) {
  if (comm != MPI_COMM_NULL) {
    MPI_Comm_free(&comm);
    comm = MPI_COMM_NULL;
  }
}

}  // namespace

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

Status mpi_call_failed(int rc, const std::string& what) {
  const std::string message = what + " failed: " + mpi_error_string(rc);
  if (!is_process_failure(rc)) return Status::error(RELAX_ERR_MPI, message);
  note_peer_failure(message + " (a rank's process was lost; the survivors can re-form the world with a reset)");
  return peer_silence_status();
}

bool every_rank_succeeded(MPI_Comm comm, const std::string& local_why, std::string& why, double timeout_s,
                          const std::string& during) {
  constexpr int kWhyBytes = 256;
  constexpr int kNoFailure = std::numeric_limits<int>::max();
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const int failed_mine = local_why.empty() ? kNoFailure : rank;
  int failed = kNoFailure;
  Status s = bounded_allreduce_int(comm, failed_mine, MPI_MIN, failed, timeout_s, during);
  if (!s.is_ok()) {
    why = s.message;
    return false;
  }
  if (failed == kNoFailure) return true;
  char message[kWhyBytes] = {};
  if (rank == failed) std::strncpy(message, local_why.c_str(), kWhyBytes - 1);
  s = bounded_bcast(comm, message, kWhyBytes, failed, timeout_s, during);
  message[kWhyBytes - 1] = '\0';
  why = s.is_ok() ? "rank " + std::to_string(failed) + ": " + message : s.message;
  return false;
}

MpiContext::~MpiContext() { close(); }

Status MpiContext::open(double timeout_s) {
  if (open_) return Status::ok();
  timeout_s_ = timeout_s;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    return Status::error(RELAX_ERR_MPI, "MPI has already been finalized in this process; relaxlib cannot start.");
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &thread_level_);
    if (rc != MPI_SUCCESS) return Status::error(RELAX_ERR_MPI, "MPI_Init_thread failed: " + mpi_error_string(rc));
    // Finalize when the process exits, or mpirun reports a failed job.
    std::call_once(g_finalize_registered, [] { std::atexit(finalize_at_exit); });
    start_progress_pump();
  } else {
    MPI_Query_thread(&thread_level_);
  }
  // The engine thread calls MPI while application threads may call MPI too (mpi4py).
  if (thread_level_ < MPI_THREAD_SERIALIZED) {
    return Status::error(RELAX_ERR_MPI,
                         "MPI was initialized with thread level " + std::to_string(thread_level_) +
                             "; relaxlib's background thread needs MPI_THREAD_MULTIPLE (or at least "
                             "MPI_THREAD_SERIALIZED). Initialize MPI with MPI_Init_thread(MPI_THREAD_MULTIPLE) "
                             "or let relaxlib initialize it.");
  }
  if (thread_level_ < MPI_THREAD_MULTIPLE) {
    RELAX_LOG(Warning, "MPI provides MPI_THREAD_SERIALIZED only; do not call MPI from other threads while "
                       "relaxlib is running.");
  }
  if (base_ == MPI_COMM_WORLD) {  // a rank spawned to grow a running job joins its world
    MPI_Comm joined = MPI_COMM_NULL;
    Status s = merge_with_parents(&joined);
    if (!s.is_ok()) return s;
    if (joined != MPI_COMM_NULL) base_ = joined;
  }
  set_exit_world(base_);
  // Nonblocking and bounded (setup_wait.h), as is every exchange below: a rank that never
  // answers fails open() on every other rank, naming it, instead of holding them here.
  Status s = bounded_comm_dup(base_, control_, timeout_s_, "relaxlib's start (communicator set-up)");
  if (s.is_ok()) s = bounded_comm_dup(base_, data_, timeout_s_, "relaxlib's start (communicator set-up)");
  if (s.is_ok()) {
    MPI_Comm_set_errhandler(data_, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN);
    s = derive_topology();
  }
  if (!s.is_ok()) {
    close();
    return s;
  }
  open_ = true;
  set_log_rank(topology_.rank);
  return Status::ok();
}

Status MpiContext::derive_topology() {
  MPI_Comm_rank(control_, &topology_.rank);
  MPI_Comm_size(control_, &topology_.size);
  // Host names first: a bounded exchange with every rank before the splits, which have no
  // nonblocking form.
  Status s = count_host_ranks();
  if (s.is_ok()) s = split_by_node();
  return s.is_ok() ? agree_core_sharing() : s;
}

// The node (local_) and cross-node (cross_) communicators. MPI_Comm_split(_type) cannot be
// bounded: a bounded barrier first names a rank frozen or absent before them.
Status MpiContext::split_by_node() {
  Status s = bounded_barrier(control_, timeout_s_, "relaxlib's start (before the node communicators' creation)");
  if (!s.is_ok()) return s;
  // RELAX_LOCAL_SIZE=k pretends nodes hold k consecutive ranks each (to test hierarchical
  // algorithms on one machine); otherwise nodes are the shared-memory domains MPI reports.
  int node_key = 0;
  if (const char* env = std::getenv("RELAX_LOCAL_SIZE")) {
    const int k = std::atoi(env);
    if (k <= 0 || topology_.size % k != 0) {
      return Status::error(RELAX_ERR_INVALID_ARGUMENT,
                           "RELAX_LOCAL_SIZE=" + std::string(env) + " must be a positive divisor of the world size " +
                               std::to_string(topology_.size));
    }
    node_key = topology_.rank / k;
    MPI_Comm_split(control_, node_key, topology_.rank, &local_);
  } else {
    MPI_Comm_split_type(control_, MPI_COMM_TYPE_SHARED, topology_.rank, MPI_INFO_NULL, &local_);
  }
  MPI_Comm_rank(local_, &topology_.local_rank);
  MPI_Comm_size(local_, &topology_.local_size);
  MPI_Group local_group, world_group;
  MPI_Comm_group(local_, &local_group);
  MPI_Comm_group(control_, &world_group);
  std::vector<int> local_ranks(static_cast<size_t>(topology_.local_size));
  for (int i = 0; i < topology_.local_size; ++i) local_ranks[static_cast<size_t>(i)] = i;
  local_world_ranks_.assign(local_ranks.size(), 0);
  MPI_Group_translate_ranks(local_group, topology_.local_size, local_ranks.data(), world_group,
                            local_world_ranks_.data());
  MPI_Group_free(&local_group);
  MPI_Group_free(&world_group);
  std::sort(local_world_ranks_.begin(), local_world_ranks_.end());
  MPI_Comm_split(control_, topology_.local_rank, topology_.rank, &cross_);
  MPI_Comm_rank(cross_, &topology_.cross_rank);
  MPI_Comm_size(cross_, &topology_.cross_size);
  return Status::ok();
}

// Ranks running on this one's kernel (same boot id; the host name where /proc has none): the
// processes that share this machine's cores, even when MPI treats them as separate nodes (network
// namespaces, which may also have host names of their own; -H with several addresses). Each rank
// sends its process id with its host: the ids of the ranks on this host are registered with
// liveness.h, so an elastic job can evict a rank that stops answering (relax_silent_peer_pid).
Status MpiContext::count_host_ranks() {
  constexpr int kNameBytes = 256;
  constexpr int kRecordBytes = kNameBytes + static_cast<int>(sizeof(int64_t));  // host, then pid
  std::vector<char> records(static_cast<size_t>(kRecordBytes) * static_cast<size_t>(topology_.size), '\0');
  char mine[kRecordBytes] = {};
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  if (std::getline(boot, boot_id) && !boot_id.empty()) {
    std::snprintf(mine, kNameBytes, "boot:%s", boot_id.c_str());
  } else {
    gethostname(mine, kNameBytes - 1);
  }
  const int64_t my_pid = static_cast<int64_t>(getpid());
  std::memcpy(mine + kNameBytes, &my_pid, sizeof my_pid);
  Status s = bounded_allgather(control_, mine, kRecordBytes, records.data(), timeout_s_,
                               "relaxlib's start (the exchange of host names)");
  if (!s.is_ok()) return s;
  topology_.host_size = 0;
  std::vector<int64_t> pids_on_this_host(static_cast<size_t>(topology_.size), 0);
  for (int r = 0; r < topology_.size; ++r) {
    const char* record = records.data() + static_cast<size_t>(r) * kRecordBytes;
    if (std::strncmp(mine, record, kNameBytes) != 0) continue;
    ++topology_.host_size;
    std::memcpy(&pids_on_this_host[static_cast<size_t>(r)], record + kNameBytes, sizeof(int64_t));
  }
  register_host_pids(control_, pids_on_this_host);
  return Status::ok();
}

// Whether the ranks outnumber the cores of some host, agreed by every rank (after count_host_ranks).
Status MpiContext::agree_core_sharing() {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());  // 0: unknown
  const int shared_here = cores > 0 && topology_.host_size > cores ? 1 : 0;
  int shared_somewhere = 0;
  Status s = bounded_allreduce_int(control_, shared_here, MPI_MAX, shared_somewhere, timeout_s_,
                                   "relaxlib's start (the agreement on core sharing)");
  if (!s.is_ok()) return s;
  topology_.cores_shared_somewhere = shared_somewhere != 0;
  return Status::ok();
}

void MpiContext::revoke_all() {
  if (!ulfm_compiled()) return;
  for (MPI_Comm comm : {control_, data_, local_, cross_}) {
    if (comm != MPI_COMM_NULL) revoke_comm(comm);
  }
}

Status MpiContext::shrink_world(std::vector<int>* lost_world_ranks) {
  if (!ulfm_compiled()) return revoke_comm(MPI_COMM_NULL);  // the "unavailable" status
  revoke_all();
  // Revoked communicators can be freed (their pending operations completed in error on revocation).
  for (MPI_Comm* comm : {&cross_, &local_, &data_, &control_}) free_comm(*comm);
  open_ = false;
  MPI_Comm survivors = MPI_COMM_NULL;
  std::vector<int> lost_ranks;
  Status s = shrink_comm(base_, &survivors, lost_world_ranks, &lost_ranks);
  if (!s.is_ok()) return s;
  // Looked up in the old world's table, before the new world registers its own.
  note_lost_pids(host_pids_of(base_, lost_ranks));
  if (base_ != MPI_COMM_WORLD) MPI_Comm_free(&base_);
  base_ = survivors;
  set_exit_world(base_);
  return Status::ok();
}

Status MpiContext::grow_world(const SpawnRequest& request) {
  for (MPI_Comm* comm : {&cross_, &local_, &data_, &control_}) free_comm(*comm);
  open_ = false;
  MPI_Comm grown = MPI_COMM_NULL;
  Status s = spawn_and_merge(base_, request, &grown);
  if (!s.is_ok()) return s;
  if (base_ != MPI_COMM_WORLD) MPI_Comm_free(&base_);
  base_ = grown;
  set_exit_world(base_);
  return Status::ok();
}

void MpiContext::close() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // After a peer went silent, exchanges may still be posted on these communicators: leave them.
  if (!finalized && !peer_silence_noted()) {
    free_comm(cross_);
    free_comm(local_);
    free_comm(data_);
    free_comm(control_);
  }
  open_ = false;
}

}  // namespace relax
