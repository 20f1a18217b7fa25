// What several request kinds share: argument checks with the messages users see, the
// reduction's arithmetic, fields to agree on and the rules for ranks that joined.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/request_kind.h"

namespace relax {
namespace kinds {

Status invalid(const std::string& message);
// "broadcast 'grad.3'": how messages name a request.
std::string describe(const LocalRequest& local);
// RELAX_ERR_INVALID_ARGUMENT "<describe(local)>: <detail>". Messages are built only on failure:
// every request pays the checks, none should pay for strings.
Status fail(const LocalRequest& local, const std::string& detail);

// Checks a reduction's op, dtype and scale factors and records them in `d` (Adasum is refused:
// allreduce alone takes it, through parse_adasum in adasum_request.h).
Status parse_reduction(LocalRequest& local, const relax_reduce_args_t& args);
// The output buffer must be given (same-shape kinds) unless the tensor is empty; it must then hold
// the tensor's bytes (recorded for the buffer rule).
Status require_output(LocalRequest& local);

// The buffer rule (relax.h, "Buffer capacities"): the caller's `buffer` of this request must hold
// the `needed` bytes the operation reads or writes there; the caller says it holds `capacity`.
// Every check of a caller's buffer size goes through here, so that each refusal names the request,
// the buffer and both sizes alike; `detail` says where `needed` comes from ("" if plain).
Status require_capacity(const LocalRequest& local, const std::string& buffer, int64_t needed, int64_t capacity,
                        const std::string& detail = "");
// The same rule and message for a C ABI function outside requests (codecs, the step scale's host
// passes): `who` names the call ("relax_codec_decode") where a request's name would stand.
Status require_capacity(const std::string& who, const std::string& buffer, int64_t needed, int64_t capacity,
                        const std::string& detail = "");
// Bytes of `count` float32 values; INT64_MAX when that overflows (a need no capacity can meet, so
// require_capacity refuses it instead of wrapping negative and passing).
int64_t float_bytes(int64_t count);
// a * b, or INT64_MAX when the product overflows (for element counts fed to float_bytes).
int64_t saturating_mul(int64_t a, int64_t b);
// RunContext::output_for for kinds whose output size is known only when they run (allgather,
// alltoall): a caller's own output (no allocation callback) smaller than `bytes` is left
// untouched, the collective writes into `fallback` instead (every rank still takes part), and
// `refused` receives the buffer rule's error for the request to fail with on this rank.
void* output_within_capacity(RunContext& ctx, ExecItem& item, const std::vector<int64_t>& shape,
                             std::vector<uint8_t>& fallback, int64_t bytes, Status& refused);
// Kinds whose output shape depends on other ranks: a tensor with a dimension, and an output
// buffer or an allocation callback.
Status require_rows(const SubmitContext& ctx, const LocalRequest& local);

// Direct averages: a float tensor with its output, and `count` peers (world ranks, no repeats)
// with finite weights, recorded in the descriptor's splits and the direct arguments.
Status parse_peers(const SubmitContext& ctx, int32_t count, const int32_t* peers, const double* weights,
                   bool compressed, LocalRequest& local);

// Average reduces as a sum and divides by the number of ranks afterwards.
int32_t reduction_of(int32_t op);
double postscale_of(const Descriptor& d, int size);
std::vector<int64_t> with_dim0(const std::vector<int64_t>& shape, int64_t dim0);
int64_t byte_size(const Descriptor& d);

// Fields to agree on.
std::string reduce_op_of(const Descriptor& d);
std::string prescale_of(const Descriptor& d);
std::string postscale_text_of(const Descriptor& d);
std::string shape_of(const Descriptor& d);
std::string ndim_of(const Descriptor& d);
std::string row_shape_of(const Descriptor& d);
// op, prescale, postscale, shape (a function: kinds register during static initialization, when
// another file's globals may not be constructed yet).
std::vector<AgreementField> reduction_agreement();

// Horovod raises when a joined rank would have to receive rows it cannot (allgather, broadcast)
// unless RELAX_JOINED_RANKS=contribute-nothing.
Status gather_when_joined(const ResponseTensor& t, const JoinedContext& ctx);
// Kinds that cannot run at all while ranks joined (alltoall, compressed all-reduce).
Status refuse_when_joined(const ResponseTensor& t, const JoinedContext& ctx);

}  // namespace kinds
}  // namespace relax
