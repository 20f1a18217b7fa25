#include "transport/tcp_ring.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "transport/liveness.h"
#include "transport/mpi_context.h"
#include "transport/open_mpi_params.h"
#include "transport/ring_handshake.h"
#include "transport/setup_wait.h"

namespace relax {
namespace {

constexpr int kMaxAddresses = 8;
constexpr int kPollSliceMs = 1000;
constexpr int64_t kWakeBytes = 256 << 10;  // received bytes that wake a waiting exchange

// The unsent (or unfilled) rest of a message whose bytes lie in several places.
class IovecCursor {
 public:
  explicit IovecCursor(const std::vector<iovec>& parts) : parts_(parts) {
    for (const iovec& part : parts_) remaining_ += static_cast<int64_t>(part.iov_len);
    skip_empty();
  }

  int64_t remaining() const { return remaining_; }

  // A message header over the rest (at most kMaxIovecs parts of it; sendmsg / recvmsg move a
  // prefix, and the next call continues).
  msghdr message() {
    const size_t n = std::min(parts_.size() - index_, kMaxIovecs);
    window_.assign(parts_.begin() + static_cast<std::ptrdiff_t>(index_),
                   parts_.begin() + static_cast<std::ptrdiff_t>(index_ + n));
    window_[0].iov_base = static_cast<uint8_t*>(window_[0].iov_base) + offset_;
    window_[0].iov_len -= offset_;
    msghdr message{};
    message.msg_iov = window_.data();
    message.msg_iovlen = window_.size();
    return message;
  }

  void advance(ssize_t moved) {
    remaining_ -= moved;
    size_t left = static_cast<size_t>(moved);
    while (left > 0) {
      const size_t in_part = parts_[index_].iov_len - offset_;
      const size_t step = std::min(left, in_part);
      offset_ += step;
      left -= step;
      if (offset_ == parts_[index_].iov_len) {
        ++index_;
        offset_ = 0;
      }
    }
    skip_empty();
  }

 private:
  static constexpr size_t kMaxIovecs = 64;

  void skip_empty() {
    while (index_ < parts_.size() && parts_[index_].iov_len == offset_) {
      ++index_;
      offset_ = 0;
    }
  }

  const std::vector<iovec>& parts_;
  size_t index_ = 0;
  size_t offset_ = 0;  // bytes of parts_[index_] already moved
  int64_t remaining_ = 0;
  std::vector<iovec> window_;
};

// Which machine a rank runs on: host name and kernel boot id (containers of one name on two
// machines differ in the latter). Loopback is tried only between ranks that share both.
struct HostId {
  char name[64];
  char boot[40];

  bool operator==(const HostId& other) const {
    return std::memcmp(name, other.name, sizeof(name)) == 0 && std::memcmp(boot, other.boot, sizeof(boot)) == 0;
  }
};

HostId this_host() {
  HostId id{};
  gethostname(id.name, sizeof(id.name) - 1);
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string text;
  std::getline(boot, text);
  std::strncpy(id.boot, text.c_str(), sizeof(id.boot) - 1);
  return id;
}

// What a rank publishes so that its left neighbour can connect: one listener per address (IPv4
// address and port in network order).
struct Endpoint {
  uint32_t addresses[kMaxAddresses];
  uint16_t ports[kMaxAddresses];
  int32_t count;
};

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// Whether `address` (network order) of interface `name` matches one entry of an Open MPI
// interface list: a name ("eth0") or a CIDR block ("10.0.0.0/8").
bool matches(const std::string& entry, const char* name, uint32_t address) {
  const size_t slash = entry.find('/');
  if (slash == std::string::npos) return entry == name;
  in_addr network{};
  if (inet_pton(AF_INET, entry.substr(0, slash).c_str(), &network) != 1) return false;
  const int bits = std::atoi(entry.c_str() + slash + 1);
  if (bits <= 0) return true;
  const uint32_t mask = bits >= 32 ? 0xffffffffu : ~((1u << (32 - bits)) - 1);
  return (ntohl(address) & mask) == (ntohl(network.s_addr) & mask);
}

bool matches_any(const std::string& list, const char* name, uint32_t address) {
  std::stringstream entries(list);
  std::string entry;
  while (std::getline(entries, entry, ',')) {
    if (!entry.empty() && matches(entry, name, address)) return true;
  }
  return false;
}

// The interfaces the user told MPI to use: btl_tcp_if_include, else oob_tcp_if_include ("" if neither).
std::string included_interfaces() {
  const std::string btl = env_or("OMPI_MCA_btl_tcp_if_include", "");
  return btl.empty() ? env_or("OMPI_MCA_oob_tcp_if_include", "") : btl;
}

// The IPv4 addresses this rank listens on, each with its own listener, never the wildcard:
// those of the interfaces MPI was told to use when the user named some (loopback only if named);
// else loopback alone when every rank runs on this host; else every up, non-loopback interface
// that btl_tcp_if_exclude does not exclude.
std::vector<uint32_t> listen_addresses(bool one_host) {
  const std::string include = included_interfaces();
  const std::string exclude = env_or("OMPI_MCA_btl_tcp_if_exclude", "");
  if (include.empty() && one_host) return {htonl(INADDR_LOOPBACK)};
  std::vector<uint32_t> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* it = list; it != nullptr && static_cast<int>(out.size()) < kMaxAddresses; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET || !(it->ifa_flags & IFF_UP)) continue;
    const uint32_t address = reinterpret_cast<const sockaddr_in*>(it->ifa_addr)->sin_addr.s_addr;
    if (include.empty() ? (it->ifa_flags & IFF_LOOPBACK) != 0 : !matches_any(include, it->ifa_name, address)) continue;
    if (!exclude.empty() && matches_any(exclude, it->ifa_name, address)) continue;
    if (std::find(out.begin(), out.end(), address) == out.end()) out.push_back(address);
  }
  freeifaddrs(list);
  return out;
}

std::string dotted(uint32_t address) {
  char text[INET_ADDRSTRLEN] = {0};
  in_addr a{};
  a.s_addr = address;
  inet_ntop(AF_INET, &a, text, sizeof(text));
  return text;
}

bool set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

bool is_loopback(uint32_t address) { return (ntohl(address) >> 24) == 127; }

// The setup of one rank's two connections; returns "" or why it failed.
class RingSetup {
 public:
  RingSetup(MPI_Comm comm, int rank, int size, double timeout_s)
      : comm_(comm), rank_(rank), size_(size), timeout_s_(timeout_s) {}

  // Returns "" or why it failed; `stalled` is set when a peer did not answer an exchange (then
  // the reason names it and no further exchange is tried).
  std::string run(SocketFd& to_right, SocketFd& from_left, bool& stalled) {
    // Every rank joins these exchanges, failed or not, so the others never wait for it; each is
    // bounded by the peer timeout (setup_wait.h), so a rank that never joins is named.
    stalled = false;
    const HostId mine_host = this_host();
    std::vector<HostId> hosts(static_cast<size_t>(size_));
    Status s = bounded_allgather(comm_, &mine_host, sizeof(HostId), hosts.data(), timeout_s_, kDuring);
    if (!s.is_ok()) return failed_exchange(s, stalled);
    const bool one_host = std::all_of(hosts.begin(), hosts.end(), [&](const HostId& h) { return h == mine_host; });
    Endpoint mine{};
    std::string why = listen_on(one_host, mine);
    std::vector<Endpoint> all(static_cast<size_t>(size_));
    s = bounded_allgather(comm_, &mine, sizeof(Endpoint), all.data(), timeout_s_, kDuring);
    if (!s.is_ok()) return failed_exchange(s, stalled);
    // The key proves membership in this job (ring_handshake.h); it travels only over MPI.
    RingIdentity me{rank_, (rank_ + 1) % size_, (rank_ + size_ - 1) % size_, {}};
    if (rank_ == 0) random_bytes(me.key.data(), me.key.size());
    s = bounded_bcast(comm_, me.key.data(), static_cast<int>(me.key.size()), 0, timeout_s_, kDuring);
    if (!s.is_ok()) return failed_exchange(s, stalled);
    for (int r = 0; r < size_ && why.empty(); ++r) {  // a rank that cannot listen fails every rank at once
      if (all[static_cast<size_t>(r)].count <= 0) why = "rank " + std::to_string(r) + " could not listen on a TCP port";
    }
    if (!why.empty()) return why;
    const Endpoint& right = all[static_cast<size_t>(me.right)];
    const bool right_is_here = hosts[static_cast<size_t>(me.right)] == mine_host;
    std::vector<RingAddress> targets;
    for (int i = 0; i < std::min(right.count, kMaxAddresses); ++i) {
      // another machine's loopback address would reach a listener on this one
      if (is_loopback(right.addresses[i]) && !right_is_here) continue;
      targets.push_back(RingAddress{right.addresses[i], right.ports[i]});
    }
    if (targets.empty()) {
      return "rank " + std::to_string(me.right) + " listens only on loopback, on another host (check " +
             "btl_tcp_if_include)";
    }
    std::vector<int> fds;
    for (const SocketFd& fd : listeners_) fds.push_back(fd.get());
    return meet_neighbours(fds, targets, me, MeetTimeouts{}, to_right, from_left);
  }

 private:
  // Listens on an ephemeral port of each address of listen_addresses() and fills `mine` (count 0
  // on failure, which every rank sees).
  std::string listen_on(bool one_host, Endpoint& mine) {
    mine.count = 0;
    const std::vector<uint32_t> addresses = listen_addresses(one_host);
    if (addresses.empty()) {
      const std::string include = included_interfaces();
      return include.empty() ? "no IPv4 interface is up to listen on"
                             : "no IPv4 address of this host matches the interfaces MPI was told to use (" + include + ")";
    }
    for (const uint32_t address : addresses) {
      SocketFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (!fd.valid()) return errno_text("socket");
      sockaddr_in at{};
      at.sin_family = AF_INET;
      at.sin_addr.s_addr = address;
      socklen_t length = sizeof(at);
      if (bind(fd.get(), reinterpret_cast<sockaddr*>(&at), sizeof(at)) != 0) return errno_text(("bind " + dotted(address)).c_str());
      if (listen(fd.get(), 64) != 0) return errno_text("listen");
      if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&at), &length) != 0) return errno_text("getsockname");
      mine.addresses[listeners_.size()] = address;
      mine.ports[listeners_.size()] = at.sin_port;
      listeners_.push_back(std::move(fd));
    }
    mine.count = static_cast<int32_t>(listeners_.size());
    return "";
  }

  static constexpr const char* kDuring = "the TCP ring's set-up";

  static std::string failed_exchange(const Status& s, bool& stalled) {
    stalled = s.code == RELAX_ERR_STALLED;
    return s.message;
  }

  MPI_Comm comm_;
  int rank_;
  int size_;
  double timeout_s_;
  std::vector<SocketFd> listeners_;
};

}  // namespace

SocketFd::~SocketFd() {
  if (fd_ >= 0) close(fd_);
}

SocketFd& SocketFd::operator=(SocketFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.release();
  }
  return *this;
}

std::unique_ptr<TcpRing> TcpRing::connect(MPI_Comm comm, double timeout_s, std::string& why) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  SocketFd to_right, from_left;
  std::string local_why;
  bool stalled = false;
  try {  // nothing may escape before the agreement below: the other ranks wait in it
    local_why = RingSetup(comm, rank, size, timeout_s).run(to_right, from_left, stalled);
  } catch (const std::exception& e) {
    local_why = e.what();
  }
  if (stalled) {  // a peer did not answer: no agreement can be reached with it
    why = local_why;
    return nullptr;
  }
  if (!every_rank_succeeded(comm, local_why, why, timeout_s, "the TCP ring's set-up")) return nullptr;
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  auto ring = std::make_unique<TcpRing>(std::move(to_right), std::move(from_left), right, left, timeout_s);
  const std::vector<int> world = world_ranks_of(comm, {right, left});  // a process set's ranks are not the world's
  ring->name_peers(world[0], world[1]);
  return ring;
}

TcpRing::TcpRing(SocketFd to_right, SocketFd from_left, int right_rank, int left_rank, double timeout_s)
    : to_right_(std::move(to_right)),
      from_left_(std::move(from_left)),
      right_rank_(right_rank),
      left_rank_(left_rank),
      right_name_(right_rank),
      left_name_(left_rank),
      timeout_s_(timeout_s) {
  set_nonblocking(to_right_.get());
  set_nonblocking(from_left_.get());
}

Status TcpRing::fail(const std::string& what, int32_t code) {
  broken_ = what;
  broken_code_ = code;
  return Status::error(code, "TCP ring: " + what);
}

std::string TcpRing::timeout_text(bool sending, bool receiving) const {
  std::string whom;
  if (receiving) whom = "rank " + std::to_string(left_name_) + " to send";
  if (sending) whom += std::string(receiving ? " and " : "") + "rank " + std::to_string(right_name_) + " to receive";
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g", timeout_s_);
  return "waited " + std::string(seconds) + " s for " + whom;
}

Status TcpRing::exchange(const uint8_t* send_data, int64_t send_bytes, uint8_t* recv_data, int64_t recv_bytes,
                         const std::function<void(int64_t)>& on_received) {
  return exchange({iovec{const_cast<uint8_t*>(send_data), static_cast<size_t>(send_bytes)}},
                  {iovec{recv_data, static_cast<size_t>(recv_bytes)}}, on_received);
}

Status TcpRing::exchange(const std::vector<iovec>& send_parts, const std::vector<iovec>& recv_parts,
                         const std::function<void(int64_t)>& on_received) {
  if (!broken_.empty()) return Status::error(broken_code_, "TCP ring unusable since an earlier failure: " + broken_);
  IovecCursor to_send(send_parts), to_receive(recv_parts);
  const int64_t recv_bytes = to_receive.remaining();
  int64_t received = 0;
  // The whole exchange is bounded, not each wait: a peer that trickles bytes must not hold it
  // longer than a silent one.
  const double deadline = steady_seconds() + timeout_s_;
  while (to_send.remaining() > 0 || to_receive.remaining() > 0) {
    bool moved = false;
    if (to_send.remaining() > 0) {
      msghdr message = to_send.message();
      const ssize_t n = sendmsg(to_right_.get(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        to_send.advance(n);
        moved = true;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return fail("sending to rank " + std::to_string(right_name_) + " failed (" + std::strerror(errno) +
                    "); did it exit?");
      }
    }
    if (to_receive.remaining() > 0) {
      msghdr message = to_receive.message();
      const ssize_t n = recvmsg(from_left_.get(), &message, MSG_DONTWAIT);
      if (n > 0) {
        to_receive.advance(n);
        received += n;
        moved = true;
        on_received(received);
      } else if (n == 0) {
        return fail("rank " + std::to_string(left_name_) + " closed its connection; did it exit?");
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return fail("receiving from rank " + std::to_string(left_name_) + " failed (" + std::strerror(errno) +
                    "); did it exit?");
      }
    }
    if (peer_silence_noted()) {  // a lost process (failure_watch.h) or a silence found by another lane
      const Status noted = peer_silence_status();
      return fail(noted.message, noted.code);
    }
    if (steady_seconds() >= deadline) {  // the streams are out of step now: the ring is unusable
      return fail(timeout_text(to_send.remaining() > 0, received < recv_bytes), RELAX_ERR_STALLED);
    }
    if (moved) continue;
    // Wake for a useful amount, not for every packet: over a slow link each wake-up would bring
    // a few KiB, and the wake-ups cost more CPU than the copies.
    const int low_water = static_cast<int>(std::min<int64_t>(recv_bytes - received, kWakeBytes));
    if (received < recv_bytes && low_water != receive_low_water_) {
      setsockopt(from_left_.get(), SOL_SOCKET, SO_RCVLOWAT, &low_water, sizeof(low_water));
      receive_low_water_ = low_water;
    }
    pollfd waits[2];
    nfds_t n = 0;
    if (to_send.remaining() > 0) waits[n++] = pollfd{to_right_.get(), POLLOUT, 0};
    if (received < recv_bytes) waits[n++] = pollfd{from_left_.get(), POLLIN, 0};
    const double left_s = std::max(0.0, deadline - steady_seconds());
    const int slice_ms = static_cast<int>(std::min<double>(kPollSliceMs, std::ceil(left_s * 1e3)));
    if (poll(waits, n, slice_ms) < 0 && errno != EINTR) return fail(errno_text("poll"));
  }
  return Status::ok();
}

}  // namespace relax
