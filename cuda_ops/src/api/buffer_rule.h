// The buffer rule (relax.h, "Buffer capacities"): every buffer a request hands the core comes with
// its capacity in bytes, and a request whose buffer is smaller than what its operation reads or
// writes there is refused before it runs, with a message naming the request, the buffer and both
// sizes. Bindings only fill each capacity from the tensor they hold, so no binding needs checks
// of its own. Sizes that depend on the kind (residuals, estimates, a reduce-scatter's block) are
// checked by the kind's parse through kinds::require_capacity; those known only when the request
// runs (allgather, alltoall without an allocation callback) by kinds::output_within_capacity.
#pragma once

#include "engine/request_kind.h"
#include "relax/relax.h"

namespace relax {

// The base buffers of a request that make_request accepted: its input (unless the tensors are laid
// end to end, read as their counts say) and, when its kind knows the output's size at submission,
// its output. Records the output's capacity for the checks made when the request runs.
Status check_buffers(const relax_request_t& request, LocalRequest& local);

}  // namespace relax
