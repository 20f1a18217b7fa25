// Local checks of a request before it is submitted: everything one rank can reject on its own,
// with a message naming the request and the offending value. The base fields are checked here;
// the kind's own arguments by its file in engine/requests/.
#pragma once

#include "engine/request_kind.h"
#include "relax/relax.h"

namespace relax {

// Checks a C request and records it in `local` (descriptor, buffers, the kind's arguments).
Status make_request(const relax_request_t& request, const SubmitContext& ctx, LocalRequest& local);

}  // namespace relax
