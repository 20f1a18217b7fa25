#include "engine/requests/adasum_request.h"

#include <cmath>
#include <string>

#include "engine/requests/kind_support.h"
#include "util/types.h"

namespace relax {
namespace kinds {

Status parse_adasum(const SubmitContext& ctx, LocalRequest& local, const relax_reduce_args_t& args) {
  Descriptor& d = local.desc;
  if (d.dtype != RELAX_FLOAT32 && d.dtype != RELAX_FLOAT64 && d.dtype != RELAX_FLOAT16) {
    // Its coefficients come from dot products and norms: integers would truncate them to nonsense.
    // Horovod's Adasum takes the same three float types (no bfloat16).
    return fail(local, "the Adasum reduction supports float16, float32 and float64 tensors, not " +
                           dtype_name(d.dtype));
  }
  if (ctx.process_set != 0) {
    return fail(local, "the Adasum reduction runs over the global process set only (as in Horovod), not process set " +
                           std::to_string(ctx.process_set));
  }
  const int n = ctx.set_size();
  if (n <= 0 || (n & (n - 1)) != 0) {
    // Horovod's vector-halving tree pairs rank r with r ^ level: without a power of two some
    // ranks have no partner. Horovod raises NotImplementedError here too.
    return fail(local, "the Adasum reduction needs a power-of-two number of ranks (as in Horovod), but there are " +
                           std::to_string(n));
  }
  if (!std::isfinite(args.prescale) || !std::isfinite(args.postscale)) {
    return fail(local, "prescale and postscale factors must be finite");
  }
  d.reduce_op = RELAX_OP_ADASUM;
  d.prescale = args.prescale;
  d.postscale = args.postscale;
  return Status::ok();
}

}  // namespace kinds
}  // namespace relax
