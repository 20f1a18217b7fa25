#include "collectives/adasum.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "collectives/collectives.h"
#include "collectives/reduce.h"
#include "relax/relax.h"
#include "util/half.h"

namespace relax {
namespace {

// Elements as double, and back (float16 is stored as its bits).
double load(float x) { return static_cast<double>(x); }
double load(double x) { return x; }
double load(uint16_t half) { return static_cast<double>(half_to_float(half)); }
void store(double v, float& out) { out = static_cast<float>(v); }
void store(double v, double& out) { out = v; }
void store(double v, uint16_t& half) { half = float_to_half(static_cast<float>(v)); }

template <typename T>
void dot_and_norms(const T* a, const T* b, int64_t n, double& dot, double& a_sq, double& b_sq) {
  double d = 0, x = 0, y = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double u = load(a[i]);
    const double v = load(b[i]);
    d += u * v;
    x += u * u;
    y += v * v;
  }
  dot = d;
  a_sq = x;
  b_sq = y;
}

template <typename T>
void scaled_add(T* a, const T* b, int64_t n, double ca, double cb) {
  for (int64_t i = 0; i < n; ++i) store(ca * load(a[i]) + cb * load(b[i]), a[i]);
}

bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

// A contiguous run of elements of the fused buffer.
struct Segment {
  int64_t offset = 0;
  int64_t count = 0;
};

// The elements tensor t has in `s` (its fragment there), given the tensors' offsets.
Segment fragment(const Segment& s, int64_t begin, int64_t count) {
  const int64_t lo = std::max(s.offset, begin);
  const int64_t hi = std::min(s.offset + s.count, begin + count);
  return {lo, std::max<int64_t>(0, hi - lo)};
}

}  // namespace

AdasumCoefficients adasum_coefficients(double dot, double own_norm_sq, double other_norm_sq) {
  // Horovod's threshold: below it a norm counts as zero (its vector adds nothing to project out).
  static const double kTiny = std::sqrt(DBL_MIN);
  AdasumCoefficients c;
  if (own_norm_sq >= kTiny) c.own = 1.0 - dot / own_norm_sq * 0.5;
  if (other_norm_sq >= kTiny) c.other = 1.0 - dot / other_norm_sq * 0.5;
  return c;
}

void adasum_dot_and_norms(const void* a, const void* b, int64_t count, int32_t dtype, double& dot, double& a_sq,
                          double& b_sq) {
  if (dtype == RELAX_FLOAT64) {
    dot_and_norms(static_cast<const double*>(a), static_cast<const double*>(b), count, dot, a_sq, b_sq);
  } else if (dtype == RELAX_FLOAT16) {
    dot_and_norms(static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), count, dot, a_sq, b_sq);
  } else {
    dot_and_norms(static_cast<const float*>(a), static_cast<const float*>(b), count, dot, a_sq, b_sq);
  }
}

void adasum_scaled_add(void* a, const void* b, int64_t count, int32_t dtype, const AdasumCoefficients& c) {
  if (dtype == RELAX_FLOAT64) {
    scaled_add(static_cast<double*>(a), static_cast<const double*>(b), count, c.own, c.other);
  } else if (dtype == RELAX_FLOAT16) {
    scaled_add(static_cast<uint16_t*>(a), static_cast<const uint16_t*>(b), count, c.own, c.other);
  } else {
    scaled_add(static_cast<float*>(a), static_cast<const float*>(b), count, c.own, c.other);
  }
}

Status adasum_allreduce(void* buf, const std::vector<int64_t>& counts, int32_t dtype, int rank, int size,
                        const AdasumExchange& exchange) {
  // The request's checks refuse both before any rank gets here; a caller that skipped them must
  // not run a tree whose partners do not exist.
  if (dtype != RELAX_FLOAT32 && dtype != RELAX_FLOAT64 && dtype != RELAX_FLOAT16) {
    return Status::error(RELAX_ERR_INVALID_ARGUMENT, "Adasum reduces float16, float32 and float64 tensors only");
  }
  if (!is_power_of_two(size) || rank < 0 || rank >= size) {
    return Status::error(RELAX_ERR_INTERNAL, "Adasum needs a power-of-two number of ranks, got " +
                                                 std::to_string(size));
  }
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  auto* base = static_cast<uint8_t*>(buf);
  const size_t ntensors = counts.size();
  std::vector<int64_t> begins(ntensors);
  int64_t total = 0;
  for (size_t t = 0; t < ntensors; ++t) {
    begins[t] = total;
    total += counts[t];
  }
  std::vector<uint8_t> received(static_cast<size_t>((total + 1) / 2 * esize));  // the largest half kept
  // Per tensor: [a.b, |left|^2, |right|^2], the left vector being the one of the rank whose
  // level bit is 0; summed over the ranks holding the tensor's fragments.
  std::vector<double> sums(3 * ntensors), incoming(3 * ntensors);
  const int64_t sums_bytes = static_cast<int64_t>(sums.size() * sizeof(double));
  std::vector<Segment> before;  // the segment held before each level's halving (for the gather)
  Segment held{0, total};

  for (int level = 1; level < size; level <<= 1) {
    const int peer = rank ^ level;
    const bool left = (rank & level) == 0;
    const int64_t first = held.count / 2;
    const Segment keep = left ? Segment{held.offset, first} : Segment{held.offset + first, held.count - first};
    const Segment give = left ? Segment{held.offset + first, held.count - first} : Segment{held.offset, first};
    before.push_back(held);
    Status s = exchange(base + give.offset * esize, give.count * esize, received.data(), keep.count * esize, peer);
    if (!s.is_ok()) return s;

    for (size_t t = 0; t < ntensors; ++t) {
      const Segment f = fragment(keep, begins[t], counts[t]);
      double dot = 0, own = 0, other = 0;
      if (f.count > 0) {
        adasum_dot_and_norms(base + f.offset * esize, received.data() + (f.offset - keep.offset) * esize, f.count,
                             dtype, dot, own, other);
      }
      sums[3 * t] = dot;
      sums[3 * t + 1] = left ? own : other;
      sums[3 * t + 2] = left ? other : own;
    }
    // Sum over the 2 * level ranks that split these two vectors between them (they differ from
    // this rank in the bits below 2 * level): recursive doubling with the partners of the levels
    // so far. Both sides of a step add the same two numbers, so all of them end with equal bits.
    for (int step = 1; step <= level; step <<= 1) {
      s = exchange(reinterpret_cast<const uint8_t*>(sums.data()), sums_bytes,
                   reinterpret_cast<uint8_t*>(incoming.data()), sums_bytes, rank ^ step);
      if (!s.is_ok()) return s;
      for (size_t i = 0; i < sums.size(); ++i) sums[i] += incoming[i];
    }
    for (size_t t = 0; t < ntensors; ++t) {
      const Segment f = fragment(keep, begins[t], counts[t]);
      if (f.count == 0) continue;
      const double own_sq = left ? sums[3 * t + 1] : sums[3 * t + 2];
      const double other_sq = left ? sums[3 * t + 2] : sums[3 * t + 1];
      adasum_scaled_add(base + f.offset * esize, received.data() + (f.offset - keep.offset) * esize, f.count, dtype,
                        adasum_coefficients(sums[3 * t], own_sq, other_sq));
    }
    held = keep;
  }

  // All-gather: undo the halvings, each rank trading its combined segment for the peer's.
  for (int level = size >> 1; level > 0; level >>= 1) {
    const int peer = rank ^ level;
    const bool left = (rank & level) == 0;
    const Segment whole = before.back();
    before.pop_back();
    const Segment theirs = left ? Segment{held.offset + held.count, whole.count - held.count}
                                : Segment{whole.offset, whole.count - held.count};
    Status s = exchange(base + held.offset * esize, held.count * esize, base + theirs.offset * esize,
                        theirs.count * esize, peer);
    if (!s.is_ok()) return s;
    held = whole;
  }
  return Status::ok();
}

Status adasum_allreduce(Collectives& collectives, const void* src, void* dst, const std::vector<int64_t>& counts,
                        int32_t dtype, double postscale) {
  int64_t total = 0;
  for (int64_t n : counts) total += n;
  const size_t bytes = static_cast<size_t>(total) * dtype_size(dtype);
  if (src != dst && bytes > 0) std::memcpy(dst, src, bytes);  // the tree works in place
  Status s = adasum_allreduce(
      dst, counts, dtype, collectives.rank(), collectives.size(),
      [&](const uint8_t* send, int64_t send_bytes, uint8_t* recv, int64_t recv_bytes, int peer) {
        return collectives.sendrecv(send, send_bytes, peer, recv, recv_bytes, peer);
      });
  if (s.is_ok()) scale_buffer(dst, total, dtype, postscale);
  return s;
}

}  // namespace relax
