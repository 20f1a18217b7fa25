// The TCP ring's meeting of neighbours (transport/ring_handshake.h) over loopback, without MPI:
// SHA-256 / HMAC against published vectors, two ranks in two threads meeting, idle connections
// that cannot hold the meeting up, and peers that do not know the key learning nothing from it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "transport/ring_handshake.h"

namespace {

using relax::RingAddress;
using relax::RingIdentity;
using relax::RingKey;
using relax::SocketFd;

std::string hex(const relax::Sha256Digest& d) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : d) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

// A non-blocking listener on 127.0.0.1 and its port (network order).
SocketFd loopback_listener(uint16_t& port) {
  SocketFd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(at);
  CHECK(bind(fd.get(), reinterpret_cast<sockaddr*>(&at), sizeof(at)) == 0);
  CHECK(listen(fd.get(), 64) == 0);
  CHECK(getsockname(fd.get(), reinterpret_cast<sockaddr*>(&at), &length) == 0);
  port = at.sin_port;
  return fd;
}

// A blocking connection to 127.0.0.1:port.
SocketFd connect_loopback(uint16_t port) {
  SocketFd fd(socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  at.sin_port = port;
  CHECK(connect(fd.get(), reinterpret_cast<sockaddr*>(&at), sizeof(at)) == 0);
  return fd;
}

RingKey key_of(uint8_t seed) {
  RingKey key{};
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(seed * 37 + i * 11 + 1);
  return key;
}

// Everything `fd` sends within `ms` (until it closes or goes quiet).
std::vector<uint8_t> drain(int fd, int ms) {
  std::vector<uint8_t> got;
  uint8_t buffer[512];
  pollfd p{fd, POLLIN, 0};
  while (poll(&p, 1, ms) > 0) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    got.insert(got.end(), buffer, buffer + n);
  }
  return got;
}

bool contains(const std::vector<uint8_t>& haystack, const uint8_t* needle, size_t n) {
  return std::search(haystack.begin(), haystack.end(), needle, needle + n) != haystack.end();
}

struct Ring2 {
  SocketFd to_right[2], from_left[2];
  std::string why[2];
};

// Ranks 0 and 1 meet (each the other's left and right neighbour); `right_of[r]` are the
// addresses rank r tries for its right neighbour.
Ring2 meet_two(int listener0, int listener1, const std::vector<RingAddress> right_of[2], const RingKey keys[2],
               const relax::MeetTimeouts& timeouts) {
  Ring2 out;
  std::thread one([&] {
    const RingIdentity me{1, 0, 0, keys[1]};
    out.why[1] = relax::meet_neighbours({listener1}, right_of[1], me, timeouts, out.to_right[1], out.from_left[1]);
  });
  const RingIdentity me{0, 1, 1, keys[0]};
  out.why[0] = relax::meet_neighbours({listener0}, right_of[0], me, timeouts, out.to_right[0], out.from_left[0]);
  one.join();
  return out;
}

}  // namespace

TEST(sha256_and_hmac_match_published_vectors) {
  const std::string abc = "abc";
  CHECK_EQ(hex(relax::sha256(reinterpret_cast<const uint8_t*>(abc.data()), abc.size())),
           std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  const std::string long_text = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";  // two blocks
  CHECK_EQ(hex(relax::sha256(reinterpret_cast<const uint8_t*>(long_text.data()), long_text.size())),
           std::string("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
  // RFC 4231 test case 2 (key "Jefe", zero-padded to the 32 bytes a ring key has: HMAC pads it to 64 anyway)
  RingKey jefe{};
  std::copy_n("Jefe", 4, jefe.begin());
  const std::string what = "what do ya want for nothing?";
  CHECK_EQ(hex(relax::hmac_sha256(jefe, reinterpret_cast<const uint8_t*>(what.data()), what.size())),
           std::string("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"));
}

// Eight connections that never say anything sit in rank 0's queue before rank 1 connects: the
// meeting still succeeds, each idle one on its own short clock (the bound only catches a hang:
// before, each held the listener for 3 s in turn, 24 s against the connector's 15).
TEST(ring_meeting_is_not_held_up_by_idle_connections) {
  uint16_t port0 = 0, port1 = 0;
  SocketFd listener0 = loopback_listener(port0), listener1 = loopback_listener(port1);
  std::vector<SocketFd> idle;
  for (int i = 0; i < 8; ++i) idle.push_back(connect_loopback(port0));
  const std::vector<RingAddress> right_of[2] = {{{htonl(INADDR_LOOPBACK), port1}}, {{htonl(INADDR_LOOPBACK), port0}}};
  const RingKey keys[2] = {key_of(1), key_of(1)};
  relax::MeetTimeouts timeouts;
  timeouts.total = 10000;
  timeouts.hello = 8000;  // longer than the meeting: an idle connection must not be waited for in turn
  const auto start = std::chrono::steady_clock::now();
  Ring2 ring = meet_two(listener0.get(), listener1.get(), right_of, keys, timeouts);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK_EQ(ring.why[0], std::string());
  CHECK_EQ(ring.why[1], std::string());
  CHECK(seconds < 8);
  // The sockets carry data the right way round.
  const char message[] = "ring";
  CHECK_EQ(send(ring.to_right[1].get(), message, 4, 0), ssize_t{4});
  char got[4] = {};
  CHECK_EQ(recv(ring.from_left[0].get(), got, 4, MSG_WAITALL), ssize_t{4});
  CHECK(std::equal(got, got + 4, message));
}

// A listener that does not know the key (another host's loopback, another job on the port)
// gets a hello and nothing derived from the key; the connector moves on to the next address,
// which is its real neighbour.
TEST(ring_connector_reveals_nothing_to_a_listener_without_the_key) {
  uint16_t port0 = 0, port1 = 0, impostor_port = 0;
  SocketFd listener0 = loopback_listener(port0), listener1 = loopback_listener(port1);
  SocketFd impostor = loopback_listener(impostor_port);
  const RingKey keys[2] = {key_of(2), key_of(2)};
  std::vector<uint8_t> heard;
  std::thread pretender([&] {  // answers like a listener, with a MAC under the wrong key
    pollfd p{impostor.get(), POLLIN, 0};
    if (poll(&p, 1, 10000) <= 0) return;
    SocketFd fd(accept(impostor.get(), nullptr, nullptr));
    heard = drain(fd.get(), 300);
    std::vector<uint8_t> reply(4 + 4 + 16 + 32, 0x5a);
    const uint32_t magic = 0x52585231;
    const int32_t rank = 1;
    std::copy_n(reinterpret_cast<const uint8_t*>(&magic), 4, reply.begin());
    std::copy_n(reinterpret_cast<const uint8_t*>(&rank), 4, reply.begin() + 4);
    send(fd.get(), reply.data(), reply.size(), MSG_NOSIGNAL);
    const std::vector<uint8_t> more = drain(fd.get(), 1000);
    heard.insert(heard.end(), more.begin(), more.end());
  });
  const std::vector<RingAddress> right_of[2] = {
      {{htonl(INADDR_LOOPBACK), impostor_port}, {htonl(INADDR_LOOPBACK), port1}},
      {{htonl(INADDR_LOOPBACK), port0}}};
  Ring2 ring = meet_two(listener0.get(), listener1.get(), right_of, keys, relax::MeetTimeouts{});
  pretender.join();
  CHECK_EQ(ring.why[0], std::string());
  CHECK_EQ(ring.why[1], std::string());
  CHECK_EQ(heard.size(), size_t{28});  // the hello alone: magic, two ranks, a nonce
  for (size_t at = 0; at + 8 <= keys[0].size(); ++at) CHECK(!contains(heard, keys[0].data() + at, 8));
}

// A connector with another key is refused (its proof fails) and the real neighbour is still
// accepted; a peer with the wrong key on both sides never connects.
TEST(ring_listener_refuses_a_connector_without_the_key) {
  uint16_t port0 = 0, port1 = 0;
  SocketFd listener0 = loopback_listener(port0), listener1 = loopback_listener(port1);
  const std::vector<RingAddress> right_of[2] = {{{htonl(INADDR_LOOPBACK), port1}}, {{htonl(INADDR_LOOPBACK), port0}}};
  const RingKey keys[2] = {key_of(3), key_of(4)};
  relax::MeetTimeouts timeouts;
  timeouts.total = 1500;
  Ring2 ring = meet_two(listener0.get(), listener1.get(), right_of, keys, timeouts);
  CHECK(!ring.why[0].empty());
  CHECK(!ring.why[1].empty());
  CHECK(!ring.from_left[0].valid() && !ring.from_left[1].valid());
  CHECK(!ring.to_right[0].valid() && !ring.to_right[1].valid());
}
