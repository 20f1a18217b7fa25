// What relax.h compiled to, for bindings that mirror it instead of including it (Python's
// ctypes): relax_request_layout(), the offsets and sizes of relax_request_t and its argument
// structs as this compiler laid them out, which the bindings check themselves against in their
// tests; and relax_abi_constants(), the header's constants, which they read instead of copying
// numbers that drift (tests/test_request_layout.py checks the list against the header's text).
#include <cstddef>
#include <sstream>
#include <string>

#include "relax/relax.h"

namespace {

#define RELAX_STRUCT(type) os << #type " 0 " << sizeof(type) << '\n'
#define RELAX_FIELD(type, field) \
  os << #type "." #field " " << offsetof(type, field) << ' ' << sizeof(static_cast<type*>(nullptr)->field) << '\n'

std::string describe_layout() {
  std::ostringstream os;
  RELAX_STRUCT(relax_request_t);
  RELAX_FIELD(relax_request_t, type);
  RELAX_FIELD(relax_request_t, name);
  RELAX_FIELD(relax_request_t, dtype);
  RELAX_FIELD(relax_request_t, ndim);
  RELAX_FIELD(relax_request_t, shape);
  RELAX_FIELD(relax_request_t, input);
  RELAX_FIELD(relax_request_t, output);
  RELAX_FIELD(relax_request_t, process_set);
  RELAX_FIELD(relax_request_t, args);
  RELAX_FIELD(relax_request_t, input_bytes);
  RELAX_FIELD(relax_request_t, output_bytes);
  RELAX_STRUCT(relax_reduce_args_t);
  RELAX_FIELD(relax_reduce_args_t, reduce_op);
  RELAX_FIELD(relax_reduce_args_t, prescale);
  RELAX_FIELD(relax_reduce_args_t, postscale);
  RELAX_STRUCT(relax_broadcast_args_t);
  RELAX_FIELD(relax_broadcast_args_t, root_rank);
  RELAX_STRUCT(relax_reducescatter_args_t);
  RELAX_FIELD(relax_reducescatter_args_t, reduce);
  RELAX_FIELD(relax_reducescatter_args_t, ncounts);
  RELAX_FIELD(relax_reducescatter_args_t, recv_counts);
  RELAX_FIELD(relax_reducescatter_args_t, inputs);
  RELAX_STRUCT(relax_input_pieces_t);
  RELAX_FIELD(relax_input_pieces_t, count);
  RELAX_FIELD(relax_input_pieces_t, data);
  RELAX_FIELD(relax_input_pieces_t, counts);
  RELAX_STRUCT(relax_alltoall_args_t);
  RELAX_FIELD(relax_alltoall_args_t, nsplits);
  RELAX_FIELD(relax_alltoall_args_t, splits);
  RELAX_STRUCT(relax_add_process_set_args_t);
  RELAX_FIELD(relax_add_process_set_args_t, nranks);
  RELAX_FIELD(relax_add_process_set_args_t, ranks);
  RELAX_STRUCT(relax_remove_process_set_args_t);
  RELAX_FIELD(relax_remove_process_set_args_t, process_set_id);
  RELAX_STRUCT(relax_compressed_allreduce_args_t);
  RELAX_FIELD(relax_compressed_allreduce_args_t, reduce_op);
  RELAX_FIELD(relax_compressed_allreduce_args_t, codec);
  RELAX_FIELD(relax_compressed_allreduce_args_t, worker_error);
  RELAX_FIELD(relax_compressed_allreduce_args_t, owner_error);
  RELAX_FIELD(relax_compressed_allreduce_args_t, step_scale);
  RELAX_FIELD(relax_compressed_allreduce_args_t, prescale);
  RELAX_FIELD(relax_compressed_allreduce_args_t, inputs);
  RELAX_FIELD(relax_compressed_allreduce_args_t, worker_error_bytes);
  RELAX_FIELD(relax_compressed_allreduce_args_t, owner_error_bytes);
  RELAX_STRUCT(relax_step_scale_args_t);
  RELAX_FIELD(relax_step_scale_args_t, nfactors);
  RELAX_FIELD(relax_step_scale_args_t, shapes);
  RELAX_FIELD(relax_step_scale_args_t, floor);
  RELAX_FIELD(relax_step_scale_args_t, decay);
  RELAX_FIELD(relax_step_scale_args_t, statistics);
  RELAX_FIELD(relax_step_scale_args_t, smoothed);
  RELAX_FIELD(relax_step_scale_args_t, statistics_bytes);
  RELAX_FIELD(relax_step_scale_args_t, smoothed_bytes);
  RELAX_STRUCT(relax_neighbor_average_args_t);
  RELAX_FIELD(relax_neighbor_average_args_t, npeers);
  RELAX_FIELD(relax_neighbor_average_args_t, peers);
  RELAX_FIELD(relax_neighbor_average_args_t, weights);
  RELAX_FIELD(relax_neighbor_average_args_t, self_weight);
  RELAX_FIELD(relax_neighbor_average_args_t, codec);
  RELAX_FIELD(relax_neighbor_average_args_t, consensus_step);
  RELAX_FIELD(relax_neighbor_average_args_t, estimate_self);
  RELAX_FIELD(relax_neighbor_average_args_t, estimate_peers);
  RELAX_FIELD(relax_neighbor_average_args_t, estimate_self_bytes);
  RELAX_FIELD(relax_neighbor_average_args_t, estimate_peers_bytes);
  RELAX_STRUCT(relax_group_average_args_t);
  RELAX_FIELD(relax_group_average_args_t, nmembers);
  RELAX_FIELD(relax_group_average_args_t, members);
  RELAX_FIELD(relax_group_average_args_t, weights);
  return os.str();
}

#undef RELAX_FIELD
#undef RELAX_STRUCT

#define RELAX_CONSTANT(name) os << #name " " << static_cast<long long>(name) << '\n'

std::string describe_constants() {
  std::ostringstream os;
  RELAX_CONSTANT(RELAX_ABI_VERSION);
  // relax_status_t
  RELAX_CONSTANT(RELAX_OK);
  RELAX_CONSTANT(RELAX_ERR_NOT_INITIALIZED);
  RELAX_CONSTANT(RELAX_ERR_INVALID_ARGUMENT);
  RELAX_CONSTANT(RELAX_ERR_MISMATCH);
  RELAX_CONSTANT(RELAX_ERR_SHUTDOWN);
  RELAX_CONSTANT(RELAX_ERR_STALLED);
  RELAX_CONSTANT(RELAX_ERR_DUPLICATE_NAME);
  RELAX_CONSTANT(RELAX_ERR_MPI);
  RELAX_CONSTANT(RELAX_ERR_INTERNAL);
  RELAX_CONSTANT(RELAX_ERR_UNKNOWN_HANDLE);
  RELAX_CONSTANT(RELAX_ERR_PROCESS_SET);
  RELAX_CONSTANT(RELAX_PENDING);
  RELAX_CONSTANT(RELAX_ERR_PROC_FAILED);
  // relax_dtype_t
  RELAX_CONSTANT(RELAX_FLOAT32);
  RELAX_CONSTANT(RELAX_FLOAT64);
  RELAX_CONSTANT(RELAX_FLOAT16);
  RELAX_CONSTANT(RELAX_BFLOAT16);
  RELAX_CONSTANT(RELAX_INT32);
  RELAX_CONSTANT(RELAX_INT64);
  RELAX_CONSTANT(RELAX_UINT8);
  RELAX_CONSTANT(RELAX_INT8);
  RELAX_CONSTANT(RELAX_BOOL);
  RELAX_CONSTANT(RELAX_INT16);
  RELAX_CONSTANT(RELAX_UINT16);
  // relax_reduce_op_t
  RELAX_CONSTANT(RELAX_OP_AVERAGE);
  RELAX_CONSTANT(RELAX_OP_SUM);
  RELAX_CONSTANT(RELAX_OP_ADASUM);
  RELAX_CONSTANT(RELAX_OP_MIN);
  RELAX_CONSTANT(RELAX_OP_MAX);
  RELAX_CONSTANT(RELAX_OP_PRODUCT);
  // relax_request_type_t
  RELAX_CONSTANT(RELAX_REQ_ALLREDUCE);
  RELAX_CONSTANT(RELAX_REQ_ALLGATHER);
  RELAX_CONSTANT(RELAX_REQ_BROADCAST);
  RELAX_CONSTANT(RELAX_REQ_REDUCESCATTER);
  RELAX_CONSTANT(RELAX_REQ_ALLTOALL);
  RELAX_CONSTANT(RELAX_REQ_BARRIER);
  RELAX_CONSTANT(RELAX_REQ_JOIN);
  RELAX_CONSTANT(RELAX_REQ_ADD_PROCESS_SET);
  RELAX_CONSTANT(RELAX_REQ_REMOVE_PROCESS_SET);
  RELAX_CONSTANT(RELAX_REQ_COMPRESSED_ALLREDUCE);
  RELAX_CONSTANT(RELAX_REQ_NEIGHBOR_AVERAGE);
  RELAX_CONSTANT(RELAX_REQ_GROUP_AVERAGE);
  return os.str();
}

#undef RELAX_CONSTANT

}  // namespace

const char* relax_request_layout(void) {
  static const std::string layout = describe_layout();
  return layout.c_str();
}

const char* relax_abi_constants(void) {
  static const std::string constants = describe_constants();
  return constants.c_str();
}
