// relax_request_init and relax_request_member_name: how a request starts and how the members of a
// group are named, in one place for every binding (the torch and TensorFlow extensions through
// relax/request_builder.h, Python's ctypes through relaxlib/_core.py). Bindings that filled
// relax_request_t themselves drifted apart: one set a default another set by hand, and grouped
// members were named differently per framework.
#include <cstdio>
#include <cstring>
#include <string>

#include "api/runtime_state.h"
#include "engine/request_kind.h"
#include "relax/relax.h"

namespace {

void default_reduce_args(relax_reduce_args_t& a) {
  a.reduce_op = RELAX_OP_AVERAGE;
  a.prescale = 1.0;  // 1.0: no scaling (zero would zero the tensor)
  a.postscale = 1.0;
}

}  // namespace

int relax_request_init(relax_request_t* request, int32_t type) {
  if (!request) return relax::fail(relax::Status::error(RELAX_ERR_INVALID_ARGUMENT, "relax_request_init: no request"));
  // memset, not `= {}`: value-initializing a struct with a union only guarantees its first member.
  std::memset(request, 0, sizeof *request);
  if (!relax::request_kind(type)) {
    return relax::fail(relax::Status::error(RELAX_ERR_INVALID_ARGUMENT,
                                            "relax_request_init: unknown request type " + std::to_string(type)));
  }
  request->type = type;
  switch (type) {
    case RELAX_REQ_ALLREDUCE: default_reduce_args(request->args.allreduce); break;
    case RELAX_REQ_REDUCESCATTER: default_reduce_args(request->args.reducescatter.reduce); break;
    case RELAX_REQ_COMPRESSED_ALLREDUCE:
      request->args.compressed_allreduce.reduce_op = RELAX_OP_AVERAGE;
      request->args.compressed_allreduce.prescale = 1.0;
      break;
    default: break;  // every other argument's default is zero (no splits, counts, codec, ...)
  }
  return RELAX_OK;
}

int relax_request_member_name(const char* base, int32_t index, int32_t count, char* out, int32_t capacity) {
  if (!base || count < 1 || index < 0 || index >= count || capacity < 0 || (capacity > 0 && !out)) {
    relax::fail(relax::Status::error(
        RELAX_ERR_INVALID_ARGUMENT, "relax_request_member_name: needs a base name, 0 <= index < count and a buffer "
                                    "of `capacity` bytes (got index " + std::to_string(index) + ", count " +
                                        std::to_string(count) + ", capacity " + std::to_string(capacity) + ")"));
    return -1;
  }
  const std::string name = std::string(base) + "." + std::to_string(index) + "of" + std::to_string(count);
  if (capacity > 0) std::snprintf(out, static_cast<size_t>(capacity), "%s", name.c_str());
  return static_cast<int>(name.size());
}
