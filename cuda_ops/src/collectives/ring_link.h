// The transport interface of the ring collectives: one rank's link to its two ring neighbours.
// A ring step sends to the right neighbour while receiving from the left one; that is all the
// ring reduce-scatter, all-gather and all-reduce (collectives.cc) ask of a transport, so they are
// written once against this class. Implementations: MPI point-to-point (mpi_link.h) and the TCP
// ring's own sockets (tcp_ring_link.h). A link is made for one communicator and peer set
// (Collectives::rebind makes new ones for a new set of ranks); its tags, segment sizes and
// staging buffers are its own. Buffers are host memory (the CUDA kernels do not plug in here:
// codecs/cuda_codec.cuh says why).
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "util/types.h"

namespace relax {

class RingLink {
 public:
  // Bytes [offset, offset + bytes) of the incoming message, at `data` (valid during the call only).
  using Arrived = std::function<void(const uint8_t* data, int64_t offset, int64_t bytes)>;

  virtual ~RingLink() = default;

  // "MPI point-to-point", "TCP ring": for messages and logs.
  virtual const char* name() const = 0;
  // The neighbours' ranks in the communicator.
  virtual int right_rank() const = 0;
  virtual int left_rank() const = 0;
  // Whether a message may lie in several parts (tensors sent from and received into where they
  // lie); false: exchange() and exchange_streamed() take one part each way.
  virtual bool takes_pieces() const = 0;

  // Sends `send` (its parts in order) to the right neighbour while receiving `recv` (filled part
  // after part) from the left one. `recv` must not overlap `send`.
  virtual Status exchange(const std::vector<iovec>& send, const std::vector<iovec>& recv) = 0;
  // Sends `send` to the right neighbour while receiving `recv_bytes` from the left one into the
  // link's own staging: `arrived` sees them in order, in runs of whole `unit`s (an element), each
  // as soon as it is complete while the rest is still in flight (a reduce-scatter step reduces
  // them there). A staged run is valid only during its `arrived` call.
  virtual Status exchange_streamed(const std::vector<iovec>& send, int64_t recv_bytes, int64_t unit,
                                   const Arrived& arrived) = 0;
};

}  // namespace relax
