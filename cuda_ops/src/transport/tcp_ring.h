// The ring's two links across nodes as plain TCP sockets: one connection to the right neighbour
// that only sends, one from the left neighbour that only receives.
//
// Through Open MPI's TCP transport a ring step cost more than its wire time in two ways. Both
// directions of a link share one socket, so with traffic both ways at once each direction got
// about 745 Mbit/s of a 1 Gbit/s link (raw TCP: 990). And every byte is copied in user space twice
// more (into the sender's fragment, out of the receiver's), on top of the kernel's copies: on 4
// ranks sharing 2 cores at 10 Gbit/s, all-reduce used 16 ms of CPU per step for communication
// against DDP's (gloo's) 10.5, and the step was CPU-bound. Here a step sends straight from and
// receives straight into the collective's buffers, and the waiting thread sleeps in poll().
#pragma once

#include <mpi.h>
#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/liveness.h"
#include "util/types.h"

namespace relax {

// Owns one file descriptor (closed on destruction).
class SocketFd {
 public:
  SocketFd() = default;
  explicit SocketFd(int fd) : fd_(fd) {}
  ~SocketFd();
  SocketFd(SocketFd&& other) noexcept : fd_(other.release()) {}
  SocketFd& operator=(SocketFd&& other) noexcept;
  SocketFd(const SocketFd&) = delete;
  SocketFd& operator=(const SocketFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

class TcpRing {
 public:
  // Collective over `comm` (at least 2 ranks): each rank listens on an ephemeral port of each
  // address it may use, never the wildcard (those of btl_tcp_if_include, else oob_tcp_if_include,
  // when set; 127.0.0.1 when every rank runs on this host; else its up, non-loopback interfaces
  // not in btl_tcp_if_exclude), the ranks exchange them over MPI, and each connects to its right
  // neighbour while accepting its left one, both ends proving a random job key by
  // challenge-response (ring_handshake.h; loopback only towards a neighbour on this host).
  // Returns null on every rank if any rank failed, with that rank's reason in `why`. Setup waits
  // are bounded (seconds), so a failure cannot hang it. Each exchange then waits at most
  // `timeout_s` (RELAX_OP_TIMEOUT) for its neighbours; messages name them by world rank.
  static std::unique_ptr<TcpRing> connect(MPI_Comm comm, double timeout_s, std::string& why);

  // Over connected sockets (tests use a socketpair): `to_right` only sends, `from_left` only
  // receives; `right_rank` and `left_rank` are the neighbours' ranks in the ring's communicator,
  // which messages name (name_peers() names them otherwise). An exchange gives up after
  // `timeout_s` seconds.
  TcpRing(SocketFd to_right, SocketFd from_left, int right_rank, int left_rank,
          double timeout_s = kDefaultPeerTimeoutSeconds);

  // The ranks messages name for the right and left neighbour (world ranks, where the ring's
  // communicator is a process set's).
  void name_peers(int right, int left) {
    right_name_ = right;
    left_name_ = left;
  }

  // Sends `send_bytes` to the right neighbour while receiving `recv_bytes` from the left one
  // into `recv` (which must not overlap `send`). `on_received(total)` runs whenever more bytes
  // have arrived, with the count received so far, so the caller can work on what is complete
  // while the rest is in flight. Waits in poll() between transfers. A lost connection (a peer
  // that exited) fails this call and every later one with RELAX_ERR_MPI: the streams are out of
  // step. So does an exchange not done within the timeout (a peer frozen, hung or far too slow),
  // with RELAX_ERR_STALLED naming the neighbour it waited for (which may itself be waiting for a
  // silent rank further round the ring: transport/liveness.h tells which).
  Status exchange(const uint8_t* send, int64_t send_bytes, uint8_t* recv, int64_t recv_bytes,
                  const std::function<void(int64_t)>& on_received);
  // The same exchange of messages whose bytes lie in several places: `send` is read and `recv`
  // filled part after part, in order (a fused collective's tensors where they lie).
  Status exchange(const std::vector<iovec>& send, const std::vector<iovec>& recv,
                  const std::function<void(int64_t)>& on_received);

  int right_rank() const { return right_rank_; }
  int left_rank() const { return left_rank_; }

 private:
  // Marks the ring unusable and returns the error (`code`: RELAX_ERR_MPI, or RELAX_ERR_STALLED
  // for a timeout).
  Status fail(const std::string& what, int32_t code = RELAX_ERR_MPI);
  // "waited 3 s for rank 2 to send" (and/or "rank 4 to receive"): what a timed-out exchange awaited.
  std::string timeout_text(bool sending, bool receiving) const;

  SocketFd to_right_;
  SocketFd from_left_;
  int right_rank_;
  int left_rank_;
  int right_name_;  // the ranks messages name (name_peers())
  int left_name_;
  double timeout_s_;
  std::string broken_;  // why the ring is unusable ("" while it works)
  int32_t broken_code_ = RELAX_ERR_MPI;
  int receive_low_water_ = 1;  // SO_RCVLOWAT of from_left_
};

}  // namespace relax
