#include "api/buffer_rule.h"

#include "engine/requests/kind_support.h"

namespace relax {

Status check_buffers(const relax_request_t& r, LocalRequest& local) {
  const RequestKind* kind = request_kind(r.type);
  if (!kind || !kind->takes_tensor) return Status::ok();  // barrier, join, process-set changes: no buffers
  local.output_capacity = r.output_bytes;
  if (local.input && local.input_pieces.empty()) {
    Status s = kinds::require_capacity(local, "input buffer", kinds::byte_size(local.desc), r.input_bytes,
                                       "shape " + shape_string(local.desc.shape) + " of " + dtype_name(local.desc.dtype));
    if (!s.is_ok()) return s;
  }
  if (local.output && local.output_needed >= 0) {
    return kinds::require_capacity(local, "output buffer", local.output_needed, r.output_bytes);
  }
  return Status::ok();
}

}  // namespace relax
