// A kind of request (allreduce, broadcast, ...) is one file in engine/requests/: it registers a
// RequestKind saying how the engine carries it, how its arguments (relax_request_t::args) are
// checked and recorded, what every rank must agree on, whether ranks that joined can take part,
// and how it runs. The core asks this table instead of switching on the type: validation
// (api/validate.cc), negotiation (coordinator), execution (executor). Two lanes keep the running
// part outside the kind's file: process-set changes are applied by the engine (they create
// communicators on every rank together), and neighbour/group averages run on the direct lane
// (relaxed/direct_lane.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "engine/coordinator.h"
#include "engine/request.h"
#include "relax/relax.h"
#include "util/types.h"

namespace relax {

enum class Lane {
  kNegotiated,  // negotiated by name in rounds, then run by the executor
  kMembership,  // negotiated over all ranks, then applied to the process sets on every rank
  kJoin,        // this rank has no more requests; the others go on without it
  kDirect,      // not negotiated: the direct lane runs it on a schedule every member follows
};

// Where a request is submitted: what the checks of its arguments may need.
struct SubmitContext {
  int32_t process_set = 0;
  const std::vector<int>& set_world_ranks;  // the set's members as world ranks (the world for global kinds)
  int set_rank = 0;                         // this rank in the set
  int world_rank = 0;
  int world_size = 1;
  bool has_alloc = false;                   // the caller gave an allocation callback for the output
  int set_size() const { return static_cast<int>(set_world_ranks.size()); }
};

// A value every rank must give for a request, checked when the request is negotiated.
struct AgreementField {
  const char* what;  // plural, as in "Mismatched broadcast root ranks for 'x': ..."
  std::string (*value)(const Descriptor&);
};

// What negotiation knows about ranks that joined, for a kind's check_joined.
struct JoinedContext {
  const std::vector<bool>& joined;     // by set rank
  const std::vector<int>& absent;      // world ranks that joined and have no part in this request
  bool gather_nothing;                 // RELAX_JOINED_RANKS=contribute-nothing
  const std::string& quoted;           // the request's name, quoted
};

// One negotiated request being executed: every rank's descriptor and this rank's request
// (nullptr on a rank that joined and has no part in it).
struct ExecItem {
  const ResponseTensor* tensor;
  LocalRequest* local;
};

// What the executor lends a kind's run function.
struct RunContext {
  Collectives& collectives;
  const std::vector<int>& world_ranks;  // set rank i is world rank world_ranks[i]
  std::vector<uint8_t>& work_buffer;    // scratch kept across requests

  // The buffer for an output of `shape` (`bytes` long): the local request's, allocated through
  // its callback if it has one; `fallback`, resized, on a rank that joined.
  void* output_for(ExecItem& item, const std::vector<int64_t>& shape, std::vector<uint8_t>& fallback,
                   int64_t bytes) const;
};

struct RequestKind {
  int32_t type = -1;
  const char* name = "";
  Lane lane = Lane::kNegotiated;
  bool takes_tensor = true;  // has a dtype, a shape and buffers (not barrier, join, process-set changes)
  bool global = false;       // runs over all ranks: takes no process set
  bool fuses = false;        // the executor fuses consecutive requests into one collective (allreduce)
  // Checks the kind's arguments and records them in `local` (its descriptor, buffers, direct
  // arguments). The base fields are checked and recorded before.
  Status (*parse)(const relax_request_t& r, const SubmitContext& ctx, LocalRequest& local) = nullptr;
  // What every rank must agree on, after the type, the data type and the group.
  std::vector<AgreementField> agreement;
  // Whether it can run while some ranks joined without it (nullptr: yes, they contribute nothing).
  Status (*check_joined)(const ResponseTensor& t, const JoinedContext& ctx) = nullptr;
  // Runs a negotiated request; `received_splits` is handed to the caller (alltoall). nullptr for
  // kinds with nothing to run once negotiated (barrier) or run elsewhere (see the top).
  Status (*run)(RunContext& ctx, ExecItem& item, std::vector<int64_t>& received_splits) = nullptr;
  // The kind's tensors laid end to end (relax_input_pieces_t), which the base checks and records
  // in LocalRequest::input_pieces; nullptr for kinds that take one input.
  const relax_input_pieces_t* (*input_pieces)(const relax_request_t& r) = nullptr;
};

// Registers a kind when the library loads: each file in engine/requests/ defines one. Two kinds
// with one type abort the load with a message naming both.
class RequestKindRegistration {
 public:
  explicit RequestKindRegistration(RequestKind kind);
};

// The kind of a request type, or nullptr when unknown.
const RequestKind* request_kind(int32_t type);
// "allreduce", ... or "request(<type>)".
std::string request_type_name(int32_t type);

}  // namespace relax
