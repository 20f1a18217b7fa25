/*
 * relax.h — the C ABI of the relaxlib core.
 *
 * This header is the only interface framework glue (PyTorch, TensorFlow, ctypes) may use.
 * Everything behind it (MPI, the background engine, collectives, codecs) is private to the core.
 *
 * Conventions
 *  - Functions returning int return RELAX_OK (0) on success or a relax_status_t error code;
 *    relax_last_error() then holds a human-readable message for the calling thread.
 *  - Collectives are asynchronous: relax_enqueue() returns a handle (> 0) at once, the background
 *    engine executes the request once every participating rank has submitted it, and the handle
 *    completes (poll / wait / completion callback). Each handle must be released exactly once.
 *  - Tensors are dense, contiguous, host memory.
 */
#ifndef RELAX_RELAX_H_
#define RELAX_RELAX_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RELAX_ABI_VERSION 25

#if defined(__GNUC__)
#define RELAX_API __attribute__((visibility("default")))
#else
#define RELAX_API
#endif

typedef enum {
  RELAX_OK = 0,
  RELAX_ERR_NOT_INITIALIZED = 1,  /* init() not called, or shutdown() already called */
  RELAX_ERR_INVALID_ARGUMENT = 2, /* bad dtype, op, root, shape, ... detected locally */
  RELAX_ERR_MISMATCH = 3,         /* ranks submitted the same name with different parameters */
  RELAX_ERR_SHUTDOWN = 4,         /* the engine shut down before the request completed */
  RELAX_ERR_STALLED = 5,          /* some ranks never submitted the request (stall shutdown time) */
  RELAX_ERR_DUPLICATE_NAME = 6,   /* a request with this name is already pending on this rank */
  RELAX_ERR_MPI = 7,              /* MPI failed or is unusable (e.g. insufficient thread support) */
  RELAX_ERR_INTERNAL = 8,
  RELAX_ERR_UNKNOWN_HANDLE = 9,
  RELAX_ERR_PROCESS_SET = 10,     /* unknown process set, or this rank is not a member */
  RELAX_PENDING = 11,             /* relax_wait_for / relax_run_for: not complete yet (not a failure) */
  RELAX_ERR_PROC_FAILED = 12      /* a rank's process was lost (fault tolerance on: relax_reset recovers) */
} relax_status_t;

/* Element types. Values are stable (part of the ABI). */
typedef enum {
  RELAX_FLOAT32 = 0,
  RELAX_FLOAT64 = 1,
  RELAX_FLOAT16 = 2,
  RELAX_BFLOAT16 = 3,
  RELAX_INT32 = 4,
  RELAX_INT64 = 5,
  RELAX_UINT8 = 6,
  RELAX_INT8 = 7,
  RELAX_BOOL = 8, /* broadcast / allgather / alltoall only */
  RELAX_INT16 = 9,
  RELAX_UINT16 = 10
} relax_dtype_t;

/* Reduction operations; numbering follows Horovod's (Average=0, Sum=1, Adasum=2, ...). */
typedef enum {
  RELAX_OP_AVERAGE = 0,
  RELAX_OP_SUM = 1,
  RELAX_OP_ADASUM = 2, /* allreduce only (since ABI 17): float16/32/64, global set, 2^k ranks */
  RELAX_OP_MIN = 3,
  RELAX_OP_MAX = 4,
  RELAX_OP_PRODUCT = 5
} relax_reduce_op_t;

typedef enum {
  RELAX_REQ_ALLREDUCE = 0,
  RELAX_REQ_ALLGATHER = 1,     /* concatenation along dim 0; dim 0 may differ per rank */
  RELAX_REQ_BROADCAST = 2,
  RELAX_REQ_REDUCESCATTER = 3, /* rank i receives block i of the reduced tensor (see below) */
  RELAX_REQ_ALLTOALL = 4,      /* dim-0 rows sent per destination given by `splits` */
  RELAX_REQ_BARRIER = 5,
  RELAX_REQ_JOIN = 6,
  RELAX_REQ_ADD_PROCESS_SET = 7,    /* collective over all ranks */
  RELAX_REQ_REMOVE_PROCESS_SET = 8, /* collective over all ranks */
  RELAX_REQ_COMPRESSED_ALLREDUCE = 9, /* float32, encoded by a codec, with optional error feedback */
  /* Direct requests: not negotiated. Every participant must submit them in the same order (the
   * algorithm's schedule guarantees it); they run on their own thread and communicator. */
  RELAX_REQ_NEIGHBOR_AVERAGE = 10, /* x' = self_weight x + sum_k weights[k] x_{peers[k]}; with a codec: CHOCO */
  RELAX_REQ_GROUP_AVERAGE = 11     /* over a group of world ranks (incl. this rank): x' = sum_k weights[k] x_k */
} relax_request_type_t;

/* Codecs of compressed collectives are registered by the core (one file each); list them with
 * relax_codec_count() / relax_codec_info(). A codec's id is stable across releases. */
typedef struct {
  int32_t id;            /* what a request's `codec` names */
  const char* name;      /* e.g. "sign"; valid while the library is loaded */
  const char* wire_format; /* layout of one encoded chunk of n float32 values */
  const char* kind;      /* "fp16" (near exact) or "compressed" (lossy: use error feedback) */
  const char* caveat;    /* advice for users, "" if none */
  double consensus_step; /* CHOCO step that stays stable with this codec's error */
} relax_codec_info_t;

/*
 * The arguments of each kind of request: relax_request_t::args holds the member its `type` names
 * (allgather, barrier and join take none). Roots, splits and counts are relative to the request's
 * process set, except where a comment says world ranks.
 */
typedef struct {      /* allreduce */
  int32_t reduce_op;  /* relax_reduce_op_t */
  double prescale;    /* multiply inputs before reducing (1.0 = none) */
  double postscale;   /* multiply results after reducing (1.0 = none) */
} relax_reduce_args_t;

typedef struct {      /* broadcast */
  int32_t root_rank;  /* a world rank, which must belong to the process set */
} relax_broadcast_args_t;

/* Tensors laid end to end as a request's input (reducescatter, compressed_allreduce; see below). */
typedef struct {
  int32_t count;            /* 0: the input is the request's `input` */
  const void* const* data;  /* each read where it lies, never copied into one buffer */
  const int64_t* counts;    /* elements of each */
} relax_input_pieces_t;

typedef struct {            /* reducescatter */
  relax_reduce_args_t reduce;
  int32_t ncounts;          /* entries in `recv_counts` (0: split dim 0 evenly; see below) */
  const int64_t* recv_counts;
  relax_input_pieces_t inputs;
} relax_reducescatter_args_t;

typedef struct {            /* alltoall */
  int32_t nsplits;          /* entries in `splits` (0: equal split of dim 0) */
  const int64_t* splits;    /* dim-0 rows sent to each rank */
} relax_alltoall_args_t;

typedef struct {            /* add_process_set */
  int32_t nranks;
  const int32_t* ranks;     /* the members' world ranks */
} relax_add_process_set_args_t;

typedef struct {            /* remove_process_set */
  int32_t process_set_id;   /* the set to remove (not 0) */
} relax_remove_process_set_args_t;

/* The factored per-element step scale of a compressed all-reduce (relaxlib.algorithms.step_scale),
 * run inside the operation so that its statistics need no negotiation round of their own: the
 * statistics of `input` (relax_scale_statistics) are averaged over the ranks, smoothed into
 * `smoothed` (decay * smoothed + (1 - decay) * average, each element kept where that is not
 * finite), the scale is set and the residuals rescaled as relax_scale_apply does, input / scale
 * goes through the codec, and the result is multiplied back by the scale. `input` is only read. */
typedef struct {
  int32_t nfactors;         /* parameters of the tensor, one after another */
  const int64_t* shapes;    /* rows, cols of each (relax_scale_statistics); read during relax_enqueue only */
  double floor;             /* times a parameter's root mean square, added to each element's scale */
  double decay;             /* weight of the past statistics, in [0, 1) */
  const float* statistics;  /* this rank's statistics of `input` if the caller computed them (then
                               while its peers catch up), else NULL: the operation computes them */
  float* smoothed;          /* the smoothed statistics (state, relax_scale_statistics' count floats) */
  int64_t statistics_bytes; /* capacities in bytes of `statistics` and `smoothed` (see "Buffer capacities") */
  int64_t smoothed_bytes;
} relax_step_scale_args_t;

typedef struct {            /* compressed_allreduce */
  int32_t reduce_op;        /* Average or Sum */
  int32_t codec;            /* a codec id (relax_codec_info) */
  float* worker_error;      /* error feedback: this rank's residual, count floats (NULL: no feedback) */
  float* owner_error;       /* error feedback: residual of the chunk this rank owns and reduces (only
                               with worker_error: one given alone is refused) */
  const relax_step_scale_args_t* step_scale; /* NULL: none; read during relax_enqueue only (its state
                                                buffers must stay valid until the handle completes) */
  double prescale;          /* multiply the input by this before compressing (1.0 = none), e.g. an SGD
                               step's learning rate: error feedback is then in the scaled units */
  relax_input_pieces_t inputs;
  int64_t worker_error_bytes; /* capacities in bytes of `worker_error` and `owner_error` (see "Buffer
                                 capacities"); the owner's chunk depends on the process set's size
                                 and this rank's place in it, which the core computes */
  int64_t owner_error_bytes;
} relax_compressed_allreduce_args_t;

typedef struct {            /* neighbor_average */
  int32_t npeers;
  const int32_t* peers;     /* world ranks of the neighbours (not this rank) */
  const double* weights;    /* one per peer */
  double self_weight;
  int32_t codec;            /* 0: exact; else CHOCO with this codec */
  double consensus_step;    /* CHOCO's gamma */
  float* estimate_self;     /* CHOCO: this rank's public estimate x^ (count floats) */
  float* estimate_peers;    /* CHOCO: the peers' estimates (npeers * count floats) */
  int64_t estimate_self_bytes;  /* capacities in bytes of the two estimates (see "Buffer capacities") */
  int64_t estimate_peers_bytes;
} relax_neighbor_average_args_t;

typedef struct {            /* group_average */
  int32_t nmembers;
  const int32_t* members;   /* world ranks, ascending, including this rank */
  const double* weights;    /* one per member */
} relax_group_average_args_t;

/*
 * One collective request: a base every kind has, and the kind's arguments. Pointers need only
 * live for the duration of relax_enqueue(), except `input`, `output` and the error-feedback and
 * estimate buffers, which must stay valid until the handle completes.
 *
 * Output buffers:
 *  - allreduce, broadcast: `output` has the shape of `input` (may equal `input`: in place).
 *  - allgather, reducescatter, alltoall: the output shape depends on other ranks; pass
 *    output = NULL and an `alloc` callback, which the engine calls once with the final shape.
 *    (For reducescatter and alltoall a caller may pass `output` when it knows the shape.)
 *
 * Reducescatter blocks: with `recv_counts` NULL, the tensor's dim 0 is split into `size` blocks
 * whose row counts differ by at most one, the first blocks taking the extra rows. With
 * `recv_counts` (ndim==1 only) the flat tensor is split element-wise into those counts.
 *
 * Tensors laid end to end: with `inputs.count` > 0 the request's tensor (ndim 1, `shape` its total
 * element count, `input` NULL) is the concatenation of `inputs.data[i]` (`inputs.counts[i]`
 * elements each, all of `dtype`): a bucket of gradients reduce-scattered or compressed without
 * first copying them into one buffer. The arrays are read during relax_enqueue; the tensors must
 * stay valid and unchanged until completion.
 *
 * Buffer capacities: every buffer a request hands the core travels with its capacity in bytes
 * (`input_bytes`, `output_bytes`, and a `*_bytes` field next to each state buffer of the kinds'
 * arguments), which a binding fills from the tensor it holds (elements x element size). The core
 * computes what the operation will read or write in each (for a process set, from the set's size
 * and this rank's place in it) and refuses a request whose buffer is smaller, naming the request,
 * the buffer and both sizes (RELAX_ERR_INVALID_ARGUMENT, announced to the other members). An
 * unset capacity (0) is a capacity of 0 bytes, refused for any buffer the operation touches: it
 * never means "unknown, skip the check". A NULL buffer needs no capacity; `output_bytes` is
 * ignored when an `alloc` callback provides the output; tensors laid end to end are read as
 * `inputs.counts` says (their capacity). An output whose size
 * depends on other ranks (allgather, alltoall without `alloc`) is checked when the request runs:
 * the request then fails on this rank and its output is left untouched. The host functions beside
 * requests (relax_codec_encode/_decode, relax_scale_*) take each buffer's capacity after it and
 * apply the same rule, with the same message, before touching anything.
 *
 * relax_request_layout() gives the offset and size of every field, for bindings that mirror this
 * struct (Python's ctypes) to check themselves against.
 */
typedef struct {
  int32_t type;       /* relax_request_type_t */
  const char* name;   /* unique among this rank's pending requests; same on every rank */
  int32_t dtype;      /* relax_dtype_t */
  int32_t ndim;
  const int64_t* shape;
  const void* input;
  void* output;
  int32_t process_set; /* 0 = all ranks */
  union {
    relax_reduce_args_t allreduce;
    relax_broadcast_args_t broadcast;
    relax_reducescatter_args_t reducescatter;
    relax_alltoall_args_t alltoall;
    relax_add_process_set_args_t add_process_set;
    relax_remove_process_set_args_t remove_process_set;
    relax_compressed_allreduce_args_t compressed_allreduce;
    relax_neighbor_average_args_t neighbor_average;
    relax_group_average_args_t group_average;
  } args;
  int64_t input_bytes;  /* capacity of `input` in bytes (see "Buffer capacities") */
  int64_t output_bytes; /* capacity of `output` in bytes */
} relax_request_t;

typedef int64_t relax_handle_t;

/*
 * Callbacks run on the thread that runs the request's negotiation round: the engine thread, or a
 * thread inside relax_run (which runs rounds for every request that completes in them). They
 * must not wait for collectives (relax_wait / relax_run fail there with RELAX_ERR_INVALID_ARGUMENT).
 */
/* Called once the output shape is known; returns the buffer to fill. */
typedef void* (*relax_alloc_fn)(void* user, int32_t ndim, const int64_t* shape);
/* Called when the request completes (status = relax_status_t). */
typedef void (*relax_done_fn)(void* user, relax_handle_t handle, int32_t status, const char* message);

/* ---- runtime ---- */
/* Waits up to timeout_ms for every rank to reach initialization, when relax_init would create
 * communicators collectively with ranks that may never come (MPI already initialized: a
 * re-initialization after shutdown, or an application that initialized MPI itself). Returns
 * RELAX_OK (also when there is nothing to wait for), or RELAX_PENDING to be called again, so the
 * caller can handle signals and give up (the rendezvous stays posted for a later call). */
RELAX_API int relax_init_rendezvous(int32_t timeout_ms);
/* Whether this process already initialized relaxlib once (a later relax_init re-initializes). */
RELAX_API int relax_was_initialized(void);
/* Starts relaxlib on this rank (collective). Does nothing until relax_shutdown when already
 * initialized, also when a peer's shutdown stopped the engine (as Horovod's init). */
RELAX_API int relax_init(void);
RELAX_API int relax_shutdown(void);
/* This rank has entered shutdown: it may still serve relaxed averages on the direct lane, but it
 * submits no negotiated request again, so requests only finishing ranks have not submitted fail
 * on every rank (RELAX_ERR_SHUTDOWN) instead of waiting. No-op when not initialized. */
RELAX_API int relax_finishing(void);
/* Fault tolerance (Open MPI's ULFM, `mpirun --with-ft ulfm`). relax_fault_tolerance: 1 when a lost
 * rank is survivable in this job, else 0 with the reason in relax_last_error(). Once a rank's
 * process is lost, every wait here fails RELAX_ERR_PROC_FAILED within moments and
 * relax_process_failure_noted() returns 1. relax_reset (collective over the survivors): stops the
 * engine, re-forms the world from the live ranks (MPIX_Comm_shrink; ranks renumbered in their old
 * order, so the lowest surviving rank becomes 0) and starts a new engine on it, with fresh
 * transports; RELAX_ERR_MPI where fault tolerance is off. */
RELAX_API int relax_fault_tolerance(void);
RELAX_API int relax_process_failure_noted(void);
/* Once a wait failed RELAX_ERR_STALLED because peers did not answer: the process id of the
 * `index`-th of them if it runs on this host, 0 if it runs on another, -1 past the last (at once
 * when no silent peer was found). hvd.elastic evicts those on its host (relax_end_silent_processes),
 * so MPI's fault tolerance reports the rank lost and the survivors re-form the world without it. */
RELAX_API int64_t relax_silent_peer_pid(int32_t index);
/* After relax_reset: the process id of the `index`-th rank the reset left out of the world if it ran
 * on this host, 0 if on another, -1 past the last. MPI's failure detector declares a rank that stops
 * answering (frozen) failed without ending its process: hvd.elastic kills those on its host. */
RELAX_API int64_t relax_lost_peer_pid(int32_t index);
/* SIGKILL to the processes of those ranks (relax_lost_peer_pid) that still exist on this host and were
 * started by the same launcher (their parent is this process's parent); returns how many (since ABI 22).
 * The core does the same at exit when MPI reported a rank lost after the last collective. */
RELAX_API int relax_end_lost_processes(void);
/* The same for the silent peers (relax_silent_peer_pid): hvd.elastic's eviction of a rank that stopped
 * answering, before MPI declared it failed; returns how many were signalled (since ABI 23). */
RELAX_API int relax_end_silent_processes(void);
RELAX_API int relax_reset(void);
/* Adds `count` ranks (collective over the current world; hvd.elastic's workers added back): stops
 * the engine, starts `count` processes of `command argv[0..argc)` with MPI_Comm_spawn (on `host`
 * when not NULL or empty; `environment`: "NAME=value" lines set in them, at most MPI_MAX_INFO_VAL
 * characters, else RELAX_ERR_INVALID_ARGUMENT: relaxlib.grow runs `env NAME=value ... command` instead),
 * merges them into the world
 * after the current ranks and starts a new engine on it. The new processes join that world in their
 * relax_init. Works on any MPI with dynamic processes; no fault tolerance needed. */
RELAX_API int relax_grow(const char* command, const char* const* argv, int32_t argc, int32_t count, const char* host,
                         const char* environment);
RELAX_API int relax_is_initialized(void);
RELAX_API int relax_rank(void);
RELAX_API int relax_size(void);
RELAX_API int relax_local_rank(void);
RELAX_API int relax_local_size(void);
RELAX_API int relax_cross_rank(void);
RELAX_API int relax_cross_size(void);
RELAX_API int relax_mpi_threads_supported(void);
/* World ranks of the processes on this node (returns their number, copying at most `capacity`). */
RELAX_API int relax_local_ranks(int32_t* out, int32_t capacity);
/* Message and status code of the last failing call on this thread ("" / RELAX_OK if none). */
RELAX_API const char* relax_last_error(void);
RELAX_API int relax_last_error_code(void);
/* Core library version string and ABI version. */
RELAX_API const char* relax_version(void);
RELAX_API int relax_abi_version(void);
/* The layout of relax_request_t and its argument structs, one field per line:
 * "<struct>.<field> <offset> <size>\n" (e.g. "relax_request_t.args 56 64"), first a line
 * "<struct> 0 <sizeof>" per struct. */
RELAX_API const char* relax_request_layout(void);
/* This header's constants as compiled into the core, one per line, "<NAME> <value>\n":
 * RELAX_ABI_VERSION, then every enumerator of relax_status_t, relax_dtype_t, relax_reduce_op_t and
 * relax_request_type_t in declaration order, for bindings that cannot include this header
 * (Python's ctypes reads its constants here instead of copying the numbers). */
RELAX_API const char* relax_abi_constants(void);

/* ---- building requests (relax/request_builder.h wraps these for C++ bindings) ---- */
/* Starts a request of `type`: every field zero except the defaults of its kind, which live here
 * only: reduce_op Average with prescale and postscale 1.0 for allreduce and reducescatter
 * (args.reducescatter.reduce), reduce_op Average and prescale 1.0 for compressed_allreduce. A
 * binding then sets the name, the tensor and what its caller chose. A NULL request or an
 * unknown type is refused (RELAX_ERR_INVALID_ARGUMENT; *request is then all zeros). */
RELAX_API int relax_request_init(relax_request_t* request, int32_t type);
/* The name of member `index` (from 0) of `count` requests submitted as one group under the name
 * `base` (grouped allreduce, allgather, reducescatter): "<base>.<index>of<count>", the count
 * keeping groups of different sizes apart and members clear of a request named "<base>.<index>".
 * Writes at most `capacity` bytes, terminating NUL included (`out` may be NULL when capacity is 0),
 * and returns the full name's length as snprintf does (>= capacity: cut short), or -1 with
 * RELAX_ERR_INVALID_ARGUMENT for a NULL base, a count < 1, an index outside [0, count) or a
 * negative capacity. */
RELAX_API int relax_request_member_name(const char* base, int32_t index, int32_t count, char* out,
                                        int32_t capacity);

/* ---- requests ---- */
/* Returns a handle > 0, or 0 on a local error (relax_last_error() says why). */
RELAX_API relax_handle_t relax_enqueue(const relax_request_t* request, relax_alloc_fn alloc, relax_done_fn done,
                             void* user);
/*
 * Grouped submission: the `count` requests are negotiated and executed atomically (same round,
 * fused where possible). Writes `count` handles; returns RELAX_OK or an error (no handle created).
 */
RELAX_API int relax_enqueue_group(const relax_request_t* requests, int32_t count, relax_alloc_fn alloc,
                        relax_done_fn done, void* const* users, relax_handle_t* handles_out);
/*
 * Submits one request and waits for it: relax_enqueue + relax_wait, faster. While the engine
 * thread is idle, the calling thread runs the negotiation rounds and the collective itself, which
 * saves two thread wake-ups (tens of microseconds on a virtual machine). This thread may then
 * run the callbacks of any request completing in its rounds, so it must not hold locks they
 * take. It has no done callback: it returns when the request is complete. Returns the request's
 * status (or the submission error, with *handle_out = 0); release the handle afterwards.
 */
RELAX_API int relax_run(const relax_request_t* request, relax_alloc_fn alloc, void* user, relax_handle_t* handle_out);
/*
 * About to wait for `handle` (a request of relax_enqueue / relax_enqueue_group): while the engine
 * thread is idle, the calling thread runs the negotiation rounds and collectives itself until the
 * request completes or a round changes nothing (a peer has not submitted yet), as relax_run does,
 * saving the thread wake-ups; then the engine thread takes over. Wait on the handle afterwards.
 * The same caveat as relax_run: callbacks of requests completing in these rounds may run on this
 * thread. Returns RELAX_OK (also when there was nothing to run).
 */
RELAX_API int relax_drive(relax_handle_t handle);
/* 1 if complete, 0 if pending, -1 if the handle is unknown. */
RELAX_API int relax_poll(relax_handle_t handle);
/* Blocks until complete; returns the request's status. */
RELAX_API int relax_wait(relax_handle_t handle);
/*
 * Waits at most `timeout_ms` (>= 0): the request's status when complete, else RELAX_PENDING.
 * Framework bindings wait in slices of this so the caller's thread returns to its interpreter
 * in between (Ctrl-C, signal-based timeouts) while a peer has not submitted yet.
 */
RELAX_API int relax_wait_for(relax_handle_t handle, int32_t timeout_ms);
/* The calling thread starts (begin = 1) or stops (0) waiting for negotiated requests it submitted
 * through a framework that waits on its own (TensorFlow running an op eagerly), so the
 * deadlock check (RELAX_DEADLOCK_TIME) counts it as blocked like a relax_wait caller. */
RELAX_API int relax_note_wait(int32_t begin);
/*
 * Announces that this rank rejected `count` requests (one, or a group as relax_enqueue_group would
 * submit it) before they reached the core, e.g. a tensor type its framework binding cannot map.
 * Only `type`, `name` and `process_set` are read. The members that did submit them fail with
 * `code` and a message naming this rank and `message` in the round they complete, instead of
 * waiting for it. relax_enqueue does this itself for the requests it rejects. Returns RELAX_OK,
 * or an error when the requests cannot be announced (no name, unknown process set, name pending).
 */
RELAX_API int relax_reject(const relax_request_t* requests, int32_t count, int32_t code, const char* message);
/* relax_run, waiting at most `timeout_ms` after driving: RELAX_PENDING (with *handle_out set, to
 * be waited for with relax_wait_for) when the request is not complete yet. */
RELAX_API int relax_run_for(const relax_request_t* request, relax_alloc_fn alloc, void* user,
                            relax_handle_t* handle_out, int32_t timeout_ms);
/* Status of a completed handle and its error message ("" when OK). */
RELAX_API int relax_handle_status(relax_handle_t handle);
RELAX_API const char* relax_handle_message(relax_handle_t handle);
/* Result integer of a completed join (last rank to join) or -1. */
RELAX_API int64_t relax_handle_result(relax_handle_t handle);
/* Alltoall: copies the number of rows received from each rank into out[size]; returns count. */
RELAX_API int relax_handle_received_splits(relax_handle_t handle, int64_t* out, int32_t capacity);
/* Forget a completed handle. */
RELAX_API void relax_release(relax_handle_t handle);

/* ---- process sets ---- */
/* Size of a process set, this process's rank in it (-1 if not a member), and its world ranks
 * (returns the number of ranks, copying at most `capacity`); RELAX_ERR_PROCESS_SET if unknown. */
RELAX_API int relax_process_set_size(int32_t process_set);
RELAX_API int relax_process_set_rank(int32_t process_set);
RELAX_API int relax_process_set_ranks(int32_t process_set, int32_t* out, int32_t capacity);

/* ---- bucket size (no init needed) ---- */
/* The bucket size when the user gave none, for the all-reduce's fast path and DeAR alike: a
 * sixteenth of `step_bytes` (one step's tensors), at least 1 MiB and at most `cap_bytes` (which
 * wins where they cross). -1 if either is negative. */
RELAX_API int64_t relax_auto_bucket_bytes(int64_t step_bytes, int64_t cap_bytes);

/* ---- codecs (no init needed) ---- */
/* Number of registered codecs; relax_codec_info(i) for i in [0, count) describes each, by id. */
RELAX_API int32_t relax_codec_count(void);
/* Fills `out` with codec number `index`; RELAX_ERR_INVALID_ARGUMENT if out of range. */
RELAX_API int relax_codec_info(int32_t index, relax_codec_info_t* out);
/* Bytes of `n` float32 values encoded with `codec` (one chunk), or -1 for an unknown codec. */
RELAX_API int64_t relax_codec_encoded_bytes(int32_t codec, int64_t n);
/* One chunk of `n` float32 values: encode reads n * 4 bytes of `in` and writes
 * relax_codec_encoded_bytes(codec, n) to `out`, decode the reverse. `in_bytes` and `out_bytes` are
 * the buffers' capacities in bytes, checked by the buffer rule (see "Buffer capacities" above);
 * RELAX_ERR_INVALID_ARGUMENT, nothing read or written, for a short or NULL buffer. */
RELAX_API int relax_codec_encode(int32_t codec, const float* in, int64_t in_bytes, int64_t n, uint8_t* out,
                                 int64_t out_bytes);
RELAX_API int relax_codec_decode(int32_t codec, const uint8_t* in, int64_t in_bytes, int64_t n, float* out,
                                 int64_t out_bytes);
/* A compressed all-reduce of `count` elements over `size` ranks splits every rank's chunk into
 * this many parts, each encoded on its own behind a 4-byte marker (docs/architecture.md). */
RELAX_API int32_t relax_compressed_parts(int64_t count, int32_t size);

/* ---- the factored step scale on host memory (relaxlib.algorithms.step_scale; no init needed) ----
 * A bucket is `count` parameters one after another, parameter p viewed as shapes[2p] rows by
 * shapes[2p + 1] columns; one row means one scale for the whole parameter.
 * relax_scale_statistics writes per parameter its rows', columns' and whole mean squares (one row:
 * the whole's only), summed in float64 and rounded once. relax_scale_apply takes those statistics
 * (averaged and smoothed) and `previous` (those the residuals were last scaled with), computes each
 * element's scale from both, multiplies the error-feedback residuals by previous / new scale
 * (`worker` over the bucket, `owner` over `owner_count` elements from `owner_offset`; either may
 * be NULL) and writes step / scale to `out` (which may be `step`). relax_scale_multiply multiplies
 * `data` by the scale of `smoothed`. Each buffer is followed by its capacity in bytes, checked by
 * the buffer rule (see "Buffer capacities" above): the bucket's elements x 4 for `step`, `out`,
 * `worker` and `data`, relax_scale_statistics' count x 4 for the statistics, owner_count x 4 for
 * `owner` (whose range must lie within the bucket). RELAX_ERR_INVALID_ARGUMENT for a bad shape or
 * a short or NULL buffer, before anything is read or written. */
RELAX_API int relax_scale_statistics(const float* step, int64_t step_bytes, const int64_t* shapes, int32_t count,
                                     float* out, int64_t out_bytes);
RELAX_API int relax_scale_apply(const float* previous, int64_t previous_bytes, const float* smoothed,
                                int64_t smoothed_bytes, const int64_t* shapes, int32_t count, float floor,
                                const float* step, int64_t step_bytes, float* out, int64_t out_bytes, float* worker,
                                int64_t worker_bytes, float* owner, int64_t owner_bytes, int64_t owner_offset,
                                int64_t owner_count);
RELAX_API int relax_scale_multiply(const float* smoothed, int64_t smoothed_bytes, const int64_t* shapes,
                                   int32_t count, float floor, float* data, int64_t data_bytes);

/* ---- termination of relaxed schedules (ranks stopping at different steps) ---- */
/* With no neighbour/group average of this rank in flight: 1 if a peer's header for a step this
 * rank has not run yet is waiting (some rank still runs that step), 0 if not, < 0 on error. */
RELAX_API int relax_direct_pending(void);
/* Starts a non-blocking maximum of every rank's last step (collective over all ranks). */
RELAX_API int relax_direct_join_start(int64_t last_step);
/* 1 once every rank joined (then *max_step holds the maximum), 0 before, < 0 on error. */
RELAX_API int relax_direct_join_test(int64_t* max_step);

/* ---- group generator service (heterogeneity-aware partial all-reduce) ---- */
/* Collective over all ranks: starts the group generator on rank 0 (idempotent). A waiting rank
 * goes in a smaller group after max(grace_ms, grace_fraction x its step interval). */
RELAX_API int relax_group_service_start(int32_t group_size, int32_t max_lag, double grace_ms, double grace_fraction);
/* Blocks until the generator assigns this rank (at logical `step`) a group: writes the member
 * world ranks (sorted) and their weights in the group average, returns the member count; a rank
 * more than max_lag steps behind joins with weight 0 and adopts the average: *new_step is then
 * the step of the most advanced member (else `step`). */
/* This rank stopped training: the generator stops counting on it (until it requests again). */
RELAX_API int relax_group_retire(void);
RELAX_API int relax_group_request(int64_t step, int32_t* members, double* weights, int32_t capacity,
                                  int64_t* new_step, int64_t* group_id);

/* ---- timeline ---- */
/* Starts (on rank 0; a no-op elsewhere) a Chrome-trace JSON timeline at `path`, replacing an
 * active one; also started by RELAX_TIMELINE=path at init. A path containing "{rank}" makes
 * every rank write its own file, "{rank}" replaced by its world rank (events carry the rank as
 * their pid). `mark_cycles` adds an event per negotiation round. stop completes the JSON document. */
RELAX_API int relax_start_timeline(const char* path, int mark_cycles);
RELAX_API int relax_stop_timeline(void);

/* ---- configuration & introspection ---- */
/* Fusion buffer threshold in bytes and cycle time in milliseconds (also RELAX_FUSION_THRESHOLD,
 * RELAX_CYCLE_TIME). Take effect on the next cycle. */
RELAX_API int relax_set_fusion_threshold(int64_t bytes);
RELAX_API int relax_set_cycle_time_ms(double ms);
/* Engine counters since init. */
typedef struct {
  int64_t rounds;          /* negotiation rounds */
  int64_t completed;       /* requests completed (ok or failed) */
  int64_t bytes_sent;      /* by this rank's collectives, neighbour and group averages */
  int64_t bytes_received;
  int64_t negotiation_ns;  /* engine time inside negotiation rounds (includes waiting for peers) */
  int64_t execution_ns;    /* engine and direct-lane time executing collectives and averages */
  int64_t inline_allreduces; /* small all-reduces whose data travelled in their negotiation round */
  int64_t fast_path_buckets; /* fused all-reduces delivered by the fast path, without negotiation (RELAX_FAST_PATH) */
  int64_t fast_path_engagements; /* times the fast path was taken up after a repeating cycle */
  int64_t fast_path_exits;   /* times some rank left it and its requests were negotiated again */
} relax_stats_t;
RELAX_API int relax_get_stats(relax_stats_t* out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RELAX_RELAX_H_ */
