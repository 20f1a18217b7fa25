// Negotiation logic: which requests are ready on every rank, in which order, and are they
// consistent. Pure bookkeeping without MPI: every rank feeds the same all-gathered round messages
// into its own Coordinator and therefore computes the same responses in the same order
// ("all-gathered readiness" — no coordinator rank, and every rank can name what went wrong).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "util/types.h"

namespace relax {

enum RoundFlags : uint32_t {
  kFlagShutdown = 1u << 0,  // this rank is shutting down
  kFlagJoin = 1u << 1,      // this rank called join() this round
  // A thread of this rank has waited for a negotiated request for RELAX_DEADLOCK_TIME, and the
  // rank has submitted and completed nothing since. When every member says so and nothing is
  // ready, no member can ever submit what the others wait for: every pending request fails.
  kFlagBlocked = 1u << 2,
  // This rank is in shutdown(): it may still serve relaxed averages (direct lane) but submits no
  // negotiated request again, so one only such ranks have not submitted fails at once.
  kFlagFinishing = 1u << 3,
  // This rank's record carries the data of its lone announced request (round_exchange.h).
  kFlagInline = 1u << 4,
};
// Flags that stay set round after round (they do not count as progress).
constexpr uint32_t kStandingFlags = kFlagBlocked | kFlagFinishing;

// What one rank says in one negotiation round.
struct RankMessage {
  uint32_t flags = 0;
  std::vector<uint32_t> cached;           // response-cache ids of newly submitted requests
  std::vector<Descriptor> descriptors;    // newly submitted requests that are not cached
  std::vector<std::string> stall_aborts;  // (rank 0 only) names to fail as stalled
  std::vector<uint32_t> active_sets;      // (global set only) other process sets with work here
};

// Serialization of the part of a RankMessage that travels in the variable-size payload
// (descriptors and stall aborts); cache ids travel as a bit vector.
std::string encode_payload(const RankMessage& message);
bool decode_payload(const std::string& bytes, RankMessage& message);

struct ResponseTensor {
  std::string name;
  std::vector<std::optional<Descriptor>> per_rank;  // empty for ranks that joined without it
  const Descriptor& first() const;                  // any present descriptor
};

struct Response {
  enum class Kind { Execute, Error, JoinDone };
  Kind kind = Kind::Execute;
  int32_t type = RELAX_REQ_ALLREDUCE;
  std::vector<ResponseTensor> tensors;  // several for an atomic group
  int32_t status = RELAX_OK;            // Error
  std::string message;                  // Error
  int32_t last_joined = -1;             // JoinDone
  std::vector<bool> joined;             // ranks joined when the response was made
};

struct StallInfo {
  std::string name;
  std::vector<int> submitted;
  std::vector<int> missing;
  double waited_seconds = 0;
};

class Coordinator {
 public:
  // `world_ranks` names the members in messages (set rank i is world rank world_ranks[i]);
  // empty means the identity. `joined_gather_nothing`: ranks that joined take part in allgather
  // (no rows) and broadcast (receiving) instead of failing them as Horovod does; it must be equal
  // on every member (the engine takes rank 0's).
  Coordinator(int size, size_t cache_capacity, std::vector<int> world_ranks = {}, bool joined_gather_nothing = false);

  int size() const { return size_; }
  // Cache id of a descriptor, or -1 when it is not cached.
  int cache_lookup(const Descriptor& d) const;
  size_t cache_size() const { return cache_.size(); }
  const Descriptor& cached_descriptor(uint32_t id) const { return cache_[id]; }

  // Applies one round (messages indexed by rank) and returns the responses, in execution order.
  std::vector<Response> process(const std::vector<RankMessage>& messages, double now_seconds);

  // True once any rank has asked to shut down.
  bool shutdown_requested() const { return shutdown_; }
  int shutdown_rank() const { return shutdown_rank_; }
  bool is_joined(int rank) const { return joined_[rank]; }
  int joined_count() const { return joined_count_; }
  // Whether any member said it is finishing (kFlagFinishing).
  bool any_finishing() const { return std::find(finishing_.begin(), finishing_.end(), true) != finishing_.end(); }

  // Requests submitted by some ranks but not all, pending longer than `age_seconds`.
  std::vector<StallInfo> stalled(double now_seconds, double age_seconds) const;
  size_t pending_count() const { return entries_.size(); }

  // Checks that all present descriptors of a tensor agree; returns the error otherwise.
  Status validate(const ResponseTensor& tensor, const std::vector<bool>& joined) const;

 private:
  struct Entry {
    uint64_t seq = 0;
    ResponseTensor tensor;
    int present = 0;
    double first_seen = 0;
    // The response-cache id every rank announced it by so far, or -1 once some rank sent a
    // descriptor or another id. All ranks on one id: validated when cached, nothing to check.
    int64_t cache_id = kNoCacheId;
  };
  static constexpr int64_t kNoCacheId = -2;

  void record(int rank, const Descriptor& d, double now, int64_t cache_id);
  bool complete(const Entry& e) const;
  void add_to_cache(const Descriptor& d);
  Response make_response(std::vector<Entry*>& members);

  // Every member is blocked and nothing completed: fails every pending request, naming who
  // submitted each and who did not.
  void fail_deadlocked(std::vector<Response>& responses);
  // Set ranks that submitted `e`, and those that did not and have not joined.
  void split_ranks(const Entry& e, std::vector<int>& submitted, std::vector<int>& missing) const;
  // The error response for pending entry `e` (its tensor moves in); the caller erases the entry.
  Response error_for(Entry& e, int32_t status, std::string message) const;
  // Fails the pending requests that only finishing ranks (kFlagFinishing) have not submitted.
  void fail_left_to_finishing_ranks(std::vector<Response>& responses);
  int world_rank(int rank) const;
  std::vector<int> world_ranks_of(const std::vector<int>& ranks) const;

  int size_;
  size_t cache_capacity_;
  std::vector<int> world_ranks_;
  uint64_t next_seq_ = 1;
  std::map<uint64_t, Entry> entries_;  // ordered by first announcement
  std::unordered_map<std::string, uint64_t> seq_by_name_;
  std::vector<Descriptor> cache_;
  std::unordered_map<std::string, uint32_t> cache_index_;      // by encoded descriptor
  std::unordered_map<std::string, uint32_t> cache_by_name_;    // latest id cached under a name
  bool joined_gather_nothing_ = false;
  std::vector<bool> joined_;
  std::vector<bool> finishing_;
  int joined_count_ = 0;
  int last_joined_ = -1;
  bool shutdown_ = false;
  int shutdown_rank_ = -1;
};

}  // namespace relax
