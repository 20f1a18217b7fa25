// Executes negotiated responses on the engine thread: tensor fusion for all-reduce, the other
// kinds one by one through their run functions (engine/requests/), and completion of the local
// handles (status, callback).
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
#include "engine/request_kind.h"
#include "engine/timeline.h"

namespace relax {

class Executor {
 public:
  // `retire` runs before a local request's handle completes (the engine forgets its name, so the
  // caller may reuse the name as soon as it observes completion).
  // `world_ranks` names the members (set rank i is world rank world_ranks[i]) in messages.
  Executor(Collectives& collectives, HandleTable& handles, const EngineConfig& config, Timeline& timeline,
           std::vector<int> world_ranks, std::function<void(const std::string&)> retire);

  // Executes `responses` in order; removes completed requests from `pending`.
  void run(std::vector<Response>& responses, PendingMap& pending);
  // Completes the lone all-reduce in `pending` from the data every member carried in the round
  // that announced it (Engine::run_round decides when; see round_exchange.h).
  void run_inline_allreduce(PendingMap& pending);
  // Runs one bucket of the fast path (engine_fast_path.cc): `members` are this rank's requests for
  // the bucket's tensors in schedule order, null where this rank has none (it is leaving the
  // schedule: `leaving`). The tensors are all-reduced through the fusion buffer with one more
  // element, 1 from each rank that is leaving and 0 from the others. When that element sums to 0
  // every rank ran the bucket with its real data: the results are copied out and the requests
  // complete. Otherwise every rank learns together that some rank left; nothing is copied out (the
  // inputs are intact: the requests are negotiated again) and `left` is set. A failed collective
  // fails the requests it held.
  Status run_fast_bucket(const std::vector<LocalRequest*>& members, const std::vector<const Descriptor*>& descs,
                         bool leaving, bool& left);

 private:
  using Item = ExecItem;

  void run_allreduce_batch(std::vector<Item>& items);
  Status run_fused_allreduce(std::vector<Item>& items);
  void complete(Item& item, const Status& status, int64_t result = -1, std::vector<int64_t> splits = {});
  // Records phase [start, now) for every item in the timeline (no-op when it is off).
  void trace(const std::vector<Item>& items, const char* phase, double start);
  void trace(const std::vector<const Descriptor*>& descs, const char* phase, double start);

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
