#include "transport/ring_handshake.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <stdexcept>

namespace relax {
namespace {

// ---- SHA-256 (FIPS 180-4) ----

constexpr uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

uint32_t rotate_right(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

class Sha256 {
 public:
  void update(const uint8_t* data, size_t bytes) {
    for (size_t i = 0; i < bytes; ++i) {
      block_[filled_++] = data[i];
      if (filled_ == 64) {
        compress();
        filled_ = 0;
      }
    }
    length_ += bytes;
  }

  Sha256Digest finish() {
    const uint64_t bits = length_ * 8;
    const uint8_t one = 0x80, zero = 0;
    update(&one, 1);
    while (filled_ != 56) update(&zero, 1);
    uint8_t length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
    update(length, 8);
    Sha256Digest out{};
    for (int i = 0; i < 8; ++i) {
      for (int b = 0; b < 4; ++b) out[static_cast<size_t>(4 * i + b)] = static_cast<uint8_t>(state_[i] >> (24 - 8 * b));
    }
    return out;
  }

 private:
  void compress() {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = (uint32_t{block_[4 * i]} << 24) | (uint32_t{block_[4 * i + 1]} << 16) | (uint32_t{block_[4 * i + 2]} << 8) |
             uint32_t{block_[4 * i + 3]};
    }
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotate_right(w[i - 15], 7) ^ rotate_right(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotate_right(w[i - 2], 17) ^ rotate_right(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
    uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 = h + (rotate_right(e, 6) ^ rotate_right(e, 11) ^ rotate_right(e, 25)) + ((e & f) ^ (~e & g)) +
                          kRound[i] + w[i];
      const uint32_t t2 = (rotate_right(a, 2) ^ rotate_right(a, 13) ^ rotate_right(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    state_[0] += a;
    state_[1] += b;
    state_[2] += c;
    state_[3] += d;
    state_[4] += e;
    state_[5] += f;
    state_[6] += g;
    state_[7] += h;
  }

  uint32_t state_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  uint8_t block_[64] = {};
  size_t filled_ = 0;
  uint64_t length_ = 0;
};

// ---- the handshake's messages (fixed layouts; the ranks of one job share a byte order) ----

constexpr uint32_t kMagic = 0x52585231;  // "RXR1"
constexpr size_t kNonceBytes = 16;

struct ConnectorHello {
  uint32_t magic;
  int32_t connector;
  int32_t listener;
  uint8_t nonce[kNonceBytes];
};

struct ListenerReply {
  uint32_t magic;
  int32_t listener;
  uint8_t nonce[kNonceBytes];
  uint8_t mac[32];
};

struct ConnectorProof {
  uint8_t mac[32];
};

// The MAC one side sends: over its role, both ranks and both nonces.
Sha256Digest proof(const RingKey& key, const char* role, int32_t connector, int32_t listener,
                   const uint8_t* connector_nonce, const uint8_t* listener_nonce) {
  std::vector<uint8_t> text(role, role + std::strlen(role) + 1);
  const auto append = [&text](const void* p, size_t n) {
    text.insert(text.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  append(&connector, sizeof(connector));
  append(&listener, sizeof(listener));
  append(connector_nonce, kNonceBytes);
  append(listener_nonce, kNonceBytes);
  return hmac_sha256(key, text.data(), text.size());
}

// Compares MACs in time independent of where they differ.
bool same_mac(const uint8_t* a, const uint8_t* b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < 32; ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

using Clock = std::chrono::steady_clock;

Clock::time_point after_ms(int ms) { return Clock::now() + std::chrono::milliseconds(ms); }

int ms_until(Clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, ms));
}

// Sends a whole small message on a fresh non-blocking socket (its send buffer is empty, so a
// short write means the connection is unusable).
bool send_message(int fd, const void* data, size_t bytes) {
  const ssize_t n = send(fd, data, bytes, MSG_NOSIGNAL);
  return n == static_cast<ssize_t>(bytes);
}

// Reads into `buffer` up to `want` bytes in all; false when the peer closed or failed.
bool read_some(int fd, uint8_t* buffer, size_t want, size_t& have) {
  for (;;) {
    const ssize_t n = recv(fd, buffer + have, want - have, 0);
    if (n > 0) {
      have += static_cast<size_t>(n);
      if (have == want) return true;
      continue;
    }
    if (n == 0) return false;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  }
}

// The listener's acknowledgement, sent once it has verified the connector's proof: only then does
// the connector take the connection as its ring link. The connector already proved the listener
// on this stream, so one fixed byte says enough.
constexpr uint8_t kAcknowledged = 0x06;

// How long a connector waits before it tries its neighbour's addresses again (a listener that
// closed a connection without acknowledging it may have been crowded by strangers).
constexpr int kRetryPauseMs = 100;

// An accepted connection on its way to proving it is the left neighbour.
struct Incoming {
  SocketFd fd;
  Clock::time_point deadline;
  bool replied = false;  // a valid hello read and answered; waiting for the proof (never evicted)
  uint8_t buffer[std::max(sizeof(ConnectorHello), sizeof(ConnectorProof))] = {};
  size_t have = 0;
  ConnectorHello hello{};
  uint8_t nonce[kNonceBytes] = {};
};

// Where the connection to the right neighbour stands.
enum class Stage { connecting, hello_sent, proof_sent };

// The connection to the right neighbour, tried address after address.
struct Outgoing {
  SocketFd fd;
  size_t next = 0;  // index of the next address to try
  Stage stage = Stage::connecting;
  Clock::time_point deadline;
  uint8_t buffer[sizeof(ListenerReply)] = {};
  size_t have = 0;
  uint8_t nonce[kNonceBytes] = {};
};

// Half-open connections kept at once. When they are all taken, the oldest one that has not yet
// sent a valid hello gives way; one that has (the left neighbour may be mid-proof) never does,
// and a new connection is refused while every slot holds such a peer.
constexpr size_t kMaxIncoming = 64;

class Meeting {
 public:
  Meeting(const std::vector<int>& listeners, const std::vector<RingAddress>& right, const RingIdentity& me,
          const MeetTimeouts& timeouts)
      : listeners_(listeners),
        right_(right),
        me_(me),
        timeouts_(timeouts),
        end_(after_ms(timeouts.total)),
        ruled_out_(right.size(), false) {}

  std::string run(SocketFd& to_right, SocketFd& from_left) {
    while (!to_right_.valid() || !from_left_.valid()) {
      if (!to_right_.valid() && !out_.fd.valid() && !start_next_address()) {
        return "no address of rank " + std::to_string(me_.right) + " answered as rank " + std::to_string(me_.right) +
               " of this job (" + std::to_string(right_.size()) + " tried)";
      }
      if (Clock::now() >= end_) {
        if (!from_left_.valid()) {
          return "rank " + std::to_string(me_.left) + " did not connect and prove itself within " +
                 std::to_string(timeouts_.total / 1000) + " s";
        }
        return "rank " + std::to_string(me_.right) + " did not answer within " + std::to_string(timeouts_.total / 1000) +
               " s" + (unacknowledged_ ? " (it proved itself but never acknowledged this rank's proof)" : "");
      }
      wait_and_serve();
    }
    to_right = std::move(to_right_);
    from_left = std::move(from_left_);
    return "";
  }

 private:
  // Starts a non-blocking connect to the next address of the right neighbour, or waits to go
  // round the addresses not ruled out again; false only when every address is ruled out (it
  // refused the connection or answered as someone else).
  bool start_next_address() {
    for (;;) {
      while (out_.next < right_.size()) {
        const size_t index = out_.next++;
        if (ruled_out_[index]) continue;
        const RingAddress target = right_[index];
        SocketFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
        if (!fd.valid()) continue;
        const int one = 1;
        setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        sockaddr_in peer{};
        peer.sin_family = AF_INET;
        peer.sin_addr.s_addr = target.address;
        peer.sin_port = target.port;
        if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&peer), sizeof(peer)) != 0 && errno != EINPROGRESS) {
          ruled_out_[index] = true;
          continue;
        }
        const size_t next = out_.next;
        out_ = Outgoing();
        out_.fd = std::move(fd);
        out_.next = next;
        out_.deadline = last_untried() ? end_ : std::min(end_, after_ms(timeouts_.per_address));
        return true;
      }
      if (std::all_of(ruled_out_.begin(), ruled_out_.end(), [](bool out) { return out; })) return false;
      if (retry_at_ == Clock::time_point{}) retry_at_ = after_ms(kRetryPauseMs);
      if (Clock::now() < retry_at_) return true;  // wait_and_serve sleeps until retry_at_ at most
      retry_at_ = Clock::time_point{};
      out_.next = 0;
    }
  }

  // Whether no address after the current one is left to try in this round.
  bool last_untried() const {
    for (size_t i = out_.next; i < right_.size(); ++i) {
      if (!ruled_out_[i]) return false;
    }
    return true;
  }

  // Closes the connection to the current address; `rule_out` when that address will not answer
  // as the neighbour however often it is asked.
  void drop_outgoing(bool rule_out) {
    if (rule_out) ruled_out_[out_.next - 1] = true;
    out_.fd = SocketFd();
  }

  void wait_and_serve() {
    std::vector<pollfd> waits;
    Clock::time_point soonest = end_;
    const bool accepting = !from_left_.valid();
    if (accepting) {
      for (int fd : listeners_) waits.push_back(pollfd{fd, POLLIN, 0});
      for (const Incoming& in : incoming_) {
        waits.push_back(pollfd{in.fd.get(), POLLIN, 0});
        soonest = std::min(soonest, in.deadline);
      }
    }
    const bool connecting = !to_right_.valid() && out_.fd.valid();
    if (connecting) {
      waits.push_back(pollfd{out_.fd.get(), static_cast<short>(out_.stage == Stage::connecting ? POLLOUT : POLLIN), 0});
      soonest = std::min(soonest, out_.deadline);
    } else if (!to_right_.valid() && retry_at_ != Clock::time_point{}) {
      soonest = std::min(soonest, retry_at_);
    }
    if (poll(waits.data(), waits.size(), std::min(ms_until(soonest), 1000)) < 0 && errno != EINTR) return;
    size_t at = 0;
    if (accepting) {
      // the connections polled first (accepting may evict or add some), then the new ones
      const size_t first = listeners_.size(), known = waits.size() - first - (connecting ? 1 : 0);
      for (size_t i = 0; i < known; ++i) {
        if (waits[first + i].revents) serve(incoming_[i]);
      }
      for (size_t i = 0; i < first; ++i) {
        if (waits[i].revents && !from_left_.valid()) accept_all(listeners_[i]);
      }
      at = first + known;
      drop_finished_or_late();
    }
    if (connecting) {
      if (waits[at].revents) advance_outgoing();
      if (!to_right_.valid() && out_.fd.valid() && Clock::now() >= out_.deadline) {
        if (out_.stage == Stage::proof_sent) unacknowledged_ = true;
        drop_outgoing(out_.stage == Stage::connecting);  // nothing answered there: next address
      }
    }
  }

  void accept_all(int listener) {
    while (!from_left_.valid()) {
      SocketFd fd(accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!fd.valid()) return;
      if (!make_room()) continue;  // every slot holds a peer that sent a valid hello: refuse (close) this one
      incoming_.emplace_back();
      incoming_.back().fd = std::move(fd);
      incoming_.back().deadline = after_ms(timeouts_.hello);
      serve(incoming_.back());  // its hello may be here already: answer it now, before more arrive
    }
  }

  // Frees a slot if all are taken, by evicting the oldest connection that has not sent a valid
  // hello. Each candidate is read first, so a neighbour whose hello is already waiting in its
  // socket is answered (and kept) rather than evicted unread. False when no slot can be freed.
  bool make_room() {
    drop_finished_or_late();
    if (incoming_.size() < kMaxIncoming) return true;
    for (Incoming& in : incoming_) {
      if (in.replied) continue;
      serve(in);
      if (from_left_.valid()) return false;
      if (!in.fd.valid() || !in.replied) {
        in.fd = SocketFd();
        drop_finished_or_late();
        return true;
      }
    }
    return false;
  }

  // Reads what an accepted connection sent; answers a valid hello, takes and acknowledges a valid
  // proof; closes the connection on anything else.
  void serve(Incoming& in) {
    if (!in.fd.valid() || from_left_.valid()) return;
    const size_t want = in.replied ? sizeof(ConnectorProof) : sizeof(ConnectorHello);  // <= sizeof(in.buffer)
    if (!read_some(in.fd.get(), in.buffer, want, in.have)) {
      in.fd = SocketFd();
      return;
    }
    if (in.have < want) return;
    in.have = 0;
    if (!in.replied) {
      std::memcpy(&in.hello, in.buffer, sizeof(in.hello));
      if (in.hello.magic != kMagic || in.hello.connector != me_.left || in.hello.listener != me_.rank) {
        in.fd = SocketFd();
        return;
      }
      ListenerReply reply{kMagic, me_.rank, {}, {}};
      random_bytes(in.nonce, kNonceBytes);
      std::memcpy(reply.nonce, in.nonce, kNonceBytes);
      const Sha256Digest mac = proof(me_.key, "listener", me_.left, me_.rank, in.hello.nonce, in.nonce);
      std::memcpy(reply.mac, mac.data(), mac.size());
      if (!send_message(in.fd.get(), &reply, sizeof(reply))) in.fd = SocketFd();
      in.replied = true;
      return;
    }
    const Sha256Digest expected = proof(me_.key, "connector", me_.left, me_.rank, in.hello.nonce, in.nonce);
    if (same_mac(in.buffer, expected.data()) && send_message(in.fd.get(), &kAcknowledged, 1)) {
      from_left_ = std::move(in.fd);
    } else {
      in.fd = SocketFd();
    }
  }

  void drop_finished_or_late() {
    const Clock::time_point now = Clock::now();
    incoming_.erase(std::remove_if(incoming_.begin(), incoming_.end(),
                                   [&](const Incoming& in) { return !in.fd.valid() || now >= in.deadline; }),
                    incoming_.end());
    if (from_left_.valid()) incoming_.clear();
  }

  // Finishes the connect and sends the hello; reads the listener's reply and, if it proves the
  // key, sends this side's proof; reads the listener's acknowledgement and only then takes the
  // connection. A wrong answer rules the address out; a closed connection or a missing
  // acknowledgement leaves it to be tried again (the listener may have been crowded).
  void advance_outgoing() {
    if (out_.stage == Stage::connecting) {
      int error = 0;
      socklen_t length = sizeof(error);
      if (getsockopt(out_.fd.get(), SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0) {
        drop_outgoing(true);
        return;
      }
      ConnectorHello hello{kMagic, me_.rank, me_.right, {}};
      random_bytes(out_.nonce, kNonceBytes);
      std::memcpy(hello.nonce, out_.nonce, kNonceBytes);
      if (!send_message(out_.fd.get(), &hello, sizeof(hello))) {
        drop_outgoing(false);
        return;
      }
      out_.stage = Stage::hello_sent;
      return;
    }
    const size_t want = out_.stage == Stage::hello_sent ? sizeof(ListenerReply) : 1;
    if (!read_some(out_.fd.get(), out_.buffer, want, out_.have)) {
      if (out_.stage == Stage::proof_sent) unacknowledged_ = true;
      drop_outgoing(false);
      return;
    }
    if (out_.have < want) return;
    out_.have = 0;
    if (out_.stage == Stage::proof_sent) {
      if (out_.buffer[0] == kAcknowledged) {
        to_right_ = std::move(out_.fd);
      } else {
        drop_outgoing(true);
      }
      return;
    }
    ListenerReply reply{};
    std::memcpy(&reply, out_.buffer, sizeof(reply));
    const Sha256Digest expected = proof(me_.key, "listener", me_.rank, me_.right, out_.nonce, reply.nonce);
    if (reply.magic != kMagic || reply.listener != me_.right || !same_mac(reply.mac, expected.data())) {
      drop_outgoing(true);  // not our neighbour: it learnt a nonce, nothing of the key
      return;
    }
    ConnectorProof mine{};
    const Sha256Digest mac = proof(me_.key, "connector", me_.rank, me_.right, out_.nonce, reply.nonce);
    std::memcpy(mine.mac, mac.data(), mac.size());
    if (!send_message(out_.fd.get(), &mine, sizeof(mine))) {
      drop_outgoing(false);
      return;
    }
    out_.stage = Stage::proof_sent;
    // the listener acknowledges at once once it has read the proof; if it does not (it dropped
    // the connection unread), go round again while the meeting has time
    out_.deadline = std::min(end_, after_ms(timeouts_.hello));
  }

  const std::vector<int>& listeners_;
  const std::vector<RingAddress>& right_;
  const RingIdentity& me_;
  const MeetTimeouts& timeouts_;
  const Clock::time_point end_;
  std::vector<bool> ruled_out_;          // addresses of the right neighbour that will never answer as it
  Clock::time_point retry_at_{};         // when to go round the addresses again (zero: not waiting)
  bool unacknowledged_ = false;          // a listener proved itself but never acknowledged our proof
  std::deque<Incoming> incoming_;
  Outgoing out_;
  SocketFd to_right_, from_left_;
};

}  // namespace

Sha256Digest sha256(const uint8_t* data, size_t bytes) {
  Sha256 hash;
  hash.update(data, bytes);
  return hash.finish();
}

Sha256Digest hmac_sha256(const RingKey& key, const uint8_t* data, size_t bytes) {
  uint8_t inner_pad[64], outer_pad[64];
  for (size_t i = 0; i < 64; ++i) {
    const uint8_t k = i < key.size() ? key[i] : 0;
    inner_pad[i] = static_cast<uint8_t>(k ^ 0x36);
    outer_pad[i] = static_cast<uint8_t>(k ^ 0x5c);
  }
  Sha256 inner;
  inner.update(inner_pad, 64);
  inner.update(data, bytes);
  const Sha256Digest inner_digest = inner.finish();
  Sha256 outer;
  outer.update(outer_pad, 64);
  outer.update(inner_digest.data(), inner_digest.size());
  return outer.finish();
}

void random_bytes(uint8_t* out, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = getrandom(out + done, bytes - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

std::string meet_neighbours(const std::vector<int>& listeners, const std::vector<RingAddress>& right,
                            const RingIdentity& me, const MeetTimeouts& timeouts, SocketFd& to_right,
                            SocketFd& from_left) {
  return Meeting(listeners, right, me, timeouts).run(to_right, from_left);
}

}  // namespace relax
