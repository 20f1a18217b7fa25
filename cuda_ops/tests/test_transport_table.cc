// The transport seam: which transport the table picks for each collective, size and set-up; the
// MPI tag ranges; and a ring step through the TCP ring's link (two "ranks" in two threads over
// socketpairs), which hands the incoming block on in order and in whole elements.
#include <sys/socket.h>
#include <sys/uio.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "check.h"
#include "collectives/collective_config.h"
#include "collectives/tcp_ring_link.h"
#include "collectives/transport_table.h"
#include "engine/config.h"
#include "transport/tags.h"

namespace {

using relax::Collective;
using relax::CollectiveConfig;
using relax::Route;
using relax::TransportSet;
using relax::TransportTable;

constexpr int64_t kMiB = 1 << 20;

// Shared memory from 1 MiB, MPI's own collectives up to 16 MiB (the defaults on one node).
CollectiveConfig config_with_shm_from(int64_t shm_min_bytes) {
  CollectiveConfig config;
  config.shm_min_bytes = shm_min_bytes;
  return config;
}

}  // namespace

TEST(transport_table_one_rank_copies_all_reduce_and_rings_the_rest) {
  const CollectiveConfig config;
  const TransportTable table(config, TransportSet{1, false, false});
  CHECK(table.choose(Collective::kAllreduce, 4096) == Route::kLocal);
  CHECK(table.choose(Collective::kReduceScatter, 4096) == Route::kRing);  // (the ring code copies for one rank)
  CHECK(table.choose(Collective::kAllgather, 4096) == Route::kRing);
  CHECK(table.choose(Collective::kAllreducePieces, 4096) == Route::kNone);
}

TEST(transport_table_shared_memory_first_from_its_threshold) {
  const CollectiveConfig config = config_with_shm_from(kMiB);
  const TransportTable table(config, TransportSet{4, true, false});
  CHECK(table.choose(Collective::kAllreduce, kMiB - 1) == Route::kMpiCollective);
  CHECK(table.choose(Collective::kAllreduce, kMiB) == Route::kSharedMemory);
  CHECK(table.choose(Collective::kAllreduce, 256 * kMiB) == Route::kSharedMemory);
  CHECK(table.choose(Collective::kReduceScatter, kMiB - 1) == Route::kRing);
  CHECK(table.choose(Collective::kReduceScatter, kMiB) == Route::kSharedMemory);
  CHECK(table.choose(Collective::kAllgather, kMiB) == Route::kSharedMemory);
  CHECK(table.choose(Collective::kAllreducePieces, kMiB) == Route::kSharedMemory);
  CHECK(table.choose(Collective::kAllreducePieces, kMiB - 1) == Route::kNone);  // MPI point-to-point ring
  // No segment mapped (another node, or the set-up failed): the threshold does not matter.
  const TransportTable without(config, TransportSet{4, false, false});
  CHECK(without.choose(Collective::kAllreduce, kMiB) == Route::kMpiCollective);
  CHECK(without.choose(Collective::kReduceScatter, kMiB) == Route::kRing);
}

TEST(transport_table_mpi_collectives_for_small_typed_messages_up_to_the_shared_threshold) {
  CollectiveConfig config;  // no shared-memory segment
  const TransportTable table(config, TransportSet{2, false, false});
  CHECK_EQ(config.mpi_allreduce_max_bytes, relax::kMpiCollectiveMaxBytes);
  CHECK_EQ(config.mpi_allgather_max_bytes, relax::kMpiCollectiveMaxBytes);
  CHECK(table.choose(Collective::kAllreduce, relax::kMpiCollectiveMaxBytes) == Route::kMpiCollective);
  CHECK(table.choose(Collective::kAllreduce, relax::kMpiCollectiveMaxBytes + 1) == Route::kRing);
  CHECK(table.choose(Collective::kAllreduce, 4096, /*mpi_typed=*/false) == Route::kRing);  // e.g. float16
  CHECK(table.choose(Collective::kAllgather, relax::kMpiCollectiveMaxBytes) == Route::kMpiCollective);
  CHECK(table.choose(Collective::kAllgather, 4096, /*mpi_typed=*/false) == Route::kRing);  // above INT_MAX bytes
  CHECK(table.choose(Collective::kReduceScatter, 4096) == Route::kRing);  // never MPI's own
  // The thresholds are read at each choice (a tuner may move them).
  config.mpi_allreduce_max_bytes = 1024;
  CHECK(table.choose(Collective::kAllreduce, 4096) == Route::kRing);
}

TEST(transport_table_pieces_ride_a_ring_link_that_takes_them_above_mpi_allreduce) {
  const CollectiveConfig config;
  const TransportTable tcp(config, TransportSet{3, false, true});
  CHECK(tcp.choose(Collective::kAllreducePieces, relax::kMpiCollectiveMaxBytes) == Route::kNone);
  CHECK(tcp.choose(Collective::kAllreducePieces, relax::kMpiCollectiveMaxBytes + 1) == Route::kRing);
  CHECK(tcp.choose(Collective::kAllreducePieces, 0) == Route::kNone);
  const TransportTable mpi(config, TransportSet{3, false, false});
  CHECK(mpi.choose(Collective::kAllreducePieces, 64 * kMiB) == Route::kNone);
  CHECK(mpi.choose(Collective::kAllreduce, 64 * kMiB) == Route::kRing);
}

TEST(transport_table_lists_its_transports_in_order) {
  const auto& entries = TransportTable::entries();
  CHECK_EQ(entries.size(), size_t{4});
  CHECK(entries[0].route == Route::kLocal);
  CHECK(entries[1].route == Route::kSharedMemory);
  CHECK(entries[2].route == Route::kMpiCollective);
  CHECK(entries[3].route == Route::kRing);
  CHECK(std::strcmp(relax::route_name(Route::kSharedMemory), "shared memory") == 0);
}

// One node: the engine's resolved thresholds are the transports' own constants (one definition).
TEST(transport_thresholds_defined_once) {
  relax::EngineConfig engine;
  engine.apply_topology_defaults(/*single_node=*/true, /*host_ranks=*/2, /*cores=*/2, /*cores_shared_somewhere=*/false);
  CHECK_EQ(engine.mpi_allreduce_max_bytes, relax::kMpiCollectiveMaxBytes);
  CHECK_EQ(engine.mpi_allgather_max_bytes, relax::kMpiCollectiveMaxBytes);
  CHECK_EQ(engine.ring_segment_bytes, relax::kRingSegmentBytes);
  CHECK_EQ(CollectiveConfig{}.segment_bytes, relax::kRingSegmentBytes);
}

TEST(mpi_tag_ranges_do_not_overlap) {
  using relax::tags::TagRange;
  CHECK(relax::tags::disjoint(relax::tags::kTagRanges, relax::tags::kTagRangeCount));
  // The layout before the tags had one owner: the pipeline's rounds from 7200 ran over the
  // direct lane's 7201-7202 and the group service's 7301-7302.
  const TagRange old_layout[] = {{7101, 7101, "ring"},       {7102, 7102, "exchange"},
                                 {7200, 32767, "pipeline"},  {7201, 7202, "direct lane"},
                                 {7301, 7302, "group service"}};
  CHECK(!relax::tags::disjoint(old_layout, 5));
  // Every fixed tag lies below the open-ended pipeline range.
  for (int i = 0; i + 1 < relax::tags::kTagRangeCount; ++i) {
    CHECK(relax::tags::kTagRanges[i].last < relax::tags::kPipelineFirst);
  }
}

// A reduce-scatter step through the TCP ring's link: both sides send megabytes at once while
// receiving; what `arrived` sees is the incoming block, in order, in whole float32 elements.
TEST(tcp_ring_link_streams_the_incoming_block_in_whole_elements) {
  int a[2] = {-1, -1}, b[2] = {-1, -1};
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, a) == 0);
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, b) == 0);
  const CollectiveConfig config;
  relax::TcpRingLink zero(std::make_unique<relax::TcpRing>(relax::SocketFd(a[0]), relax::SocketFd(b[1]), 1, 1),
                          MPI_COMM_NULL, config);
  relax::TcpRingLink one(std::make_unique<relax::TcpRing>(relax::SocketFd(b[0]), relax::SocketFd(a[1]), 0, 0),
                         MPI_COMM_NULL, config);
  CHECK(zero.takes_pieces());
  CHECK_EQ(zero.right_rank(), 1);
  const size_t n = 1'500'001;  // floats: not a whole number of pieces
  std::vector<float> from_zero(n), from_one(n);
  for (size_t i = 0; i < n; ++i) {
    from_zero[i] = static_cast<float>(i);
    from_one[i] = static_cast<float>(2 * i);
  }
  // Sent from two parts (a tensor split where it lies).
  const size_t half = n / 3;
  auto parts = [&](std::vector<float>& v) {
    return std::vector<iovec>{iovec{v.data(), half * 4}, iovec{v.data() + half, (n - half) * 4}};
  };
  std::vector<float> got_one(n);
  int64_t next_one = 0;
  bool whole_elements = true;
  relax::Status status_one;
  std::thread other([&] {
    status_one = one.exchange_streamed(parts(from_one), static_cast<int64_t>(n * 4), 4,
                                       [&](const uint8_t* data, int64_t offset, int64_t bytes) {
                                         whole_elements = whole_elements && offset == next_one && bytes % 4 == 0;
                                         std::memcpy(reinterpret_cast<uint8_t*>(got_one.data()) + offset, data,
                                                     static_cast<size_t>(bytes));
                                         next_one = offset + bytes;
                                       });
  });
  std::vector<float> got_zero(n);
  const relax::Status status_zero = zero.exchange({iovec{from_zero.data(), n * 4}}, {iovec{got_zero.data(), n * 4}});
  other.join();
  CHECK(status_zero.is_ok());
  CHECK(status_one.is_ok());
  CHECK(whole_elements);
  CHECK_EQ(next_one, static_cast<int64_t>(n * 4));
  CHECK(got_one == from_zero);
  CHECK(got_zero == from_one);
}
