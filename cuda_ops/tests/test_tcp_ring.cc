// TcpRing::exchange over socketpairs: two "ranks" in two threads, each sending to the other while
// receiving from it, as the ring does with two ranks.
#include <sys/socket.h>
#include <sys/uio.h>

#include <cstdint>
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "transport/tcp_ring.h"

namespace {

using relax::SocketFd;
using relax::TcpRing;

struct Pair {
  SocketFd a, b;
};

Pair socket_pair() {
  int fds[2] = {-1, -1};
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  return {SocketFd(fds[0]), SocketFd(fds[1])};
}

std::vector<uint8_t> pattern(size_t bytes, uint8_t seed) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(i * 31 + seed + i / 4099);
  return out;
}

}  // namespace

// Megabytes each way at once (far beyond the socket buffers, so each side must receive while it
// is still sending), unequal sizes, and progress reports that only grow and end at the total.
TEST(tcp_ring_exchange_moves_both_directions_at_once) {
  Pair zero_to_one = socket_pair(), one_to_zero = socket_pair();
  TcpRing zero(std::move(zero_to_one.a), std::move(one_to_zero.b), 1, 1);
  TcpRing one(std::move(one_to_zero.a), std::move(zero_to_one.b), 0, 0);
  const std::vector<uint8_t> from_zero = pattern(9'000'001, 1), from_one = pattern(7'340'033, 2);
  std::vector<uint8_t> at_zero(from_one.size()), at_one(from_zero.size());
  std::vector<int64_t> progress_at_one;
  relax::Status status_one;
  std::thread other([&] {
    status_one = one.exchange(from_one.data(), static_cast<int64_t>(from_one.size()), at_one.data(),
                              static_cast<int64_t>(at_one.size()), [&](int64_t n) { progress_at_one.push_back(n); });
  });
  const relax::Status status_zero = zero.exchange(from_zero.data(), static_cast<int64_t>(from_zero.size()),
                                                  at_zero.data(), static_cast<int64_t>(at_zero.size()), [](int64_t) {});
  other.join();
  CHECK(status_zero.is_ok());
  CHECK(status_one.is_ok());
  CHECK(at_zero == from_one);
  CHECK(at_one == from_zero);
  CHECK(!progress_at_one.empty());
  CHECK(std::is_sorted(progress_at_one.begin(), progress_at_one.end()));
  CHECK_EQ(progress_at_one.back(), static_cast<int64_t>(from_zero.size()));

  // One direction only (a ring step whose incoming block is empty), then the other.
  std::vector<uint8_t> small(1000);
  std::thread receiver([&] { status_one = one.exchange(nullptr, 0, small.data(), 1000, [](int64_t) {}); });
  CHECK(zero.exchange(from_zero.data(), 1000, nullptr, 0, [](int64_t) {}).is_ok());
  receiver.join();
  CHECK(status_one.is_ok());
  CHECK(std::equal(small.begin(), small.end(), from_zero.begin()));
}

// Messages whose bytes lie in many places (more parts than one sendmsg / recvmsg takes, empty
// parts among them, sizes that end mid-part on either side) arrive whole and in order.
TEST(tcp_ring_exchange_reads_and_fills_messages_in_parts) {
  Pair zero_to_one = socket_pair(), one_to_zero = socket_pair();
  TcpRing zero(std::move(zero_to_one.a), std::move(one_to_zero.b), 1, 1);
  TcpRing one(std::move(one_to_zero.a), std::move(zero_to_one.b), 0, 0);
  const std::vector<uint8_t> from_zero = pattern(3'000'017, 3), from_one = pattern(2'500'001, 4);
  // Cuts `bytes` into 150 parts of varied sizes (every tenth empty) at `base`.
  const auto cut = [](const uint8_t* base, size_t bytes) {
    std::vector<iovec> parts;
    size_t at = 0;
    for (int i = 0; i < 150 && at < bytes; ++i) {
      const size_t n = i == 149 ? bytes - at : std::min(bytes - at, i % 10 == 0 ? size_t{0} : size_t(7 + i * 397));
      parts.push_back(iovec{const_cast<uint8_t*>(base) + at, n});
      at += n;
    }
    if (at < bytes) parts.push_back(iovec{const_cast<uint8_t*>(base) + at, bytes - at});
    return parts;
  };
  std::vector<uint8_t> at_zero(from_one.size()), at_one(from_zero.size());
  relax::Status status_one;
  int64_t last_progress = 0;
  std::thread other([&] {
    status_one = one.exchange(cut(from_one.data(), from_one.size()), cut(at_one.data(), at_one.size()),
                              [&](int64_t n) { last_progress = n; });
  });
  const relax::Status status_zero =
      zero.exchange(cut(from_zero.data(), from_zero.size()), cut(at_zero.data(), at_zero.size()), [](int64_t) {});
  other.join();
  CHECK(status_zero.is_ok());
  CHECK(status_one.is_ok());
  CHECK(at_zero == from_one);
  CHECK(at_one == from_zero);
  CHECK_EQ(last_progress, static_cast<int64_t>(from_zero.size()));
}

// A peer that goes away fails the exchange naming it, and every later exchange says why.
TEST(tcp_ring_exchange_fails_when_the_peer_is_gone) {
  Pair zero_to_one = socket_pair(), one_to_zero = socket_pair();
  TcpRing zero(std::move(zero_to_one.a), std::move(one_to_zero.b), 3, 5);
  {
    SocketFd gone_in = std::move(zero_to_one.b), gone_out = std::move(one_to_zero.a);
  }  // rank 5's end of both connections closes here
  std::vector<uint8_t> in(4096);
  const relax::Status first = zero.exchange(nullptr, 0, in.data(), 4096, [](int64_t) {});
  CHECK(!first.is_ok());
  CHECK(first.message.find("rank 5") != std::string::npos);
  const relax::Status later = zero.exchange(in.data(), 16, nullptr, 0, [](int64_t) {});
  CHECK(!later.is_ok());
  CHECK(later.message.find("earlier failure") != std::string::npos);
}
