// The checks an Adasum all-reduce (op=Adasum) passes at submission, on every rank alike, so
// that a request the tree cannot run is refused with a message naming why instead of reaching
// the collective (collectives/adasum.h).
#pragma once

#include "engine/request_kind.h"

namespace relax {
namespace kinds {

// float16, float32 or float64 tensors, the global process set, and a power-of-two number of ranks (as
// Horovod's CPU Adasum requires); records the reduction in `local` like parse_reduction().
Status parse_adasum(const SubmitContext& ctx, LocalRequest& local, const relax_reduce_args_t& args);

}  // namespace kinds
}  // namespace relax
