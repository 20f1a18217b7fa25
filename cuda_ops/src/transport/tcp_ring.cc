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
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include "transport/mpi_context.h"

namespace relax {
namespace {

constexpr int kMaxAddresses = 8;
constexpr int kConnectTimeoutMs = 3000;  // per address of the right neighbour
constexpr int kHandshakeTimeoutMs = 15000;
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

// What a rank publishes so that its left neighbour can connect (IPv4, network byte order).
struct Endpoint {
  uint32_t addresses[kMaxAddresses];
  int32_t count;
  uint16_t port;
};

// First message on a connection, each way: who is speaking, and for which job.
struct Hello {
  uint64_t token;
  int32_t rank;
  int32_t padding;
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

bool matches_any(const char* list, const char* name, uint32_t address) {
  std::stringstream entries(list);
  std::string entry;
  while (std::getline(entries, entry, ',')) {
    if (!entry.empty() && matches(entry, name, address)) return true;
  }
  return false;
}

// This host's IPv4 addresses a peer may reach: up, not loopback, allowed by Open MPI's TCP
// interface settings if the user gave them; 127.0.0.1 last (a peer on this host; the handshake
// rejects a connection that reached another host's loopback).
std::vector<uint32_t> reachable_addresses() {
  const char* include = std::getenv("OMPI_MCA_btl_tcp_if_include");
  const char* exclude = std::getenv("OMPI_MCA_btl_tcp_if_exclude");
  std::vector<uint32_t> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* it = list; it != nullptr && static_cast<int>(out.size()) < kMaxAddresses - 1; it = it->ifa_next) {
      if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
      if (!(it->ifa_flags & IFF_UP) || (it->ifa_flags & IFF_LOOPBACK)) continue;
      const uint32_t address = reinterpret_cast<const sockaddr_in*>(it->ifa_addr)->sin_addr.s_addr;
      if (include && *include && !matches_any(include, it->ifa_name, address)) continue;
      if (exclude && *exclude && matches_any(exclude, it->ifa_name, address)) continue;
      out.push_back(address);
    }
    freeifaddrs(list);
  }
  out.push_back(htonl(INADDR_LOOPBACK));
  return out;
}

bool set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// Waits until `fd` has `events` or `timeout_ms` passes (EINTR restarts the wait); true if ready.
bool wait_for(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int rc = poll(&p, 1, timeout_ms);
    if (rc >= 0) return rc > 0;
    if (errno != EINTR) return false;
  }
}

// Sends or receives exactly `bytes` on a non-blocking socket within `timeout_ms` per wait.
bool transfer_all(int fd, void* data, size_t bytes, bool sending, int timeout_ms) {
  auto* p = static_cast<uint8_t*>(data);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = sending ? send(fd, p + done, bytes - done, MSG_NOSIGNAL) : recv(fd, p + done, bytes - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0 && !sending) {
      return false;  // closed
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (!wait_for(fd, sending ? POLLOUT : POLLIN, timeout_ms)) return false;
    } else {
      return false;
    }
  }
  return true;
}

SocketFd stream_socket() {
  SocketFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.valid()) {
    const int one = 1;
    setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

// A connection to `address`:`port` (network order), or an invalid fd.
SocketFd connect_to(uint32_t address, uint16_t port) {
  SocketFd fd = stream_socket();
  if (!fd.valid() || !set_nonblocking(fd.get())) return {};
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_addr.s_addr = address;
  peer.sin_port = port;
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&peer), sizeof(peer)) != 0) {
    if (errno != EINPROGRESS || !wait_for(fd.get(), POLLOUT, kConnectTimeoutMs)) return {};
    int error = 0;
    socklen_t length = sizeof(error);
    if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0) return {};
  }
  return fd;
}

// The setup of one rank's two connections; returns "" or why it failed.
class RingSetup {
 public:
  RingSetup(MPI_Comm comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}

  std::string run(SocketFd& to_right, SocketFd& from_left) {
    Endpoint mine{};
    std::string why = listen_on(mine);
    std::vector<Endpoint> all(static_cast<size_t>(size_));
    // Every rank joins these collectives, failed or not, so the others never wait for it.
    MPI_Allgather(&mine, sizeof(Endpoint), MPI_BYTE, all.data(), sizeof(Endpoint), MPI_BYTE, comm_);
    uint64_t token = 0;
    if (rank_ == 0) token = std::random_device{}() * 0x100000000ull + std::random_device{}();
    MPI_Bcast(&token, 1, MPI_UINT64_T, 0, comm_);
    const int right = (rank_ + 1) % size_;
    const int left = (rank_ + size_ - 1) % size_;
    for (int r = 0; r < size_ && why.empty(); ++r) {  // a rank that cannot listen fails every rank at once
      if (all[static_cast<size_t>(r)].count <= 0) why = "rank " + std::to_string(r) + " could not listen on a TCP port";
    }
    if (why.empty()) why = connect_right(all[static_cast<size_t>(right)], right, token, to_right);
    if (why.empty()) why = accept_left(left, token, from_left);
    if (why.empty()) why = confirm_right(right, token, to_right);
    return why;
  }

 private:
  // Listens on an ephemeral port and fills `mine` (count 0 on failure, which every rank sees).
  std::string listen_on(Endpoint& mine) {
    mine.count = 0;
    listener_ = stream_socket();
    if (!listener_.valid()) return errno_text("socket");
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t length = sizeof(any);
    if (bind(listener_.get(), reinterpret_cast<sockaddr*>(&any), sizeof(any)) != 0) return errno_text("bind");
    if (listen(listener_.get(), 16) != 0) return errno_text("listen");
    if (getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&any), &length) != 0) return errno_text("getsockname");
    if (!set_nonblocking(listener_.get())) return errno_text("fcntl");
    const std::vector<uint32_t> addresses = reachable_addresses();
    mine.count = static_cast<int32_t>(addresses.size());
    std::copy(addresses.begin(), addresses.end(), mine.addresses);
    mine.port = any.sin_port;
    return "";
  }

  // Connects to the first address of the right neighbour that accepts a connection, and says
  // hello (the neighbour's listen backlog takes it before it calls accept).
  std::string connect_right(const Endpoint& peer, int right, uint64_t token, SocketFd& out) {
    Hello hello{token, rank_, 0};
    for (int i = 0; i < std::min(peer.count, kMaxAddresses); ++i) {
      SocketFd fd = connect_to(peer.addresses[i], peer.port);
      if (fd.valid() && transfer_all(fd.get(), &hello, sizeof(hello), true, kConnectTimeoutMs)) {
        out = std::move(fd);
        return "";
      }
    }
    return "no address of rank " + std::to_string(right) + " accepted a connection";
  }

  // Accepts connections until one says hello from `left` with this job's token, and answers it.
  std::string accept_left(int left, uint64_t token, SocketFd& out) {
    while (wait_for(listener_.get(), POLLIN, kHandshakeTimeoutMs)) {
      SocketFd fd(accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!fd.valid()) continue;
      Hello hello{};
      if (!transfer_all(fd.get(), &hello, sizeof(hello), false, kConnectTimeoutMs)) continue;
      if (hello.token != token || hello.rank != left) continue;  // a stray connection
      Hello answer{token, rank_, 0};
      if (!transfer_all(fd.get(), &answer, sizeof(answer), true, kConnectTimeoutMs)) break;
      const int one = 1;
      setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      out = std::move(fd);
      return "";
    }
    return "rank " + std::to_string(left) + " did not connect within " +
           std::to_string(kHandshakeTimeoutMs / 1000) + " s";
  }

  // The right neighbour's answer proves the connection reached it (not another host's loopback).
  std::string confirm_right(int right, uint64_t token, SocketFd& to_right) {
    Hello answer{};
    if (!transfer_all(to_right.get(), &answer, sizeof(answer), false, kHandshakeTimeoutMs) ||
        answer.token != token || answer.rank != right) {
      return "the connection to rank " + std::to_string(right) + " was not confirmed";
    }
    return "";
  }

  MPI_Comm comm_;
  int rank_;
  int size_;
  SocketFd listener_;
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

std::unique_ptr<TcpRing> TcpRing::connect(MPI_Comm comm, std::string& why) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  SocketFd to_right, from_left;
  std::string local_why;
  try {  // nothing may escape before the agreement below: the other ranks wait in it
    local_why = RingSetup(comm, rank, size).run(to_right, from_left);
  } catch (const std::exception& e) {
    local_why = e.what();
  }
  if (!every_rank_succeeded(comm, local_why, why)) return nullptr;
  return std::make_unique<TcpRing>(std::move(to_right), std::move(from_left), (rank + 1) % size, (rank + size - 1) % size);
}

TcpRing::TcpRing(SocketFd to_right, SocketFd from_left, int right_rank, int left_rank)
    : to_right_(std::move(to_right)), from_left_(std::move(from_left)), right_rank_(right_rank), left_rank_(left_rank) {
  set_nonblocking(to_right_.get());
  set_nonblocking(from_left_.get());
}

Status TcpRing::fail(const std::string& what) {
  broken_ = what;
  return Status::error(RELAX_ERR_MPI, "TCP ring: " + what);
}

Status TcpRing::exchange(const uint8_t* send_data, int64_t send_bytes, uint8_t* recv_data, int64_t recv_bytes,
                         const std::function<void(int64_t)>& on_received) {
  return exchange({iovec{const_cast<uint8_t*>(send_data), static_cast<size_t>(send_bytes)}},
                  {iovec{recv_data, static_cast<size_t>(recv_bytes)}}, on_received);
}

Status TcpRing::exchange(const std::vector<iovec>& send_parts, const std::vector<iovec>& recv_parts,
                         const std::function<void(int64_t)>& on_received) {
  if (!broken_.empty()) return Status::error(RELAX_ERR_MPI, "TCP ring unusable since an earlier failure: " + broken_);
  IovecCursor to_send(send_parts), to_receive(recv_parts);
  const int64_t recv_bytes = to_receive.remaining();
  int64_t received = 0;
  while (to_send.remaining() > 0 || to_receive.remaining() > 0) {
    bool moved = false;
    if (to_send.remaining() > 0) {
      msghdr message = to_send.message();
      const ssize_t n = sendmsg(to_right_.get(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        to_send.advance(n);
        moved = true;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return fail("sending to rank " + std::to_string(right_rank_) + " failed (" + std::strerror(errno) +
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
        return fail("rank " + std::to_string(left_rank_) + " closed its connection; did it exit?");
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return fail("receiving from rank " + std::to_string(left_rank_) + " failed (" + std::strerror(errno) +
                    "); did it exit?");
      }
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
    if (poll(waits, n, kPollSliceMs) < 0 && errno != EINTR) return fail(errno_text("poll"));
  }
  return Status::ok();
}

}  // namespace relax
