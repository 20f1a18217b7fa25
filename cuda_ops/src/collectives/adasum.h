// Adasum (Horovod's op=Adasum): an all-reduce that combines gradients pairwise by
//   a' = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b
// (orthogonal parts add, parallel parts average; a zero vector leaves the other unchanged),
// applied in a binary tree over the ranks, per tensor. The tree is Horovod's vector halving,
// distance doubling (horovod/common/ops/adasum/adasum.h): at level L = 1, 2, 4, ... each rank keeps
// half of its current segment and trades the other half with rank ^ L, so the pair combines
// each half on one rank; the dot products and norms of each tensor, spread over the 2L ranks
// that hold its fragments, are summed among them first. An all-gather in the reverse order
// then gives every rank the whole result. Like Horovod's CPU Adasum, the number of ranks must
// be a power of two (the request is refused otherwise: engine/requests/adasum_request.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "util/types.h"

namespace relax {

// The coefficients of one pairwise combination: own' = own_coeff * own + other_coeff * other.
struct AdasumCoefficients {
  double own = 1.0;
  double other = 1.0;
};

// The combination rule for vectors with dot product `dot` and squared norms `own_norm_sq`,
// `other_norm_sq`. A squared norm below sqrt(DBL_MIN) (a zero vector) leaves the other vector's
// coefficient at 1, as in Horovod, instead of dividing by zero.
AdasumCoefficients adasum_coefficients(double dot, double own_norm_sq, double other_norm_sq);

// dot = a.b, a_sq = |a|^2, b_sq = |b|^2 over `count` float16, float32 or float64 elements,
// accumulated in double (as Horovod does).
void adasum_dot_and_norms(const void* a, const void* b, int64_t count, int32_t dtype, double& dot, double& a_sq,
                          double& b_sq);

// In place: a[i] = c.own * a[i] + c.other * b[i], computed in double and rounded once (float16
// through float, as Horovod's F16C path).
void adasum_scaled_add(void* a, const void* b, int64_t count, int32_t dtype, const AdasumCoefficients& c);

// One pairwise step with `peer`: sends `send_bytes` from `send` while receiving `recv_bytes` into
// `recv`; every wait bounded (Collectives::sendrecv in the engine; threads in the unit tests).
using AdasumExchange =
    std::function<Status(const uint8_t* send, int64_t send_bytes, uint8_t* recv, int64_t recv_bytes, int peer)>;

// Adasum all-reduce in place over `buf`: the tensors laid end to end in it have `counts`
// elements each (float16, float32 or float64), and each is combined with its own dot products. `rank`
// and `size` (a power of two) are this rank's place in the communicator `exchange` talks over.
// Every rank must call it with the same counts and dtype; every rank ends with identical bits.
Status adasum_allreduce(void* buf, const std::vector<int64_t>& counts, int32_t dtype, int rank, int size,
                        const AdasumExchange& exchange);

class Collectives;
// The above over `collectives`' communicator (its bounded point-to-point steps): `src` is copied
// into `dst` first unless they are the same buffer, and `postscale` (Horovod's postscale_factor)
// multiplies the result.
Status adasum_allreduce(Collectives& collectives, const void* src, void* dst, const std::vector<int64_t>& counts,
                        int32_t dtype, double postscale);

}  // namespace relax
