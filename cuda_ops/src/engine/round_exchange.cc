#include "engine/round_exchange.h"

#include <climits>
#include <cstring>

#include "transport/liveness.h"
#include "transport/mpi_context.h"
#include "util/backoff.h"
#include "util/types.h"

namespace relax {
namespace {

constexpr size_t kHeaderBytes = 8;  // uint32 flags, uint32 payload bytes

size_t bit_words(size_t cache_size) { return (cache_size + 63) / 64; }

void set_bits(uint8_t* words, const std::vector<uint32_t>& ids) {
  for (uint32_t id : ids) {
    uint64_t word;
    std::memcpy(&word, words + 8 * (id / 64), 8);
    word |= 1ull << (id % 64);
    std::memcpy(words + 8 * (id / 64), &word, 8);
  }
}

// Appends the ids whose bits are set to `ids`.
void read_bits(const uint8_t* words, size_t count, std::vector<uint32_t>& ids) {
  for (size_t w = 0; w < count; ++w) {
    uint64_t word;
    std::memcpy(&word, words + 8 * w, 8);
    while (word) {
      ids.push_back(static_cast<uint32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(word))));
      word &= word - 1;
    }
  }
}

// Buffers reused from round to round by each thread that runs rounds (the engine's, or a caller
// driving its own request), so that a round in the steady state allocates nothing here.
struct RoundBuffers {
  std::vector<uint8_t> records;
  std::vector<int> lengths, displs;
  std::vector<int64_t> counts;
};

RoundBuffers& round_buffers() {
  thread_local RoundBuffers buffers;
  return buffers;
}

// MPI counts and displacements are int: a round's payloads must fit in one all-gather.
constexpr int64_t kMaxPayloadBytes = INT_MAX;

// Waits for a non-blocking MPI request: polls for 50 us (peers usually arrive within
// microseconds), then sleeps with growing pauses so an idle rank leaves the cores to busy peers.
// Gives up after `timeout_s` (the request then stays posted: the engine stops for good).
int wait_with_backoff(MPI_Request* request, double timeout_s, bool& timed_out) {
  return poll_with_backoff([request](int& done) { return MPI_Test(request, &done, MPI_STATUS_IGNORE); }, 50,
                           /*yield=*/false, 0.25, timeout_s, timed_out);
}

// Every rank's `lengths[r]` bytes into `out` at `displs[r]`, where this rank's are already in
// place: through the shared segment when there is one, else MPI's all-gather (waiting politely,
// at most `timeout_s`; then the ranks that did not answer are named, and the all-gather stays
// posted: the caller must keep `out`, `lengths` and `displs` alive (leak them).
Status gather(MPI_Comm comm, ShmCollectives* shm, uint8_t* out, const std::vector<int>& lengths,
              const std::vector<int>& displs, double timeout_s) {
  if (shm) {
    std::vector<int64_t>& counts = round_buffers().counts;
    counts.assign(lengths.begin(), lengths.end());
    return shm->allgatherv(out, counts, 1, ShmCollectives::Wait::kRound);
  }
  if (peer_silence_noted()) return peer_silence_status();
  MPI_Request request;
  bool timed_out = false;
  int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, out, lengths.data(), displs.data(), MPI_BYTE, comm, &request);
  if (rc == MPI_SUCCESS) rc = wait_with_backoff(&request, timeout_s, timed_out);
  if (timed_out) {
    return Status::error(RELAX_ERR_STALLED, report_silence(comm, timeout_s, "a negotiation round"));
  }
  if (rc != MPI_SUCCESS) return mpi_call_failed(rc, "negotiation all-gather");
  return Status::ok();
}

// After a failed all-gather through MPI: one that timed out is still posted and may yet write
// into the round's buffers (and read its counts) if the silent peer wakes up, so they are
// leaked on purpose; the engine stops for good after this round.
Status leave_posted(const Status& status, RoundBuffers& buffers, std::vector<char>* gathered) {
  if (status.code != RELAX_ERR_STALLED) return status;
  new RoundBuffers(std::move(buffers));  // NOLINT: deliberately leaked (vectors keep their storage when moved)
  if (gathered) new std::vector<char>(std::move(*gathered));  // NOLINT: likewise
  return status;
}

}  // namespace

Status place_payload(int rank, uint32_t announced, int64_t& total, int& length, int& displacement) {
  // Checked before the all-gather whose int counts and displacements would overflow.
  if (announced == kPayloadTooLarge || total + static_cast<int64_t>(announced) > kMaxPayloadBytes) {
    return Status::error(RELAX_ERR_INVALID_ARGUMENT,
                         "negotiation round too large: rank " + std::to_string(rank) +
                             (announced == kPayloadTooLarge ? " announced more than 2 GiB of descriptors"
                                                            : " brought the round's descriptors past 2 GiB") +
                             " (too many requests, or huge names or shapes, submitted at once); submit fewer "
                             "requests between waits");
  }
  length = static_cast<int>(announced);
  displacement = static_cast<int>(total);
  total += announced;
  return Status::ok();
}

Status exchange_round(MPI_Comm comm, ShmCollectives* shm, const RankMessage& mine, size_t cache_size,
                      size_t set_count, const InlineData* inline_data, double timeout_s,
                      std::vector<RankMessage>& all) {
  int size = 1, rank = 0;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  const size_t words = bit_words(cache_size);
  const size_t set_words = bit_words(set_count);
  const size_t record = kHeaderBytes + 8 * (words + set_words);

  const std::string payload =
      (mine.descriptors.empty() && mine.stall_aborts.empty()) ? std::string() : encode_payload(mine);
  RoundBuffers& buffers = round_buffers();
  std::vector<uint8_t>& recv = buffers.records;
  recv.assign(record * static_cast<size_t>(size), 0);
  uint8_t* send = recv.data() + record * static_cast<size_t>(rank);
  // A payload too large to state goes out as a marker, so that every rank fails the round alike.
  const uint32_t payload_bytes = static_cast<int64_t>(payload.size()) > kMaxPayloadBytes
                                     ? kPayloadTooLarge
                                     : static_cast<uint32_t>(payload.size());
  const bool carry = shm && inline_data && inline_data->bytes <= shm->inline_capacity(static_cast<int64_t>(record));
  const uint32_t flags = carry ? mine.flags | kFlagInline : mine.flags;
  std::memcpy(send, &flags, 4);
  std::memcpy(send + 4, &payload_bytes, 4);
  set_bits(send + kHeaderBytes, mine.cached);
  set_bits(send + kHeaderBytes + 8 * words, mine.active_sets);
  std::vector<int>& lengths = buffers.lengths;
  std::vector<int>& displs = buffers.displs;
  lengths.assign(static_cast<size_t>(size), static_cast<int>(record));
  displs.resize(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) displs[static_cast<size_t>(r)] = r * static_cast<int>(record);
  if (shm) {
    Status status = shm->exchange_records(recv.data(), static_cast<int64_t>(record),
                                          carry ? inline_data->data : nullptr, carry ? inline_data->bytes : 0);
    if (!status.is_ok()) return status;
  } else {
    Status status = gather(comm, nullptr, recv.data(), lengths, displs, timeout_s);
    if (!status.is_ok()) return leave_posted(status, buffers, nullptr);
  }

  all.resize(static_cast<size_t>(size));  // cleared in place: the vectors keep their capacity
  for (RankMessage& m : all) {
    m.flags = 0;
    m.cached.clear();
    m.descriptors.clear();
    m.stall_aborts.clear();
    m.active_sets.clear();
  }
  int64_t total_payload = 0;
  for (int r = 0; r < size; ++r) {
    const uint8_t* rec = recv.data() + record * static_cast<size_t>(r);
    RankMessage& m = all[static_cast<size_t>(r)];
    uint32_t len = 0;
    std::memcpy(&m.flags, rec, 4);
    std::memcpy(&len, rec + 4, 4);
    Status placed = place_payload(r, len, total_payload, lengths[static_cast<size_t>(r)],
                                  displs[static_cast<size_t>(r)]);
    if (!placed.is_ok()) return placed;
    read_bits(rec + kHeaderBytes, words, m.cached);
    read_bits(rec + kHeaderBytes + 8 * words, set_words, m.active_sets);
  }
  if (total_payload == 0) return Status::ok();

  std::vector<char> gathered(static_cast<size_t>(total_payload));
  std::memcpy(gathered.data() + displs[static_cast<size_t>(rank)], payload.data(), payload.size());
  Status status = gather(comm, shm, reinterpret_cast<uint8_t*>(gathered.data()), lengths, displs, timeout_s);
  if (!status.is_ok()) return shm ? status : leave_posted(status, buffers, &gathered);
  for (int r = 0; r < size; ++r) {
    const std::string bytes(gathered.data() + displs[static_cast<size_t>(r)],
                            static_cast<size_t>(lengths[static_cast<size_t>(r)]));
    if (!decode_payload(bytes, all[static_cast<size_t>(r)])) {
      return Status::error(RELAX_ERR_INTERNAL, "malformed negotiation message from rank " + std::to_string(r));
    }
  }
  return Status::ok();
}

}  // namespace relax
