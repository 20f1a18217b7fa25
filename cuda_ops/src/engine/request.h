// A request submitted on this rank and not completed yet, as the engine and the direct lane hold
// it until it completes.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/handles.h"
#include "relax/relax.h"
#include "util/types.h"

namespace relax {

struct LocalRequest {
  Descriptor desc;
  const void* input = nullptr;
  void* output = nullptr;
  relax_alloc_fn alloc = nullptr;
  relax_done_fn done = nullptr;
  void* user = nullptr;
  relax_handle_t handle = 0;
  double enqueued_at = 0;
  void* aux0 = nullptr;  // compressed all-reduce: worker error
  void* aux1 = nullptr;  // compressed all-reduce: owner error
};

using PendingMap = std::unordered_map<std::string, LocalRequest>;

// Completes one local request: records the status in the handle table, then runs the callback.
void finish_request(HandleTable& handles, const LocalRequest& request, int32_t status, const std::string& message,
                    int64_t result = -1, std::vector<int64_t> received_splits = {});

}  // namespace relax
