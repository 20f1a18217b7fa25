// A request submitted on this rank and not completed yet, as the engine and the direct lane hold
// it until it completes.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/pieces.h"
#include "engine/handles.h"
#include "relax/relax.h"
#include "util/types.h"

namespace relax {

// Name under which a rank's pending join() is tracked (one per rank at a time).
constexpr const char kJoinRequestName[] = "relax.join";

// The arguments of a direct request (neighbour or group average) that stay on this rank.
struct DirectArgs {
  std::vector<int> peers;             // world ranks: neighbours, or the group's members
  std::vector<double> weights;        // one per peer
  double self_weight = 0;             // neighbour average
  double consensus_step = 1;          // CHOCO
  int32_t codec = 0;                  // CHOCO's codec (0: exact)
  float* estimate_self = nullptr;     // CHOCO: this rank's estimate x^ (count floats)
  float* estimate_peers = nullptr;    // CHOCO: the peers' estimates (npeers * count floats)
};

struct LocalRequest {
  Descriptor desc;  // what is negotiated with the other ranks
  const void* input = nullptr;
  // Tensors laid end to end (relax_input_pieces_t; `input` is then null): each read where it lies.
  std::vector<Piece> input_pieces;
  void* output = nullptr;
  relax_alloc_fn alloc = nullptr;
  relax_done_fn done = nullptr;
  void* user = nullptr;
  relax_handle_t handle = 0;
  double enqueued_at = 0;
  float* worker_error = nullptr;  // compressed all-reduce with error feedback
  float* owner_error = nullptr;
  float prescale = 1.0f;          // compressed all-reduce: the input is multiplied by it first
  const float* scale_statistics = nullptr;  // compressed all-reduce with a step scale: this rank's
  float* scale_smoothed = nullptr;          // statistics (null: computed in the operation), its state
  DirectArgs direct;              // neighbour and group averages
  // The buffer rule (api/buffer_rule.h): the bytes `output` must hold when the kind knows them at
  // submission (-1: they depend on other ranks, or the allocation callback provides the output),
  // and the bytes the caller says its output holds (relax_request_t::output_bytes).
  int64_t output_needed = -1;
  int64_t output_capacity = 0;
};

using PendingMap = std::unordered_map<std::string, LocalRequest>;

// Completes one local request: records the status in the handle table, then runs the callback.
void finish_request(HandleTable& handles, const LocalRequest& request, int32_t status, const std::string& message,
                    int64_t result = -1, std::vector<int64_t> received_splits = {});

}  // namespace relax
