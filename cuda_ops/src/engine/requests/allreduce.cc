// allreduce: every rank ends with the reduction of every rank's tensor. The executor fuses
// consecutive allreduces of one dtype, op and scale into one collective (engine/executor.cc).
#include "engine/requests/adasum_request.h"
#include "engine/requests/kind_support.h"

namespace relax {
namespace {

Status parse(const relax_request_t& r, const SubmitContext& ctx, LocalRequest& local) {
  Status s = r.args.allreduce.reduce_op == RELAX_OP_ADASUM ? kinds::parse_adasum(ctx, local, r.args.allreduce)
                                                           : kinds::parse_reduction(local, r.args.allreduce);
  return s.is_ok() ? kinds::require_output(local) : s;
}

const RequestKindRegistration kAllreduce({
    RELAX_REQ_ALLREDUCE, "allreduce", Lane::kNegotiated, /*takes_tensor=*/true, /*global=*/false,
    /*fuses=*/true, parse, kinds::reduction_agreement(), /*check_joined=*/nullptr, /*run=*/nullptr});

}  // namespace
}  // namespace relax
