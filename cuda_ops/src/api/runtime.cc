// The C ABI behind relax.h: initialization and shutdown, request submission (with local
// rejections announced to the other members), waits and handles. The rest: runtime_services.cc.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "api/buffer_rule.h"
#include "api/runtime_state.h"
#include "api/validate.h"
#include "relax/relax.h"
#include "transport/exit_agreement.h"
#include "transport/liveness.h"
#include "transport/lost_processes.h"
#include "transport/progress_pump.h"
#include "transport/shm_transport.h"
#include "transport/tcp_transport.h"
#include "transport/world_growth.h"
#include "transport/ulfm.h"
#include "util/heap.h"
#include "util/logging.h"
#include "util/types.h"

#ifndef RELAX_VERSION_STRING
#define RELAX_VERSION_STRING "0.1.0"
#endif

namespace relax {

Runtime& runtime() {
  static Runtime instance;
  return instance;
}

thread_local std::string t_last_error;
thread_local int t_last_error_code = RELAX_OK;

int fail(const Status& s) {
  t_last_error = s.message;
  t_last_error_code = s.code;
  return s.code;
}

int not_initialized() {
  return fail(Status::error(RELAX_ERR_NOT_INITIALIZED,
                            "relaxlib has not been initialized (or was shut down); call init() first."));
}

Engine* current_engine() { return runtime().engine.get(); }

Status no_lane() {
  return Status::error(RELAX_ERR_INVALID_ARGUMENT,
                       "neighbour and group averages need MPI_THREAD_MULTIPLE, which this MPI does not provide");
}

namespace {

// Stops the lanes and the engine (the caller holds rt.mutex); the communicators stay open.
void stop_lanes(Runtime& rt) {
  if (rt.lane) {
    if (rt.engine) rt.engine->set_stop_listener(nullptr);
    rt.lane->stop("relaxlib was shut down");
    rt.lane.reset();
  }
  rt.groups.stop();
  if (rt.engine) {
    rt.engine->stop();
    rt.engine.reset();
  }
  // Last: the engine's final round waits for every rank, and only the watch turns a rank that
  // froze meanwhile (declared failed by MPI's detector) into an error that ends that wait. Its
  // callback revokes the context's communicators, which stay open until the caller closes them.
  rt.failure_watch.reset();
}

void stop_engine() {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  stop_lanes(rt);
  rt.mpi.close();
}

// MPI calls the delete callback of an attribute on MPI_COMM_SELF at the start of MPI_Finalize,
// whoever finalizes (us, mpi4py, the application): the engine stops before MPI goes away.
int on_mpi_finalize(MPI_Comm, int, void*, void*) {
  stop_engine();
  stop_progress_pump();  // (where another library finalizes MPI: its probes must end first)
  // Where another library finalizes MPI, the ranks that exit through relaxlib's own exit hook
  // (mpi_context.cc) still meet here; a rank lost meanwhile is ended if it is on this host (this
  // MPI_Finalize, not ours to skip, may still wait for it: open-mpi/ompi#11404).
  agree_on_exit();
  return MPI_SUCCESS;
}

// The `index`-th of `pids`, or -1 past the last (the C ABI's way of handing out a list).
int64_t pid_at(const std::vector<int64_t>& pids, int32_t index) {
  return index >= 0 && static_cast<size_t>(index) < pids.size() ? pids[static_cast<size_t>(index)] : -1;
}

void register_finalize_hook() {
  static std::once_flag once;
  std::call_once(once, [] {
    int keyval = MPI_KEYVAL_INVALID;
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, on_mpi_finalize, &keyval, nullptr);
    MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr);
  });
}

int initialize() {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  // Also when a peer's shutdown stopped the engine, as in Horovod: collectives keep failing
  // with that reason until this rank calls shutdown() and init() again, like every other rank.
  if (rt.engine) return RELAX_OK;
  std::string config_error;
  EngineConfig config = EngineConfig::from_environment(config_error);
  if (!config_error.empty()) return fail(Status::error(RELAX_ERR_INVALID_ARGUMENT, config_error));
  // Training steps free and reallocate tensors of a few MiB (flattened buckets, codec inputs,
  // averaged updates) every step; the setting holds for every later allocation of the process.
  if (config.heap_keep_mb > 0 && !keep_freed_memory(static_cast<int64_t>(config.heap_keep_mb * (1 << 20)))) {
    RELAX_LOG(Debug, "RELAX_HEAP_KEEP_MB: this C library's allocator was left as it is");
  }
  const std::string transport = prepare_shm_transport(config.shm_single_copy);
  const std::string tcp = prepare_tcp_transport(config.tcp_eager_limit, config.ring_segment_bytes);
  Status s = rt.mpi.open(config.stall_shutdown_seconds);  // bounded by the peer timeout
  if (!s.is_ok()) return fail(s);
  RELAX_LOG(Debug, transport);
  RELAX_LOG(Debug, tcp);
  const Topology& topology = rt.mpi.topology();
  config.apply_topology_defaults(topology.local_size == topology.size, topology.host_size,
                                 static_cast<int>(std::thread::hardware_concurrency()),
                                 topology.cores_shared_somewhere);
  RELAX_LOG(Debug, "ring segment " << config.ring_segment_bytes << " B, MPI allreduce up to "
                                   << config.mpi_allreduce_max_bytes << " B, MPI allgather up to "
                                   << config.mpi_allgather_max_bytes << " B, idle spin " << config.idle_spin_us << " us"
                                   << (config.yield_while_waiting ? ", waits yield the core" : ""));
  register_finalize_hook();
  rt.engine = std::make_shared<Engine>(rt.mpi, rt.handles, config);
  rt.peer_timeout_s = config.stall_shutdown_seconds;
  rt.lane.reset();
  if (rt.mpi.thread_level() >= MPI_THREAD_MULTIPLE) {
    rt.lane = std::make_unique<DirectLane>(rt.mpi.data(), rt.handles, config,
                                            collective_config(config, &rt.handles.waiting_callers()));
    DirectLane* lane = rt.lane.get();  // cleared from the engine before the lane is destroyed
    rt.engine->set_stop_listener([lane](const std::string& reason) { lane->abort(reason); });
  }
  const char* timeline = std::getenv("RELAX_TIMELINE");
  if (!timeline || !*timeline) timeline = std::getenv("HOROVOD_TIMELINE");
  if (timeline && *timeline) {
    const char* marks = std::getenv("RELAX_TIMELINE_MARK_CYCLES");
    if (!marks) marks = std::getenv("HOROVOD_TIMELINE_MARK_CYCLES");
    Status t = rt.engine->timeline().start(timeline, marks && std::string(marks) == "1", rt.mpi.topology().rank);
    if (!t.is_ok()) RELAX_LOG(Warning, t.message);
  }
  rt.engine->start();
  std::string no_fault_tolerance;
  if (ulfm_enabled(&no_fault_tolerance)) {
    MpiContext* mpi = &rt.mpi;  // the watch is destroyed before the context closes (stop_lanes)
    rt.failure_watch = std::make_unique<FailureWatch>(rt.mpi.control(), [mpi] { mpi->revoke_all(); });
  }
  rt.initialized_once = true;
  RELAX_LOG(Debug, "initialized: rank " << rt.mpi.topology().rank << " of " << rt.mpi.topology().size);
  return RELAX_OK;
}

Status waiting_in_callback() {
  return Status::error(RELAX_ERR_INVALID_ARGUMENT,
                       "a completion callback cannot wait for a collective: it runs on the thread that "
                       "negotiates and executes them");
}

bool is_direct(int32_t type) {
  const RequestKind* kind = request_kind(type);
  return kind && kind->lane == Lane::kDirect;
}

// Validates and submits one direct (not negotiated) request; writes its handle.
int enqueue_direct(Runtime& rt, const relax_request_t& r, relax_done_fn done, void* user, relax_handle_t* out) {
  if (!rt.lane) return fail(no_lane());
  if (r.process_set != 0) {
    return fail(Status::error(RELAX_ERR_INVALID_ARGUMENT, request_type_name(r.type) +
                                                              ": peers are world ranks; process sets do not apply"));
  }
  std::vector<int> world(static_cast<size_t>(rt.mpi.topology().size));
  for (size_t i = 0; i < world.size(); ++i) world[i] = static_cast<int>(i);
  const int me = rt.mpi.topology().rank;
  const SubmitContext ctx{0, world, me, me, static_cast<int>(world.size()), false};
  LocalRequest local;
  Status s = make_request(r, ctx, local);
  if (s.is_ok()) s = check_buffers(r, local);
  if (!s.is_ok()) return fail(s);
  local.done = done;
  local.user = user;
  local.handle = rt.handles.create();
  const relax_handle_t handle = local.handle;
  s = rt.lane->submit(std::move(local));
  if (!s.is_ok()) {
    rt.handles.release(handle);
    return fail(s);
  }
  *out = handle;
  return RELAX_OK;
}

// The atomic-group key of `count` requests submitted together ("" for one request).
std::string group_key(const relax_request_t* requests, int32_t count) {
  return count > 1 ? "group:" + std::string(requests[0].name ? requests[0].name : "") + ":" + std::to_string(count)
                   : "";
}

// Submits a placeholder for each of `requests`, which this rank rejected locally with `status`, so
// that the members that did submit them fail in the round they complete instead of waiting for
// this rank. A rank cannot announce what the others could not match: requests without a name,
// point-to-point averages (not negotiated), a join, or a name this rank already has pending.
Status announce_rejection(Engine& engine, const relax_request_t* requests, int32_t count, const Status& status) {
  if (count <= 0 || !requests) return Status::error(RELAX_ERR_INVALID_ARGUMENT, "no requests to reject");
  std::vector<LocalRequest> placeholders(static_cast<size_t>(count));
  const std::string group = group_key(requests, count);
  for (int32_t i = 0; i < count; ++i) {
    const relax_request_t& r = requests[i];
    const RequestKind* kind = request_kind(r.type);
    const bool negotiated = kind && kind->lane != Lane::kDirect && kind->lane != Lane::kJoin;
    if (!negotiated || !r.name || !*r.name || r.process_set != requests[0].process_set) {
      return Status::error(RELAX_ERR_INVALID_ARGUMENT, "only named, negotiated requests of one process set can be "
                                                       "announced as rejected");
    }
    Descriptor& d = placeholders[static_cast<size_t>(i)].desc;
    d.name = r.name;
    d.type = r.type;
    d.group = group;
    d.group_size = count > 1 ? count : 0;
    d.rejection = status.message.empty() ? std::string("rejected locally") : status.message;
    d.rejection_code = status.is_ok() ? RELAX_ERR_INVALID_ARGUMENT : status.code;
  }
  return engine.submit(requests[0].process_set, std::move(placeholders), true);
}

// Whether a local failure with this code is one the other members can be told about (not a
// shutdown, a missing process set or a name this rank already has pending).
bool announceable(int32_t code) {
  return code != RELAX_ERR_SHUTDOWN && code != RELAX_ERR_NOT_INITIALIZED && code != RELAX_ERR_PROCESS_SET &&
         code != RELAX_ERR_DUPLICATE_NAME;
}

int enqueue_locked(Engine* engine, const relax_request_t* requests, int32_t count, relax_alloc_fn alloc,
                   relax_done_fn done, void* const* users, relax_handle_t* handles_out,
                   std::shared_ptr<Engine>* driver);

// Validates and submits `count` requests as one unit; writes their handles. Returns a status.
// With `driver`, the engine thread is not woken and *driver receives the engine, which the caller
// drives through the request's rounds itself. A request rejected here is announced to the other
// members (announce_rejection), so a rank-dependent mistake fails every rank instead of hanging.
int enqueue(const relax_request_t* requests, int32_t count, relax_alloc_fn alloc, relax_done_fn done,
            void* const* users, relax_handle_t* handles_out, std::shared_ptr<Engine>* driver = nullptr) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);  // shutdown() cannot free the engine under us
  Engine* engine = current_engine();
  if (!engine) return not_initialized();
  const int rc = enqueue_locked(engine, requests, count, alloc, done, users, handles_out, driver);
  if (rc != RELAX_OK && announceable(rc) && count > 0 && requests) {
    const Status rejected = Status::error(rc, t_last_error);
    (void)announce_rejection(*engine, requests, count, rejected);  // best effort: the caller sees `rejected`
    t_last_error = rejected.message;
    t_last_error_code = rejected.code;
  }
  return rc;
}

int enqueue_locked(Engine* engine, const relax_request_t* requests, int32_t count, relax_alloc_fn alloc,
                   relax_done_fn done, void* const* users, relax_handle_t* handles_out,
                   std::shared_ptr<Engine>* driver) {
  Runtime& rt = runtime();
  if (count <= 0 || !requests) return fail(Status::error(RELAX_ERR_INVALID_ARGUMENT, "empty request group"));
  for (int32_t i = 0; i < count; ++i) {
    if (is_direct(requests[i].type) && count > 1) {
      return fail(Status::error(RELAX_ERR_INVALID_ARGUMENT, "neighbour and group averages cannot be grouped"));
    }
  }
  if (is_direct(requests[0].type)) return enqueue_direct(rt, requests[0], done, users ? users[0] : nullptr, handles_out);
  const int32_t process_set = requests[0].process_set;
  ProcessSetInfo info;
  if (!engine->process_set_info(process_set, info)) {
    return fail(Status::error(RELAX_ERR_PROCESS_SET, "process set " + std::to_string(process_set) +
                                                         " does not exist (never added, or removed)"));
  }
  std::vector<LocalRequest> locals(static_cast<size_t>(count));
  const std::string group = group_key(requests, count);
  const SubmitContext ctx{process_set, info.world_ranks, info.rank, rt.mpi.topology().rank, rt.mpi.topology().size,
                          alloc != nullptr};
  for (int32_t i = 0; i < count; ++i) {
    const relax_request_t& r = requests[i];
    LocalRequest& local = locals[static_cast<size_t>(i)];
    if (r.process_set != process_set) {
      return fail(Status::error(RELAX_ERR_INVALID_ARGUMENT, "all requests of a group must use one process set"));
    }
    Status s = make_request(r, ctx, local);
    if (s.is_ok()) s = check_buffers(r, local);
    if (!s.is_ok()) return fail(s);
    local.desc.group = group;
    local.desc.group_size = count > 1 ? count : 0;
    local.alloc = alloc;
    local.done = done;
    local.user = users ? users[i] : nullptr;
  }
  for (int32_t i = 0; i < count; ++i) {
    handles_out[i] = locals[static_cast<size_t>(i)].handle = rt.handles.create(true);
  }
  Status s = engine->submit(process_set, std::move(locals), driver == nullptr);
  if (!s.is_ok()) {
    for (int32_t i = 0; i < count; ++i) {
      rt.handles.release(handles_out[i]);
      handles_out[i] = 0;
    }
    return fail(s);
  }
  if (driver) *driver = rt.engine;
  return RELAX_OK;
}

}  // namespace
}  // namespace relax

using relax::runtime;

extern "C" {

int relax_init_rendezvous(int32_t timeout_ms) {
  relax::Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (rt.engine) return RELAX_OK;  // relax_init has nothing to do
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return RELAX_OK;  // MPI_Init comes first / relax_init reports it
  if (rt.rendezvous == MPI_REQUEST_NULL) MPI_Ibarrier(rt.mpi.base(), &rt.rendezvous);
  const double until = relax::steady_seconds() + std::max(timeout_ms, 0) * 1e-3;
  for (;;) {
    int done = 0;
    MPI_Test(&rt.rendezvous, &done, MPI_STATUS_IGNORE);  // sets the request to MPI_REQUEST_NULL when done
    if (done) return RELAX_OK;
    if (relax::steady_seconds() >= until) return RELAX_PENDING;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

int relax_was_initialized(void) {
  std::lock_guard<std::mutex> lock(runtime().mutex);
  return runtime().initialized_once ? 1 : 0;
}

int relax_init(void) { return relax::initialize(); }

int relax_fault_tolerance(void) {
  std::string why;
  if (relax::ulfm_enabled(&why)) return 1;
  relax::fail(relax::Status::error(RELAX_ERR_MPI, "fault tolerance unavailable: " + why));
  return 0;
}

int relax_process_failure_noted(void) { return relax::peer_failure_noted() ? 1 : 0; }

int64_t relax_silent_peer_pid(int32_t index) { return relax::pid_at(relax::silent_peer_pids(), index); }

int64_t relax_lost_peer_pid(int32_t index) { return relax::pid_at(relax::lost_peer_pids(), index); }

int relax_end_lost_processes(void) { return relax::end_lost_processes(); }

int relax_end_silent_processes(void) { return relax::end_silent_processes(); }

int relax_reset(void) {
  relax::Runtime& rt = runtime();
  std::string why;
  if (!relax::ulfm_enabled(&why)) {
    return relax::fail(relax::Status::error(RELAX_ERR_MPI, "relaxlib cannot re-form the world: " + why));
  }
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    if (!rt.mpi.is_open()) return relax::not_initialized();
    relax::stop_lanes(rt);
    std::vector<int> lost;
    relax::Status s = rt.mpi.shrink_world(&lost);
    if (!s.is_ok()) return relax::fail(s);
    // The lost ranks are out of the new world: its waits must not fail for them.
    relax::forget_peer_failure_after_reset();
    RELAX_LOG(Info, "reset: world re-formed without " << lost.size() << " lost rank(s)");
  }
  return relax::initialize();
}

int relax_grow(const char* command, const char* const* argv, int32_t argc, int32_t count, const char* host,
               const char* environment) {
  relax::Runtime& rt = runtime();
  if (!command || !*command || argc < 0 || (argc > 0 && !argv) || count < 1) {
    return relax::fail(relax::Status::error(RELAX_ERR_INVALID_ARGUMENT,
                                            "relax_grow needs a command, argc >= 0 arguments and count >= 1"));
  }
  relax::SpawnRequest request;
  request.command = command;
  for (int32_t i = 0; i < argc; ++i) {
    if (!argv[i]) return relax::fail(relax::Status::error(RELAX_ERR_INVALID_ARGUMENT, "relax_grow: argument is NULL"));
    request.argv.emplace_back(argv[i]);
  }
  request.count = count;
  request.host = host ? host : "";
  request.environment = environment ? environment : "";
  relax::Status grown;
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    if (!rt.mpi.is_open()) return relax::not_initialized();
    relax::stop_lanes(rt);
    grown = rt.mpi.grow_world(request);
    if (grown.is_ok()) RELAX_LOG(Info, "grow: " << count << " new rank(s) joined the world");
  }
  const int started = relax::initialize();  // on the grown world, or again on the unchanged one
  if (!grown.is_ok()) return relax::fail(grown);
  return started;
}

int relax_shutdown(void) {
  relax::stop_engine();
  return RELAX_OK;
}

int relax_is_initialized(void) {
  std::lock_guard<std::mutex> lock(runtime().mutex);
  return relax::current_engine() != nullptr;
}

#define RELAX_TOPOLOGY_GETTER(fn, field)                                   \
  int fn(void) {                                                           \
    if (!relax_is_initialized()) return -relax::not_initialized();         \
    return runtime().mpi.topology().field;                                 \
  }
RELAX_TOPOLOGY_GETTER(relax_rank, rank)
RELAX_TOPOLOGY_GETTER(relax_size, size)
RELAX_TOPOLOGY_GETTER(relax_local_rank, local_rank)
RELAX_TOPOLOGY_GETTER(relax_local_size, local_size)
RELAX_TOPOLOGY_GETTER(relax_cross_rank, cross_rank)
RELAX_TOPOLOGY_GETTER(relax_cross_size, cross_size)
#undef RELAX_TOPOLOGY_GETTER

int relax_mpi_threads_supported(void) {
  if (!relax_is_initialized()) return -relax::not_initialized();
  return runtime().mpi.thread_level() >= MPI_THREAD_MULTIPLE;
}

int relax_local_ranks(int32_t* out, int32_t capacity) {
  if (!relax_is_initialized()) return -relax::not_initialized();
  const std::vector<int>& ranks = runtime().mpi.local_world_ranks();
  for (size_t i = 0; i < ranks.size() && static_cast<int32_t>(i) < capacity; ++i) out[i] = ranks[i];
  return static_cast<int>(ranks.size());
}

const char* relax_last_error(void) { return relax::t_last_error.c_str(); }
int relax_last_error_code(void) { return relax::t_last_error_code; }
const char* relax_version(void) { return RELAX_VERSION_STRING; }
int relax_abi_version(void) { return RELAX_ABI_VERSION; }

relax_handle_t relax_enqueue(const relax_request_t* request, relax_alloc_fn alloc, relax_done_fn done, void* user) {
  relax_handle_t handle = 0;
  void* users[1] = {user};
  return relax::enqueue(request, 1, alloc, done, users, &handle) == RELAX_OK ? handle : 0;
}

int relax_reject(const relax_request_t* requests, int32_t count, int32_t code, const char* message) {
  std::lock_guard<std::mutex> lock(runtime().mutex);
  relax::Engine* engine = relax::current_engine();
  if (!engine) return relax::not_initialized();
  const relax::Status s = relax::announce_rejection(*engine, requests, count,
                                                   relax::Status::error(code, message ? message : ""));
  return s.is_ok() ? RELAX_OK : relax::fail(s);
}

int relax_enqueue_group(const relax_request_t* requests, int32_t count, relax_alloc_fn alloc, relax_done_fn done,
                        void* const* users, relax_handle_t* handles_out) {
  return relax::enqueue(requests, count, alloc, done, users, handles_out);
}

namespace {

// relax_run's submission and driving; a timeout < 0 waits until complete.
int run_request(const relax_request_t* request, relax_alloc_fn alloc, void* user, relax_handle_t* handle_out,
                int32_t timeout_ms) {
  *handle_out = 0;
  if (relax::Engine::in_round_on_this_thread()) return relax::fail(relax::waiting_in_callback());
  void* users[1] = {user};
  std::shared_ptr<relax::Engine> engine;
  const int rc = relax::enqueue(request, 1, alloc, nullptr, users, handle_out, &engine);
  if (rc != RELAX_OK) return rc;
  if (engine) engine->drive(*handle_out);  // null for direct requests, which have their own thread
  return timeout_ms < 0 ? runtime().handles.wait(*handle_out) : runtime().handles.wait_for(*handle_out, timeout_ms);
}

}  // namespace

int relax_run(const relax_request_t* request, relax_alloc_fn alloc, void* user, relax_handle_t* handle_out) {
  return run_request(request, alloc, user, handle_out, -1);
}

int relax_run_for(const relax_request_t* request, relax_alloc_fn alloc, void* user, relax_handle_t* handle_out,
                  int32_t timeout_ms) {
  return run_request(request, alloc, user, handle_out, std::max(timeout_ms, 0));
}

int relax_drive(relax_handle_t handle) {
  if (relax::Engine::in_round_on_this_thread()) return RELAX_OK;  // a callback: the rounds run already
  std::shared_ptr<relax::Engine> engine;
  {
    relax::Runtime& rt = runtime();
    std::lock_guard<std::mutex> lock(rt.mutex);  // shutdown() cannot free the engine under us
    engine = rt.engine;
  }
  if (engine && runtime().handles.poll(handle) == 0) engine->drive(handle);
  return RELAX_OK;
}

int relax_poll(relax_handle_t handle) { return runtime().handles.poll(handle); }
int relax_wait(relax_handle_t handle) {
  if (relax::Engine::in_round_on_this_thread()) return relax::fail(relax::waiting_in_callback());
  return runtime().handles.wait(handle);
}

int relax_wait_for(relax_handle_t handle, int32_t timeout_ms) {
  if (relax::Engine::in_round_on_this_thread()) return relax::fail(relax::waiting_in_callback());
  return runtime().handles.wait_for(handle, timeout_ms);
}

int relax_note_wait(int32_t begin) {
  runtime().handles.note_external_wait(begin != 0);
  return RELAX_OK;
}

int relax_handle_status(relax_handle_t handle) {
  relax::HandleState state;
  if (!runtime().handles.get(handle, state)) return RELAX_ERR_UNKNOWN_HANDLE;
  return state.done ? state.status : RELAX_OK;
}

const char* relax_handle_message(relax_handle_t handle) { return runtime().handles.message(handle); }

int64_t relax_handle_result(relax_handle_t handle) {
  relax::HandleState state;
  return runtime().handles.get(handle, state) ? state.result : -1;
}

int relax_handle_received_splits(relax_handle_t handle, int64_t* out, int32_t capacity) {
  relax::HandleState state;
  if (!runtime().handles.get(handle, state)) return -1;
  const int32_t n = static_cast<int32_t>(state.received_splits.size());
  for (int32_t i = 0; i < n && i < capacity; ++i) out[i] = state.received_splits[static_cast<size_t>(i)];
  return n;
}

void relax_release(relax_handle_t handle) { runtime().handles.release(handle); }

}  // extern "C"
