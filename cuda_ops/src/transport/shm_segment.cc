#include "transport/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <limits>
#include <random>

#include "transport/mpi_context.h"
#include "transport/setup_wait.h"

namespace relax {
namespace {

constexpr int kNameBytes = 96;
constexpr const char* kDuring = "the shared-memory segment's set-up";

// Opens (with `create`: creates and reserves) and maps the segment; returns null and sets `why`
// on failure, after removing a name it created.
uint8_t* open_and_map(const char* name, size_t bytes, bool create, std::string& why) {
  const int fd = create ? shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600) : shm_open(name, O_RDWR, 0600);
  if (fd < 0) {
    why = std::string("shm_open(") + name + ") failed: " + std::strerror(errno);
    return nullptr;
  }
  const auto fail = [&](const std::string& what) -> uint8_t* {
    why = what;
    close(fd);
    if (create) shm_unlink(name);
    return nullptr;
  };
  if (create) {
    int rc = ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
    if (rc == 0) rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (rc != 0) return fail("reserving " + std::to_string(bytes >> 20) + " MiB in /dev/shm failed: " + std::strerror(rc));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail(std::string("mmap of the shared segment failed: ") + std::strerror(errno));
  close(fd);
  return static_cast<uint8_t*>(p);
}

std::string unique_name() {
  static std::atomic<unsigned> counter{0};
  std::random_device random;
  return "/relaxlib-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" +
         std::to_string(random());
}

}  // namespace

std::unique_ptr<SharedSegment> SharedSegment::create(MPI_Comm comm, size_t bytes, double timeout_s,
                                                     std::string& why) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  char name[kNameBytes] = {};
  uint8_t* data = nullptr;
  std::string local_why;
  if (rank == 0) {
    try {  // nothing may escape before the broadcast: the other ranks wait in it
      std::strncpy(name, unique_name().c_str(), kNameBytes - 1);
      data = open_and_map(name, bytes, true, local_why);
    } catch (const std::exception& e) {
      local_why = e.what();
    }
    if (!data) name[0] = '\0';
  }
  // Bounded (setup_wait.h): a rank that never joins is named instead of holding the others.
  const Status sent = bounded_bcast(comm, name, kNameBytes, 0, timeout_s, kDuring);
  if (!sent.is_ok()) {
    if (data) {  // rank 0: nobody maps it now
      shm_unlink(name);
      munmap(data, bytes);
    }
    why = sent.message;
    return nullptr;
  }
  name[kNameBytes - 1] = '\0';
  if (rank != 0) {
    if (name[0] == '\0') {
      local_why = "rank 0 could not create it";
    } else {
      data = open_and_map(name, bytes, false, local_why);
    }
  }
  if (!data && local_why.empty()) local_why = "mapping failed";
  // Every rank has mapped (or failed) after this: the name can go.
  const bool mapped_everywhere = every_rank_succeeded(comm, local_why, why, timeout_s, kDuring);
  if (rank == 0 && name[0] != '\0') shm_unlink(name);
  if (mapped_everywhere) return std::make_unique<SharedSegment>(Key(), data, bytes);
  if (data) munmap(data, bytes);
  return nullptr;
}

SharedSegment::~SharedSegment() { munmap(data_, bytes_); }

}  // namespace relax
