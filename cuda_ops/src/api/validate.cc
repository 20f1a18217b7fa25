#include "api/validate.h"

#include "engine/requests/kind_support.h"

namespace relax {
namespace {

Status invalid(const std::string& message) { return Status::error(RELAX_ERR_INVALID_ARGUMENT, message); }

}  // namespace

Status make_request(const relax_request_t& r, const SubmitContext& ctx, LocalRequest& local) {
  const RequestKind* kind = request_kind(r.type);
  if (!kind) return invalid("unknown request type " + std::to_string(r.type));
  local.desc = Descriptor{};
  Descriptor& d = local.desc;
  d.type = r.type;
  d.name = r.name ? r.name : "";
  if (d.name.empty()) return invalid(request_type_name(r.type) + " needs a non-empty name");
  if (kind->global && r.process_set != 0) {
    return Status::error(RELAX_ERR_PROCESS_SET, kinds::describe(local) + " runs over all ranks; it takes no process set");
  }
  if (kind->takes_tensor) {
    if (!dtype_is_valid(r.dtype)) return kinds::fail(local, "unsupported data type " + dtype_name(r.dtype));
    d.dtype = r.dtype;
    if (r.ndim < 0 || (r.ndim > 0 && !r.shape)) {
      return kinds::fail(local, "invalid shape (ndim " + std::to_string(r.ndim) + ")");
    }
    d.shape.assign(r.shape, r.shape + r.ndim);
    for (int64_t dim : d.shape) {
      if (dim < 0) return kinds::fail(local, "negative dimension in shape " + shape_string(d.shape));
    }
    const bool in_pieces = r.type == RELAX_REQ_REDUCESCATTER && r.args.reducescatter.ninputs != 0;
    if (d.num_elements() > 0 && !r.input && !in_pieces) return kinds::fail(local, "input buffer is NULL");
    local.input = r.input;
    local.output = r.output;
  }
  return kind->parse(r, ctx, local);
}

}  // namespace relax
