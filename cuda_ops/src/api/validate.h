// Local checks of a request before it is submitted: everything one rank can reject on its own,
// with a message naming the request and the offending value.
#pragma once

#include "relax/relax.h"
#include "util/types.h"

namespace relax {

// Converts and checks a C request; `world_size` is the size of the request's process set and
// bounds roots and split counts (process set membership requests: the world).
Status make_descriptor(const relax_request_t& request, int world_size, bool has_alloc, Descriptor& out);

}  // namespace relax
