#include "api/validate.h"

#include "engine/requests/kind_support.h"

namespace relax {
namespace {

Status invalid(const std::string& message) { return Status::error(RELAX_ERR_INVALID_ARGUMENT, message); }

// Tensors laid end to end (`input` is then NULL): their pointers and sizes, against the shape.
Status parse_input_pieces(const relax_request_t& r, const relax_input_pieces_t& inputs, LocalRequest& local) {
  const Descriptor& d = local.desc;
  if (inputs.count < 0 || !inputs.data || !inputs.counts) {
    return kinds::fail(local, "inputs.count is " + std::to_string(inputs.count) +
                                  " but inputs.data or inputs.counts is NULL");
  }
  if (r.input) return kinds::fail(local, "takes either input or inputs, not both");
  if (d.shape.size() != 1) {
    return kinds::fail(local, "tensors laid end to end need a flat shape (ndim 1), got " + shape_string(d.shape));
  }
  const int64_t esize = static_cast<int64_t>(dtype_size(d.dtype));
  int64_t sum = 0;
  for (int32_t i = 0; i < inputs.count; ++i) {
    const int64_t count = inputs.counts[i];
    if (count < 0) return kinds::fail(local, "input " + std::to_string(i) + " has a negative element count");
    if (count > 0 && !inputs.data[i]) return kinds::fail(local, "input " + std::to_string(i) + " is NULL");
    // The shape's size was checked; the counts are the caller's own and may overflow before
    // their sum is compared with it.
    int64_t bytes = 0;
    if (!checked_mul(count, esize, bytes) || !checked_add(sum, count, sum)) {
      return kinds::fail(local, "input " + std::to_string(i) + "'s element count " + std::to_string(count) +
                                    " makes the inputs' size overflow int64");
    }
    local.input_pieces.push_back(Piece{inputs.data[i], nullptr, bytes});
  }
  if (sum != d.num_elements()) {
    return kinds::fail(local, "inputs hold " + std::to_string(sum) + " elements but the shape says " +
                                  std::to_string(d.num_elements()));
  }
  return Status::ok();
}

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
    // Negative dimensions and sizes that overflow int64, in elements or bytes: after this every
    // product of the shape the kinds and the engine compute is exact.
    int64_t elements = 0, bytes = 0;
    std::string why;
    if (!checked_tensor_size(d.shape, dtype_size(d.dtype), elements, bytes, why)) return kinds::fail(local, why);
    const relax_input_pieces_t* pieces = kind->input_pieces ? kind->input_pieces(r) : nullptr;
    if (pieces && pieces->count != 0) {
      Status s = parse_input_pieces(r, *pieces, local);
      if (!s.is_ok()) return s;
    } else if (d.num_elements() > 0 && !r.input) {
      return kinds::fail(local, "input buffer is NULL");
    }
    local.input = r.input;
    local.output = r.output;
  }
  return kind->parse(r, ctx, local);
}

}  // namespace relax
