// Adasum (collectives/adasum.h): the pairwise rule, and the vector-halving tree run by threads
// standing in for ranks (an in-memory mailbox as their point-to-point link) against a plain
// recursive tree of the rule, per tensor, for fused tensors whose halves cut through them.
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "check.h"
#include "collectives/adasum.h"
#include "relax/relax.h"

using relax::AdasumCoefficients;
using relax::Status;

namespace {

bool near(double a, double b, double tol) { return std::fabs(a - b) <= tol * (1.0 + std::fabs(b)); }

// Messages between simulated ranks, first in first out per (sender, receiver).
class Mailbox {
 public:
  Status exchange(int me, const uint8_t* send, int64_t send_bytes, uint8_t* recv, int64_t recv_bytes, int peer) {
    std::unique_lock<std::mutex> lock(mutex_);
    boxes_[{me, peer}].emplace_back(send, send + send_bytes);
    changed_.notify_all();
    auto& inbox = boxes_[{peer, me}];
    changed_.wait(lock, [&] { return !inbox.empty(); });
    std::vector<uint8_t> message = std::move(inbox.front());
    inbox.pop_front();
    if (static_cast<int64_t>(message.size()) != recv_bytes) {
      return Status::error(RELAX_ERR_INTERNAL, "message of " + std::to_string(message.size()) + " bytes, expected " +
                                                   std::to_string(recv_bytes));
    }
    if (recv_bytes > 0) std::memcpy(recv, message.data(), static_cast<size_t>(recv_bytes));
    return Status::ok();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::pair<int, int>, std::deque<std::vector<uint8_t>>> boxes_;
};

std::vector<double> combine(const std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const AdasumCoefficients c = relax::adasum_coefficients(dot, aa, bb);
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = c.own * a[i] + c.other * b[i];
  return out;
}

// The plain recursive tree over ranks [first, first + count).
std::vector<double> tree(const std::vector<std::vector<double>>& per_rank, size_t first, size_t count) {
  if (count == 1) return per_rank[first];
  return combine(tree(per_rank, first, count / 2), tree(per_rank, first + count / 2, count / 2));
}

double value(int rank, size_t tensor, int64_t i) {
  // Shared direction plus rank noise, scaled per tensor: coefficients differ between tensors.
  const double shared = std::sin(0.7 * static_cast<double>(i) + static_cast<double>(tensor));
  const double own = std::cos(1.3 * static_cast<double>(i * (rank + 2)) + 0.1 * rank);
  return static_cast<double>(tensor + 1) * (shared + 0.8 * own);
}

template <typename T>
void check_tree(int size, const std::vector<int64_t>& counts, int32_t dtype, double tol) {
  int64_t total = 0;
  for (int64_t n : counts) total += n;
  std::vector<std::vector<T>> buffers(static_cast<size_t>(size), std::vector<T>(static_cast<size_t>(total)));
  for (int r = 0; r < size; ++r) {
    int64_t at = 0;
    for (size_t t = 0; t < counts.size(); ++t) {
      for (int64_t i = 0; i < counts[t]; ++i) buffers[r][static_cast<size_t>(at++)] = static_cast<T>(value(r, t, i));
    }
  }
  // Zero on rank 0 for the last tensor: the identity of the rule.
  if (!counts.empty()) {
    for (int64_t i = total - counts.back(); i < total; ++i) buffers[0][static_cast<size_t>(i)] = 0;
  }
  std::vector<std::vector<T>> inputs = buffers;
  Mailbox mailbox;
  std::vector<Status> statuses(static_cast<size_t>(size));
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] {
      statuses[r] = relax::adasum_allreduce(
          buffers[r].data(), counts, dtype, r, size,
          [&, r](const uint8_t* send, int64_t send_bytes, uint8_t* recv, int64_t recv_bytes, int peer) {
            return mailbox.exchange(r, send, send_bytes, recv, recv_bytes, peer);
          });
    });
  }
  for (std::thread& t : ranks) t.join();
  for (const Status& s : statuses) CHECK(s.is_ok());
  int64_t at = 0;
  int wrong = 0;
  for (size_t t = 0; t < counts.size(); ++t) {
    std::vector<std::vector<double>> per_rank(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) {
      for (int64_t i = 0; i < counts[t]; ++i) per_rank[r].push_back(static_cast<double>(inputs[r][at + i]));
    }
    const std::vector<double> want = tree(per_rank, 0, static_cast<size_t>(size));
    for (int64_t i = 0; i < counts[t]; ++i) {
      wrong += !near(static_cast<double>(buffers[0][at + i]), want[i], tol);
      for (int r = 1; r < size; ++r) wrong += buffers[r][at + i] != buffers[0][at + i];  // identical bits
    }
    at += counts[t];
  }
  CHECK_EQ(wrong, 0);
}

}  // namespace

TEST(adasum_pairwise_rule) {
  // Orthogonal vectors add; equal ones average; opposite ones cancel (1.5 a - 1.5 a = 0).
  AdasumCoefficients c = relax::adasum_coefficients(0.0, 1.0, 4.0);
  CHECK(c.own == 1.0 && c.other == 1.0);
  c = relax::adasum_coefficients(2.0, 2.0, 2.0);
  CHECK(c.own == 0.5 && c.other == 0.5);
  c = relax::adasum_coefficients(-1.0, 1.0, 1.0);
  CHECK(c.own == 1.5 && c.other == 1.5);
  // a = (1, 0), b = (1, 1): a.b = 1, |a|^2 = 1, |b|^2 = 2.
  c = relax::adasum_coefficients(1.0, 1.0, 2.0);
  CHECK(c.own == 0.5 && c.other == 0.75);
  // A zero vector (norm below sqrt(DBL_MIN)) keeps the other's coefficient at 1, never divides by 0.
  c = relax::adasum_coefficients(0.0, 0.0, 3.0);
  CHECK(c.own == 1.0 && c.other == 1.0);
  c = relax::adasum_coefficients(0.0, 0.0, 0.0);
  CHECK(std::isfinite(c.own) && std::isfinite(c.other));
}

TEST(adasum_dot_norms_and_scaled_add) {
  const std::vector<float> a = {1.f, 2.f, -3.f};
  const std::vector<float> b = {4.f, 0.5f, 1.f};
  double dot = 0, aa = 0, bb = 0;
  relax::adasum_dot_and_norms(a.data(), b.data(), 3, RELAX_FLOAT32, dot, aa, bb);
  CHECK(dot == 2.0 && aa == 14.0 && bb == 17.25);
  std::vector<double> x = {1.0, -2.0};
  const std::vector<double> y = {0.5, 4.0};
  relax::adasum_scaled_add(x.data(), y.data(), 2, RELAX_FLOAT64, AdasumCoefficients{0.5, 2.0});
  CHECK(x[0] == 1.5 && x[1] == 7.0);
}

TEST(adasum_tree_matches_the_recursive_rule_per_tensor) {
  // Halves cut through tensors; tensors smaller than the ranks; an empty one.
  const std::vector<int64_t> counts = {1, 7, 100, 0, 33, 4};
  for (int size : {1, 2, 4, 8}) {
    check_tree<float>(size, counts, RELAX_FLOAT32, 1e-5);
    check_tree<double>(size, counts, RELAX_FLOAT64, 1e-12);
  }
  check_tree<float>(4, {}, RELAX_FLOAT32, 1e-5);  // nothing to reduce
  check_tree<double>(4, {3}, RELAX_FLOAT64, 1e-12);  // fewer elements than ranks
}

TEST(adasum_refuses_what_its_tree_cannot_run) {
  std::vector<float> buf(4, 1.f);
  auto never = [](const uint8_t*, int64_t, uint8_t*, int64_t, int) {
    return Status::error(RELAX_ERR_INTERNAL, "no exchange expected");
  };
  CHECK(!relax::adasum_allreduce(buf.data(), {4}, RELAX_FLOAT32, 0, 3, never).is_ok());
  CHECK(!relax::adasum_allreduce(buf.data(), {4}, RELAX_INT32, 0, 2, never).is_ok());
  CHECK(relax::adasum_allreduce(buf.data(), {4}, RELAX_FLOAT32, 0, 1, never).is_ok());  // one rank: as is
  CHECK(buf[0] == 1.f);
}
