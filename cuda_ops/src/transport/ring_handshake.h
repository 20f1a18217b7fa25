// How two neighbours of the TCP ring find and prove each other (tcp_ring.h), without MPI.
//
// Every rank listens, connects to its right neighbour and accepts its left one, all in one poll()
// loop: a connection that says nothing (a port scanner, a stray client) only holds its own slot
// until its own short deadline, never the setup. Both ends prove knowledge of the job's key
// (random, from rank 0 over MPI) by challenge-response, so the key never crosses the wire:
//
//   connector -> listener  hello:  magic, connector's rank, listener's rank, nonce_c
//   listener  -> connector reply:  magic, listener's rank, nonce_l, HMAC(key, "listener" | ranks | nonces)
//   connector -> listener  proof:  HMAC(key, "connector" | ranks | nonces)
//   listener  -> connector ack:    one byte, once the proof checked out
//
// The connector takes the connection only on the acknowledgement: a listener that dropped it
// unread (crowded by strangers) leaves the connector to connect again while the meeting has time.
// The listener keeps at most 64 half-open connections; when they are all taken the oldest that
// has not sent a valid hello gives way, never one that has (it may be the neighbour mid-proof),
// and a new connection is refused while every slot holds such a peer.
//
// The connector sends its proof only after the listener proved itself, so a process that happens
// to listen on the port (another host's loopback, another job) learns a nonce and a rank, nothing
// derived from the key. The two MACs carry different labels, so one side's answer is never valid
// as the other's. Fresh nonces on both sides stop replays. Traffic after the handshake is neither
// encrypted nor authenticated (docs/security.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/tcp_ring.h"

namespace relax {

using Sha256Digest = std::array<uint8_t, 32>;
using RingKey = std::array<uint8_t, 32>;

// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104) of `bytes`.
Sha256Digest sha256(const uint8_t* data, size_t bytes);
Sha256Digest hmac_sha256(const RingKey& key, const uint8_t* data, size_t bytes);

// `bytes` from the kernel's random source (getrandom); throws std::runtime_error if it fails.
void random_bytes(uint8_t* out, size_t bytes);

// One address of the right neighbour's listeners (IPv4 address and port in network order).
struct RingAddress {
  uint32_t address;
  uint16_t port;
};

// Who this rank is in the ring and the job's key.
struct RingIdentity {
  int rank;
  int right;
  int left;
  RingKey key;
};

// Timeouts of meet_neighbours (milliseconds).
struct MeetTimeouts {
  int total = 15000;     // the whole meeting: the neighbours are already listening when it starts
  int per_address = 5000;  // connect + the listener's reply, per address of the right neighbour but the last
  int hello = 3000;      // an accepted connection's hello and proof, each connection on its own clock;
                         // also how long a connector waits for the acknowledgement of its proof
};

// Connects to the right neighbour (the first of `right` that proves itself and acknowledges this
// rank's proof; addresses that closed or went quiet are tried again, those that refused or
// answered as someone else are not) and accepts the left one (the first connection that proves
// itself, acknowledged) on any of `listeners` (listening, non-blocking), concurrently. Returns ""
// with both sockets set, or why it failed.
std::string meet_neighbours(const std::vector<int>& listeners, const std::vector<RingAddress>& right,
                            const RingIdentity& me, const MeetTimeouts& timeouts, SocketFd& to_right,
                            SocketFd& from_left);

}  // namespace relax
