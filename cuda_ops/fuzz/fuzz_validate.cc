// Fuzz target: request validation (make_request, api/validate.cc, and each kind's parse in
// engine/requests/) on a relax_request_t built from the input: any type, dtype, shape, process-set
// view and kind arguments, with every array exactly as long as its count says, then negotiation
// of what was accepted (two ranks announcing it) through the coordinator's agreement checks.
// Properties: no crash, leak or UB; a rejection is RELAX_ERR_* with a message; an accepted
// request has a shape without negative dimensions.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "api/validate.h"

namespace {

// Values near the edges (0, -1, huge) turn up more often than uniform ones would make them.
int64_t pick_i64(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0: return 0;
    case 1: return in.ConsumeIntegralInRange<int64_t>(-2, 8);
    case 2: return INT64_MAX - in.ConsumeIntegralInRange<int64_t>(0, 2);
    case 3: return (int64_t{1} << in.ConsumeIntegralInRange<int>(0, 62)) - in.ConsumeIntegralInRange<int>(-1, 1);
    default: return in.ConsumeIntegral<int64_t>();
  }
}

int32_t pick_i32(FuzzedDataProvider& in, int32_t lo, int32_t hi) {
  return in.ConsumeBool() ? in.ConsumeIntegralInRange<int32_t>(lo, hi) : in.ConsumeIntegral<int32_t>();
}

std::vector<int64_t> i64s(FuzzedDataProvider& in, size_t n) {
  std::vector<int64_t> v(n);
  for (int64_t& x : v) x = pick_i64(in);
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  // The process-set view the runtime would pass: a consistent one (it is not user input).
  const int world_size = in.ConsumeIntegralInRange<int>(1, 8);
  std::vector<int> set_ranks;
  for (int r = 0; r < world_size; ++r) {
    if (in.ConsumeBool() || (r == world_size - 1 && set_ranks.empty())) set_ranks.push_back(r);
  }
  const int set_rank = in.ConsumeIntegralInRange<int>(0, static_cast<int>(set_ranks.size()) - 1);
  relax::SubmitContext ctx{in.ConsumeIntegralInRange<int32_t>(0, 2), set_ranks, set_rank,
                           set_ranks[static_cast<size_t>(set_rank)], world_size, in.ConsumeBool()};

  static float buffer[64];  // stands for tensors: validation must not read or write them
  float* tensor = buffer;
  relax_request_t r{};
  r.type = pick_i32(in, -1, 12);
  const std::string name = in.ConsumeBool() ? in.ConsumeRandomLengthString(16) : "t";
  r.name = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? nullptr : name.c_str();
  r.dtype = pick_i32(in, -1, 11);
  r.ndim = pick_i32(in, -1, 4);
  const std::vector<int64_t> shape = i64s(in, r.ndim > 0 && r.ndim <= 4 ? static_cast<size_t>(r.ndim) : 0);
  r.shape = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? nullptr : shape.data();
  if (r.ndim > 4 || r.ndim < 0) r.shape = nullptr;
  r.input = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? nullptr : tensor;
  r.output = in.ConsumeBool() ? nullptr : tensor;
  r.process_set = ctx.process_set;
#if RELAX_ABI_VERSION >= 14  // buffers travel with their capacities in bytes
  r.input_bytes = pick_i64(in);
  r.output_bytes = pick_i64(in);
  const int64_t state_bytes[2] = {pick_i64(in), pick_i64(in)};
#endif

  // Arrays the kind arguments point at, sized by counts drawn here.
  const int32_t n1 = in.ConsumeIntegralInRange<int32_t>(0, 9), n2 = in.ConsumeIntegralInRange<int32_t>(0, 9);
  const std::vector<int64_t> longs = i64s(in, static_cast<size_t>(n1));
  std::vector<int32_t> ints(static_cast<size_t>(n2));
  for (int32_t& x : ints) x = pick_i32(in, -1, 9);
  std::vector<double> doubles(static_cast<size_t>(n2));
  for (double& x : doubles) x = in.ConsumeBool() ? in.ConsumeFloatingPoint<double>() : 0.5;
  std::vector<const void*> pieces(static_cast<size_t>(n1));
  for (const void*& p : pieces) p = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? nullptr : tensor;
  std::vector<float> estimates(64);
  const relax_input_pieces_t inputs{in.ConsumeBool() ? n1 : 0, pieces.data(), longs.data()};
  relax_step_scale_args_t scale{};
  scale.nfactors = n1 / 2;
  scale.shapes = longs.data();
  scale.floor = in.ConsumeFloatingPoint<double>();
  scale.decay = in.ConsumeFloatingPoint<double>();
  scale.smoothed = estimates.data();
  const int32_t op = pick_i32(in, -1, 6);
  const double prescale = in.ConsumeBool() ? 1.0 : in.ConsumeFloatingPoint<double>();
  switch (r.type) {
    case RELAX_REQ_ALLREDUCE: r.args.allreduce = {op, prescale, in.ConsumeFloatingPoint<double>()}; break;
    case RELAX_REQ_BROADCAST: r.args.broadcast = {pick_i32(in, -1, 8)}; break;
    case RELAX_REQ_REDUCESCATTER:
      r.args.reducescatter = {{op, prescale, 1.0}, in.ConsumeBool() ? n1 : 0, longs.data(), inputs};
      break;
    case RELAX_REQ_ALLTOALL: r.args.alltoall = {in.ConsumeBool() ? n1 : 0, longs.data()}; break;
    case RELAX_REQ_ADD_PROCESS_SET: r.args.add_process_set = {n2, ints.data()}; break;
    case RELAX_REQ_REMOVE_PROCESS_SET: r.args.remove_process_set = {pick_i32(in, -1, 3)}; break;
    case RELAX_REQ_COMPRESSED_ALLREDUCE:
      r.args.compressed_allreduce.reduce_op = op;
      r.args.compressed_allreduce.codec = pick_i32(in, -1, 4);
      r.args.compressed_allreduce.worker_error = in.ConsumeBool() ? estimates.data() : nullptr;
      r.args.compressed_allreduce.owner_error = in.ConsumeBool() ? estimates.data() : nullptr;
      r.args.compressed_allreduce.step_scale = in.ConsumeBool() ? &scale : nullptr;
      r.args.compressed_allreduce.prescale = prescale;
      r.args.compressed_allreduce.inputs = inputs;
#if RELAX_ABI_VERSION >= 14
      r.args.compressed_allreduce.worker_error_bytes = state_bytes[0];
      r.args.compressed_allreduce.owner_error_bytes = state_bytes[1];
      scale.statistics_bytes = state_bytes[0];
      scale.smoothed_bytes = state_bytes[1];
#endif
      break;
    case RELAX_REQ_NEIGHBOR_AVERAGE:
      r.args.neighbor_average.npeers = n2;
      r.args.neighbor_average.peers = ints.data();
      r.args.neighbor_average.weights = doubles.data();
      r.args.neighbor_average.self_weight = in.ConsumeFloatingPoint<double>();
      r.args.neighbor_average.codec = pick_i32(in, -1, 4);
      r.args.neighbor_average.consensus_step = in.ConsumeFloatingPoint<double>();
      r.args.neighbor_average.estimate_self = in.ConsumeBool() ? estimates.data() : nullptr;
      r.args.neighbor_average.estimate_peers = in.ConsumeBool() ? estimates.data() : nullptr;
#if RELAX_ABI_VERSION >= 14
      r.args.neighbor_average.estimate_self_bytes = state_bytes[0];
      r.args.neighbor_average.estimate_peers_bytes = state_bytes[1];
#endif
      break;
    case RELAX_REQ_GROUP_AVERAGE: r.args.group_average = {n2, ints.data(), doubles.data()}; break;
    default: break;
  }

  relax::LocalRequest local;
  const relax::Status status = relax::make_request(r, ctx, local);
  if (!status.is_ok()) {
    if (status.code == RELAX_OK || status.message.empty()) std::abort();
    return 0;
  }
  for (int64_t dim : local.desc.shape) {
    if (dim < 0) std::abort();
  }
  // What a rank accepted is announced; two members announcing it go through the agreement checks.
  const relax::RequestKind* kind = relax::request_kind(r.type);
  if (kind && kind->lane == relax::Lane::kNegotiated) {
    relax::Coordinator coordinator(2, 4);
    std::vector<relax::RankMessage> round(2);
    round[0].descriptors = {local.desc};
    round[1].descriptors = {local.desc};
    coordinator.process(round, 0.0);
  }
  return 0;
}
