// Executes negotiated responses on the engine thread: tensor fusion for all-reduce, the other
// collectives one by one, and completion of the local handles (status, callback).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/collectives.h"
#include "engine/config.h"
#include "engine/coordinator.h"
#include "engine/handles.h"
#include "engine/request.h"
#include "engine/timeline.h"

namespace relax {

// Name under which a rank's pending join() is tracked (one per rank at a time).
constexpr const char kJoinRequestName[] = "relax.join";

class Executor {
 public:
  // `retire` runs before a local request's handle completes (the engine forgets its name, so the
  // caller may reuse the name as soon as it observes completion).
  // `world_ranks` names the members (set rank i is world rank world_ranks[i]) in messages.
  Executor(Collectives& collectives, HandleTable& handles, const EngineConfig& config, Timeline& timeline,
           std::vector<int> world_ranks, std::function<void(const std::string&)> retire);

  // Executes `responses` in order; removes completed requests from `pending`.
  void run(std::vector<Response>& responses, PendingMap& pending);

 private:
  struct Item {
    const ResponseTensor* tensor;
    LocalRequest* local;  // null when this rank joined without the tensor
  };

  void run_allreduce_batch(std::vector<Item>& items);
  Status run_fused_allreduce(std::vector<Item>& items);
  Status run_allgather(Item& item, std::vector<int64_t>& shape_out);
  Status run_broadcast(Item& item);
  Status run_reducescatter(Item& item);
  Status run_alltoall(Item& item, std::vector<int64_t>& received_splits);
  Status run_compressed(Item& item);
  void* allocate_output(Item& item, const std::vector<int64_t>& shape, std::vector<uint8_t>& fallback,
                        int64_t bytes);
  void complete(Item& item, const Status& status, int64_t result = -1, std::vector<int64_t> splits = {});
  // Records phase [start, now) for every item in the timeline (no-op when it is off).
  void trace(const std::vector<Item>& items, const char* phase, double start);

  Collectives& collectives_;
  HandleTable& handles_;
  const EngineConfig& config_;
  Timeline& timeline_;
  std::vector<int> world_ranks_;
  std::function<void(const std::string&)> retire_;
  std::vector<uint8_t> fusion_buffer_;
  std::vector<uint8_t> work_buffer_;
  PendingMap* pending_ = nullptr;
};

}  // namespace relax
