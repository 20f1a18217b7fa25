// join: this rank has no more requests. The others go on; requests it misses run without it
// (as in Horovod), and the join completes on every rank once all joined, with the last rank
// that joined as its result. The engine carries it as a flag of this rank's round messages.
#include "engine/requests/kind_support.h"

namespace relax {
namespace {

Status parse(const relax_request_t&, const SubmitContext&, LocalRequest& local) {
  local.desc.name = kJoinRequestName;  // one join per rank at a time, whatever the caller named it
  return Status::ok();
}

const RequestKindRegistration kJoin({RELAX_REQ_JOIN, "join", Lane::kJoin, /*takes_tensor=*/false,
                                     /*global=*/true, /*fuses=*/false, parse, {}, nullptr, nullptr});

}  // namespace
}  // namespace relax
