// The TCP ring's meeting of neighbours (transport/ring_handshake.h) over loopback, without MPI:
// SHA-256 / HMAC against published vectors, two ranks in two threads meeting, idle connections
// that can neither hold the meeting up nor crowd the neighbour out, peers that do not know the key
// learning nothing from it, and raw-socket peers that send bad proofs or withhold the listener's
// acknowledgement.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
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
SocketFd loopback_listener(uint16_t& port, int backlog = 64) {
  SocketFd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(at);
  CHECK(bind(fd.get(), reinterpret_cast<sockaddr*>(&at), sizeof(at)) == 0);
  CHECK(listen(fd.get(), backlog) == 0);
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
  const timeval guard{10, 0};  // a raw peer's reads give up rather than hang the test
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &guard, sizeof(guard));
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

// ---- a raw peer speaking the handshake's wire format (ring_handshake.h) by hand ----

constexpr uint32_t kMagic = 0x52585231;
constexpr uint8_t kAcknowledged = 0x06;

// A MAC as the handshake computes it: HMAC(key, role NUL | connector | listener | nonce_c | nonce_l).
relax::Sha256Digest wire_mac(const RingKey& key, const char* role, int32_t connector, int32_t listener,
                             const uint8_t* connector_nonce, const uint8_t* listener_nonce) {
  std::vector<uint8_t> text(role, role + std::strlen(role) + 1);
  const auto append = [&text](const void* p, size_t n) {
    text.insert(text.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  append(&connector, 4);
  append(&listener, 4);
  append(connector_nonce, 16);
  append(listener_nonce, 16);
  return relax::hmac_sha256(key, text.data(), text.size());
}

// The hello a connector sends: magic, its rank, the listener's rank, its nonce (28 bytes).
std::vector<uint8_t> wire_hello(int32_t connector, int32_t listener, const uint8_t* nonce) {
  std::vector<uint8_t> out(28);
  std::memcpy(out.data(), &kMagic, 4);
  std::memcpy(out.data() + 4, &connector, 4);
  std::memcpy(out.data() + 8, &listener, 4);
  std::memcpy(out.data() + 12, nonce, 16);
  return out;
}

bool send_all(int fd, const void* data, size_t n) {
  return send(fd, data, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
}

// Exactly `n` bytes from a blocking socket (its receive timeout guards against a hang); empty if
// the peer closed or went quiet first.
std::vector<uint8_t> receive(int fd, size_t n) {
  std::vector<uint8_t> out(n);
  return recv(fd, out.data(), n, MSG_WAITALL) == static_cast<ssize_t>(n) ? out : std::vector<uint8_t>();
}

// True when the peer closes `fd` within `ms` without sending anything more.
bool closed_without_a_word(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, ms) <= 0) return false;
  uint8_t byte = 0;
  return recv(fd, &byte, 1, MSG_DONTWAIT) <= 0;
}

// Connections queued on a listening socket, not yet accepted (Linux reports it as tcpi_unacked).
unsigned accept_queue(int listener) {
  tcp_info info{};
  socklen_t length = sizeof(info);
  CHECK(getsockopt(listener, IPPROTO_TCP, TCP_INFO, &info, &length) == 0);
  return info.tcpi_unacked;
}

// Bytes received but not yet read on the accepted side of connections to `port` (network order),
// summed, from /proc/net/tcp: tells the test a queued connector's hello has arrived.
unsigned long pending_on_accepted(uint16_t port) {
  std::ifstream table("/proc/net/tcp");
  std::string line;
  std::getline(table, line);
  char wanted[8];
  std::snprintf(wanted, sizeof(wanted), ":%04X", ntohs(port));
  unsigned long total = 0;
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues;
    fields >> slot >> local >> remote >> state >> queues;
    if (local.size() >= 5 && local.compare(local.size() - 5, 5, wanted) == 0 && state == "01") {
      total += std::stoul(queues.substr(queues.find(':') + 1), nullptr, 16);
    }
  }
  return total;
}

// Polls `ready` every 10 ms for up to 10 s (a guard against a hang, not a timing).
template <class Ready>
bool wait_until(Ready ready) {
  for (int i = 0; i < 1000; ++i) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
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
// meeting still succeeds, each idle one on its own clock (before, each held the listener for its
// whole hello timeout in turn, longer here than the meeting itself), and the link it returns is
// the real neighbour's.
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
  Ring2 ring = meet_two(listener0.get(), listener1.get(), right_of, keys, timeouts);
  CHECK_EQ(ring.why[0], std::string());
  CHECK_EQ(ring.why[1], std::string());
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

// A raw client that knows the ranks but not the key sends a valid hello, reads the listener's
// reply (whose MAC the test recomputes, pinning the wire format) and then a bad proof: random
// bytes, the listener's own MAC reflected back, a MAC under the right key with another role
// label. The listener closes each connection without acknowledging it, and its real neighbour
// still meets it afterwards.
TEST(ring_listener_refuses_bad_proofs_and_still_meets_its_neighbour) {
  uint16_t port0 = 0, port1 = 0;
  SocketFd listener0 = loopback_listener(port0), listener1 = loopback_listener(port1);
  const RingKey key = key_of(5);
  relax::MeetTimeouts timeouts;
  timeouts.total = 10000;
  std::string why0;
  SocketFd to_right0, from_left0;
  std::thread zero([&] {
    const std::vector<RingAddress> right{{htonl(INADDR_LOOPBACK), port1}};
    why0 = relax::meet_neighbours({listener0.get()}, right, RingIdentity{0, 1, 1, key}, timeouts, to_right0, from_left0);
  });
  for (int attack = 0; attack < 3; ++attack) {
    SocketFd fd = connect_loopback(port0);
    uint8_t nonce[16];
    relax::random_bytes(nonce, sizeof(nonce));
    const std::vector<uint8_t> hello = wire_hello(1, 0, nonce);
    CHECK(send_all(fd.get(), hello.data(), hello.size()));
    const std::vector<uint8_t> reply = receive(fd.get(), 56);  // magic, rank, nonce_l, MAC (56 bytes)
    CHECK_EQ(reply.size(), size_t{56});
    if (reply.size() != 56) continue;
    const relax::Sha256Digest listener_mac = wire_mac(key, "listener", 1, 0, nonce, reply.data() + 8);
    CHECK(std::equal(listener_mac.begin(), listener_mac.end(), reply.data() + 24));
    uint8_t bad[32];
    if (attack == 0) {
      relax::random_bytes(bad, sizeof(bad));
    } else if (attack == 1) {
      std::copy_n(reply.data() + 24, 32, bad);
    } else {
      const relax::Sha256Digest wrong_role = wire_mac(key, "neighbour", 1, 0, nonce, reply.data() + 8);
      std::copy(wrong_role.begin(), wrong_role.end(), bad);
    }
    CHECK(send_all(fd.get(), bad, sizeof(bad)));
    if (!closed_without_a_word(fd.get(), 5000)) {
      check::fail(__FILE__, __LINE__, "bad proof " + std::to_string(attack) + " was not refused");
    }
  }
  SocketFd to_right1, from_left1;
  const std::vector<RingAddress> right1{{htonl(INADDR_LOOPBACK), port0}};
  const std::string why1 =
      relax::meet_neighbours({listener1.get()}, right1, RingIdentity{1, 0, 0, key}, timeouts, to_right1, from_left1);
  zero.join();
  CHECK_EQ(why0, std::string());
  CHECK_EQ(why1, std::string());
  const char message[] = "ring";
  CHECK_EQ(send(to_right1.get(), message, 4, MSG_NOSIGNAL), ssize_t{4});
  char got[4] = {};
  CHECK_EQ(recv(from_left0.get(), got, 4, MSG_WAITALL), ssize_t{4});
  CHECK(std::equal(got, got + 4, message));
}

// More than 64 connections that never speak reach rank 0's listener around its real left
// neighbour (30 queued before it, 70 after, all waiting when rank 0 starts to accept): the
// neighbour, whose hello is already there, is never the one evicted, and the ring meets.
// Before, the oldest connection gave way, which was the neighbour.
TEST(ring_listener_keeps_its_neighbour_among_more_idle_connections_than_slots) {
  uint16_t port0 = 0, port1 = 0;
  SocketFd listener0 = loopback_listener(port0, 512), listener1 = loopback_listener(port1);
  const RingKey key = key_of(6);
  relax::MeetTimeouts timeouts;
  timeouts.total = 10000;
  std::vector<SocketFd> idle;
  for (int i = 0; i < 30; ++i) idle.push_back(connect_loopback(port0));
  std::string why1;
  SocketFd to_right1, from_left1;
  std::thread one([&] {
    const std::vector<RingAddress> right{{htonl(INADDR_LOOPBACK), port0}};
    why1 = relax::meet_neighbours({listener1.get()}, right, RingIdentity{1, 0, 0, key}, timeouts, to_right1, from_left1);
  });
  // rank 1 is queued and its hello is waiting (the idle ones send nothing) before more arrive
  CHECK(wait_until([&] { return accept_queue(listener0.get()) == 31 && pending_on_accepted(port0) == 28; }));
  for (int i = 0; i < 70; ++i) idle.push_back(connect_loopback(port0));
  CHECK(wait_until([&] { return accept_queue(listener0.get()) == 101; }));
  SocketFd to_right0, from_left0;
  const std::vector<RingAddress> right0{{htonl(INADDR_LOOPBACK), port1}};
  const std::string why0 =
      relax::meet_neighbours({listener0.get()}, right0, RingIdentity{0, 1, 1, key}, timeouts, to_right0, from_left0);
  one.join();
  CHECK_EQ(why0, std::string());
  CHECK_EQ(why1, std::string());
  const char message[] = "ring";
  CHECK_EQ(send(to_right1.get(), message, 4, MSG_NOSIGNAL), ssize_t{4});
  char got[4] = {};
  CHECK_EQ(recv(from_left0.get(), got, 4, MSG_WAITALL), ssize_t{4});
  CHECK(std::equal(got, got + 4, message));
}

// The connector takes a link only once the listener acknowledged its proof: a right neighbour
// (played raw) that reads the proof and closes without acknowledging is connected to again, and
// the link returned is the second, acknowledged connection. The listener side acknowledges a
// correct proof from a raw left neighbour with one byte. Before, the connector took the first
// connection as soon as its proof was sent, and the listener sent nothing.
TEST(ring_connector_reconnects_until_its_proof_is_acknowledged) {
  uint16_t port0 = 0, port1 = 0;
  SocketFd listener0 = loopback_listener(port0), listener1 = loopback_listener(port1);
  const RingKey key = key_of(7);
  relax::MeetTimeouts timeouts;
  timeouts.total = 10000;
  std::string why0;
  SocketFd to_right0, from_left0;
  std::thread zero([&] {
    const std::vector<RingAddress> right{{htonl(INADDR_LOOPBACK), port1}};
    why0 = relax::meet_neighbours({listener0.get()}, right, RingIdentity{0, 1, 1, key}, timeouts, to_right0, from_left0);
  });
  int connections = 0;
  std::thread right_neighbour([&] {  // rank 1's listener, raw: drops the first proven connection unacknowledged
    for (int round = 0; round < 2; ++round) {
      pollfd p{listener1.get(), POLLIN, 0};
      if (poll(&p, 1, 10000) <= 0) return;
      SocketFd fd(accept4(listener1.get(), nullptr, nullptr, 0));
      const timeval guard{10, 0};
      setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &guard, sizeof(guard));
      ++connections;
      const std::vector<uint8_t> hello = receive(fd.get(), 28);
      if (hello.size() != 28) return;
      uint8_t nonce[16];
      relax::random_bytes(nonce, sizeof(nonce));
      std::vector<uint8_t> reply(56);
      const int32_t rank = 1;
      std::memcpy(reply.data(), &kMagic, 4);
      std::memcpy(reply.data() + 4, &rank, 4);
      std::memcpy(reply.data() + 8, nonce, 16);
      const relax::Sha256Digest mac = wire_mac(key, "listener", 0, 1, hello.data() + 12, nonce);
      std::copy(mac.begin(), mac.end(), reply.begin() + 24);
      if (!send_all(fd.get(), reply.data(), reply.size())) return;
      const std::vector<uint8_t> proof = receive(fd.get(), 32);
      const relax::Sha256Digest expected = wire_mac(key, "connector", 0, 1, hello.data() + 12, nonce);
      CHECK(proof.size() == 32 && std::equal(expected.begin(), expected.end(), proof.begin()));
      if (round == 0) continue;  // closes it unacknowledged
      const char acknowledged_then_data[] = "\x06ring";
      CHECK(send_all(fd.get(), acknowledged_then_data, 5));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // rank 0 reads before the close
      return;
    }
  });
  // rank 1's connector, raw, with a correct proof: rank 0's listener acknowledges it
  SocketFd fd = connect_loopback(port0);
  uint8_t nonce[16];
  relax::random_bytes(nonce, sizeof(nonce));
  const std::vector<uint8_t> hello = wire_hello(1, 0, nonce);
  CHECK(send_all(fd.get(), hello.data(), hello.size()));
  const std::vector<uint8_t> reply = receive(fd.get(), 56);
  CHECK_EQ(reply.size(), size_t{56});
  if (reply.size() == 56) {
    const relax::Sha256Digest mine = wire_mac(key, "connector", 1, 0, nonce, reply.data() + 8);
    CHECK(send_all(fd.get(), mine.data(), mine.size()));
    const std::vector<uint8_t> acknowledgement = receive(fd.get(), 1);
    CHECK(acknowledgement.size() == 1 && acknowledgement[0] == kAcknowledged);
  }
  zero.join();
  right_neighbour.join();
  CHECK_EQ(why0, std::string());
  CHECK_EQ(connections, 2);
  char got[4] = {};
  CHECK_EQ(recv(to_right0.get(), got, 4, MSG_WAITALL), ssize_t{4});
  CHECK(std::equal(got, got + 4, "ring"));
}

// The listener alone, with a raw left neighbour that cannot reconnect: its hello is queued
// before 70 silent connections, and on the same connection it still gets the reply and, for a
// correct proof, the acknowledgement (the connector's retry cannot hide an eviction here). The
// right neighbour never answers, so rank 0's meeting fails, blaming rank 1 as its right neighbour
// only.
TEST(ring_listener_never_evicts_a_connection_that_sent_a_valid_hello) {
  uint16_t port0 = 0, port1 = 0;
  SocketFd listener0 = loopback_listener(port0, 512), listener1 = loopback_listener(port1);
  const RingKey key = key_of(8);
  SocketFd genuine = connect_loopback(port0);
  uint8_t nonce[16];
  relax::random_bytes(nonce, sizeof(nonce));
  const std::vector<uint8_t> hello = wire_hello(1, 0, nonce);
  CHECK(send_all(genuine.get(), hello.data(), hello.size()));
  CHECK(wait_until([&] { return pending_on_accepted(port0) == 28; }));
  std::vector<SocketFd> idle;
  for (int i = 0; i < 70; ++i) idle.push_back(connect_loopback(port0));
  CHECK(wait_until([&] { return accept_queue(listener0.get()) == 71; }));
  relax::MeetTimeouts timeouts;
  timeouts.total = 3000;
  std::string why0;
  SocketFd to_right0, from_left0;
  std::thread zero([&] {
    const std::vector<RingAddress> right{{htonl(INADDR_LOOPBACK), port1}};
    why0 = relax::meet_neighbours({listener0.get()}, right, RingIdentity{0, 1, 1, key}, timeouts, to_right0, from_left0);
  });
  const std::vector<uint8_t> reply = receive(genuine.get(), 56);
  CHECK_EQ(reply.size(), size_t{56});
  if (reply.size() == 56) {
    const relax::Sha256Digest mine = wire_mac(key, "connector", 1, 0, nonce, reply.data() + 8);
    CHECK(send_all(genuine.get(), mine.data(), mine.size()));
    const std::vector<uint8_t> acknowledgement = receive(genuine.get(), 1);
    CHECK(acknowledgement.size() == 1 && acknowledgement[0] == kAcknowledged);
  }
  zero.join();
  CHECK_EQ(why0, std::string("rank 1 did not answer within 3 s"));
}
