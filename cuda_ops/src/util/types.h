// Core value types shared by the coordinator, the engine and the collectives.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "relax/relax.h"

namespace relax {

// Outcome of an operation: code plus a message naming what went wrong.
struct Status {
  int32_t code = RELAX_OK;
  std::string message;

  static Status ok() { return {}; }
  static Status error(int32_t code, std::string message) { return {code, std::move(message)}; }
  bool is_ok() const { return code == RELAX_OK; }
};

// Monotonic clock in seconds (shared time base of timings and the timeline).
double steady_seconds();
// The same clock at the resolution of the scheduler tick (a few ms, up to that much behind
// steady_seconds()) for a fraction of the cost: for bookkeeping measured in seconds.
double coarse_seconds();

// Size in bytes of one element, or 0 for an unknown dtype.
size_t dtype_size(int32_t dtype);
// Human-readable dtype name ("float32", ...); "dtype(<n>)" if unknown.
std::string dtype_name(int32_t dtype);
bool dtype_is_valid(int32_t dtype);
bool dtype_is_floating(int32_t dtype);
std::string reduce_op_name(int32_t op);
std::string shape_string(const std::vector<int64_t>& shape);

// Overflow-checked int64 arithmetic: false (and `out` unspecified) when the exact result does
// not fit. Every size computed from caller- or peer-supplied counts goes through these.
inline bool checked_mul(int64_t a, int64_t b, int64_t& out) { return !__builtin_mul_overflow(a, b, &out); }
inline bool checked_add(int64_t a, int64_t b, int64_t& out) { return !__builtin_add_overflow(a, b, &out); }

// The one check of a tensor's size: no dimension is negative, and the product of the non-zero
// dimensions, in elements and in bytes (times `element_size`), fits in int64 (so an empty
// [0, 2^62, 2^62] fails too: its rows would overflow). On success fills
// `elements` and `bytes`; on failure says why in `why` ("negative dimension ...", "... elements
// overflow ..."). Request validation calls it, so Descriptor::num_elements() and friends never
// overflow on a descriptor that passed.
bool checked_tensor_size(const std::vector<int64_t>& shape, size_t element_size, int64_t& elements, int64_t& bytes,
                         std::string& why);

// What one rank asked for, as exchanged during negotiation. Everything needed to validate the
// request against other ranks and to take part in it without the local tensor (joined ranks).
struct Descriptor {
  std::string name;
  int32_t type = RELAX_REQ_ALLREDUCE;
  int32_t dtype = RELAX_FLOAT32;
  int32_t reduce_op = RELAX_OP_SUM;
  int32_t root_rank = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;       // alltoall rows per destination
  std::vector<int64_t> recv_counts;  // reducescatter element counts per rank
  std::string group;                 // non-empty: member of an atomically negotiated group
  int32_t group_size = 0;
  int32_t codec = 0;                 // compressed all-reduce
  int32_t flags = 0;                 // compressed all-reduce: kWorkerError | kOwnerError
  // Compressed all-reduce with a step scale (relax_step_scale_args_t): rows, cols per parameter
  // (empty: no scale), its floor and decay.
  std::vector<int64_t> scale_shapes;
  double scale_floor = 0;
  double scale_decay = 0;
  // Non-empty: this rank rejected the request locally and says why; the members that did submit
  // it fail with `rejection_code` in the round it completes instead of waiting for this rank.
  std::string rejection;
  int32_t rejection_code = RELAX_OK;

  static constexpr int32_t kWorkerError = 1;
  static constexpr int32_t kOwnerError = 2;

  // Products of `shape` unchecked: valid for descriptors that passed checked_tensor_size
  // (request validation), which every descriptor from the C ABI or a peer's validation did.
  int64_t num_elements() const;
  // Elements per dim-0 row (product of shape[1:]); 1 for scalars.
  int64_t row_elements() const;
  int64_t dim0() const { return shape.empty() ? 1 : shape[0]; }
  bool operator==(const Descriptor& other) const;
};

// Binary encoding used on the wire and as the response-cache key.
void encode_descriptor(const Descriptor& d, std::string& out);
// Decodes one descriptor starting at `pos`; advances `pos`. Returns false on malformed input.
bool decode_descriptor(const std::string& in, size_t& pos, Descriptor& d);

void encode_u32(uint32_t v, std::string& out);
void encode_i64(int64_t v, std::string& out);
void encode_string(const std::string& s, std::string& out);
bool decode_u32(const std::string& in, size_t& pos, uint32_t& v);
bool decode_i64(const std::string& in, size_t& pos, int64_t& v);
bool decode_string(const std::string& in, size_t& pos, std::string& s);

}  // namespace relax
