// remove_process_set: every rank of the world submits it with the same set id; the engine frees
// the set on every rank in the same round (Engine::apply_membership).
#include "engine/requests/kind_support.h"

namespace relax {
namespace {

Status parse(const relax_request_t& r, const SubmitContext&, LocalRequest& local) {
  const int32_t id = r.args.remove_process_set.process_set_id;
  if (id == 0) return Status::error(RELAX_ERR_PROCESS_SET, "the global process set (id 0) cannot be removed");
  local.desc.root_rank = id;  // the id travels in the descriptor's root field
  return Status::ok();
}

std::string id_of(const Descriptor& d) { return std::to_string(d.root_rank); }

const RequestKindRegistration kRemoveProcessSet({RELAX_REQ_REMOVE_PROCESS_SET, "remove_process_set",
                                                 Lane::kMembership, /*takes_tensor=*/false, /*global=*/true,
                                                 /*fuses=*/false, parse, {{"process set ids", id_of}}, nullptr,
                                                 nullptr});

}  // namespace
}  // namespace relax
