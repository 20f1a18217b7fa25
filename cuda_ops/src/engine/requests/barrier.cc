// barrier: completes once every rank of the process set submitted it (negotiation proves that;
// nothing is left to run).
#include "engine/requests/kind_support.h"

namespace relax {
namespace {

Status parse(const relax_request_t&, const SubmitContext&, LocalRequest&) { return Status::ok(); }

const RequestKindRegistration kBarrier({RELAX_REQ_BARRIER, "barrier", Lane::kNegotiated, /*takes_tensor=*/false,
                                        /*global=*/false, /*fuses=*/false, parse, {}, nullptr, nullptr});

}  // namespace
}  // namespace relax
