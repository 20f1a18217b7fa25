// A POSIX shared-memory segment that every rank of a communicator maps, created collectively.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace relax {

class SharedSegment {
 public:
  // Collective over `comm`: rank 0 creates a segment of `bytes` (its pages reserved up front, so
  // a full /dev/shm fails here rather than with SIGBUS later), every rank maps it, and the name is
  // unlinked once all have, so the memory goes with the last process that maps it. (A rank dying
  // during this call can leave the name behind.) Returns null on every rank if any rank failed,
  // with the first failure in `why`. Its exchanges are bounded by `timeout_s` (setup_wait.h): a
  // rank that does not answer makes it fail, naming that rank in `why`.
  static std::unique_ptr<SharedSegment> create(MPI_Comm comm, size_t bytes, double timeout_s, std::string& why);

  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return bytes_; }

  // Only create() can make this key, so only it builds segments (it owns the mapping's lifetime).
  class Key {
    friend class SharedSegment;
    Key() {}  // user-provided: not an aggregate, so `Key{}` outside this class does not compile
  };
  SharedSegment(Key, uint8_t* data, size_t bytes) : data_(data), bytes_(bytes) {}

 private:
  uint8_t* data_;
  size_t bytes_;
};

}  // namespace relax
