// The C ABI behind relax.h beside requests: process sets, codecs, neighbour and group averages,
// the timeline, engine settings and statistics (runtime.cc has lifecycle, requests and waits).
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "api/runtime_state.h"
#include "codecs/codec.h"
#include "codecs/step_scale.h"
#include "collectives/compressed.h"
#include "engine/bucket_size.h"
#include "engine/config.h"
#include "engine/requests/kind_support.h"
#include "relax/relax.h"
#include "util/flush_denormals.h"

using relax::runtime;

namespace {

// Fills `info` with a process set's membership; a negative error code if there is none.
int lookup_set(int32_t process_set, relax::ProcessSetInfo& info) {
  std::lock_guard<std::mutex> lock(runtime().mutex);
  relax::Engine* engine = relax::current_engine();
  if (!engine) return -relax::not_initialized();
  if (!engine->process_set_info(process_set, info)) {
    return -relax::fail(relax::Status::error(RELAX_ERR_PROCESS_SET,
                                             "process set " + std::to_string(process_set) + " does not exist"));
  }
  return 0;
}

// The codec `codec` for a chunk of `n` float32 values, and the chunk's encoded size in
// `*encoded`: the count and the codec are checked before any buffer size is computed from them.
relax::Status codec_chunk(int32_t codec, int64_t n, std::unique_ptr<relax::Codec>& c, int64_t& encoded) {
  c = relax::make_codec(codec);
  if (!c) return relax::Status::error(RELAX_ERR_INVALID_ARGUMENT, "unknown codec " + std::to_string(codec));
  // A codec's chunk is a header plus at most a few bytes per value (fp16: 2): bounding n to an
  // eighth of int64 (less a header's room) keeps n * 4 and every codec's encoded size exact.
  constexpr int64_t kMaxValues = (INT64_MAX - 4096) / 8;
  if (n < 0 || n > kMaxValues) {
    return relax::Status::error(RELAX_ERR_INVALID_ARGUMENT, std::string(c->name()) + ": element count " +
                                                                std::to_string(n) + " is not in [0, " +
                                                                std::to_string(kMaxValues) + "]");
  }
  encoded = c->encoded_bytes(n);
  if (encoded < 0) {  // a codec whose format outgrows the bound above
    return relax::Status::error(RELAX_ERR_INVALID_ARGUMENT, std::string(c->name()) + ": " + std::to_string(n) +
                                                                " elements encode to more bytes than fit in int64");
  }
  return relax::Status::ok();
}

// The buffer rule (relax.h, "Buffer capacities") for one buffer of a C ABI call outside requests:
// a buffer the call reads or writes `needed` > 0 bytes of must be given and hold them
// (kinds::require_capacity, so the message is the requests' own); an unused one may be NULL.
relax::Status check_buffer(const std::string& function, const std::string& buffer, const void* data, int64_t needed,
                           int64_t capacity, const std::string& detail) {
  if (needed > 0 && !data) {
    return relax::Status::error(RELAX_ERR_INVALID_ARGUMENT, function + ": got a NULL " + buffer +
                                                                " where the operation needs " +
                                                                std::to_string(needed) + " bytes (" + detail + ")");
  }
  return relax::kinds::require_capacity(function, buffer, needed, capacity, detail);
}

// codec_chunk and the buffer rule for relax_codec_encode (`encoding`: reads n floats, writes the
// chunk) or relax_codec_decode (reads the chunk, writes n floats). A chunk is never empty (sign
// and uint8 write a header even for n = 0), so an encode's output and a decode's input are
// always needed.
relax::Status codec_call(bool encoding, int32_t codec, const void* in, int64_t in_bytes, int64_t n, const void* out,
                         int64_t out_bytes, std::unique_ptr<relax::Codec>& c) {
  const std::string function = encoding ? "relax_codec_encode" : "relax_codec_decode";
  int64_t encoded = 0;
  relax::Status s = codec_chunk(codec, n, c, encoded);
  if (!s.is_ok()) return relax::Status::error(s.code, function + ": " + s.message);
  const int64_t values = relax::kinds::float_bytes(n);  // exact: n is bounded above
  const std::string detail = std::string(c->name()) + " of " + std::to_string(n) + " elements";
  s = check_buffer(function, "input (in)", in, encoding ? values : encoded, in_bytes, detail);
  if (!s.is_ok()) return s;
  return check_buffer(function, "output (out)", out, encoding ? encoded : values, out_bytes, detail);
}

// What the step-scale host passes read and write for a bucket: its elements and its statistics
// (relax_scale_statistics' count), each in float32 bytes.
struct ScaleSizes {
  int64_t element_bytes = 0;
  int64_t statistics_bytes = 0;
};

// scale_factors, and the bucket's elements and statistics in float32 bytes, refused where they
// do not fit in int64.
relax::Status scale_factors_checked(const std::string& function, const int64_t* shapes, int32_t count,
                                    std::vector<relax::ScaleFactor>& factors, ScaleSizes& sizes) {
  relax::Status s = relax::scale_factors(shapes, count, factors);
  if (!s.is_ok()) return relax::Status::error(s.code, function + ": " + s.message);
  int64_t elements = 0, statistics = 0;
  for (const relax::ScaleFactor& f : factors) {
    int64_t own = 0, bytes = 0;
    std::string why;
    if (!relax::checked_tensor_size({f.rows, f.cols}, sizeof(float), own, bytes, why) ||
        !relax::checked_add(elements, own, elements) ||
        !relax::checked_add(statistics, relax::scale_statistics_count(f), statistics) ||
        !relax::checked_mul(elements, int64_t{sizeof(float)}, sizes.element_bytes) ||
        !relax::checked_mul(statistics, int64_t{sizeof(float)}, sizes.statistics_bytes)) {
      return relax::Status::error(RELAX_ERR_INVALID_ARGUMENT, function + ": the parameters' shapes hold more "
                                                                         "float32 bytes than fit in int64");
    }
  }
  return relax::Status::ok();
}

// "the bucket's 12 elements" / "relax_scale_statistics' count for 3 parameters": where each
// step-scale buffer's size comes from, for the buffer rule's message.
std::string bucket_detail(const ScaleSizes& sizes) {
  return "the bucket's " + std::to_string(sizes.element_bytes / 4) + " elements";
}
std::string statistics_detail(int32_t count) {
  return "relax_scale_statistics' count for " + std::to_string(count) + " parameters";
}

}  // namespace

extern "C" {

int relax_process_set_size(int32_t process_set) {
  relax::ProcessSetInfo info;
  const int rc = lookup_set(process_set, info);
  return rc < 0 ? rc : static_cast<int>(info.world_ranks.size());
}

int relax_process_set_rank(int32_t process_set) {
  relax::ProcessSetInfo info;
  const int rc = lookup_set(process_set, info);
  return rc < 0 ? rc : info.rank;
}

int relax_process_set_ranks(int32_t process_set, int32_t* out, int32_t capacity) {
  relax::ProcessSetInfo info;
  const int rc = lookup_set(process_set, info);
  if (rc < 0) return rc;
  for (size_t i = 0; i < info.world_ranks.size() && static_cast<int32_t>(i) < capacity; ++i) {
    out[i] = info.world_ranks[i];
  }
  return static_cast<int>(info.world_ranks.size());
}

int32_t relax_codec_count(void) { return static_cast<int32_t>(relax::registered_codecs().size()); }

int relax_codec_info(int32_t index, relax_codec_info_t* out) {
  // The registry's strings are literals in the codec files: valid while the library is loaded.
  const std::vector<relax::CodecInfo> codecs = relax::registered_codecs();
  if (!out || index < 0 || index >= static_cast<int32_t>(codecs.size())) {
    return relax::fail(relax::Status::error(RELAX_ERR_INVALID_ARGUMENT,
                                            "no codec number " + std::to_string(index) + " (there are " +
                                                std::to_string(codecs.size()) + ")"));
  }
  const relax::CodecInfo& c = codecs[static_cast<size_t>(index)];
  *out = relax_codec_info_t{c.id, c.name, c.wire_format, c.kind, c.caveat, c.consensus_step};
  return RELAX_OK;
}

int64_t relax_auto_bucket_bytes(int64_t step_bytes, int64_t cap_bytes) {
  return step_bytes >= 0 && cap_bytes >= 0 ? relax::auto_bucket_bytes(step_bytes, cap_bytes) : -1;
}

int64_t relax_codec_encoded_bytes(int32_t codec, int64_t n) {
  std::unique_ptr<relax::Codec> c;
  int64_t bytes = -1;
  return codec_chunk(codec, n, c, bytes).is_ok() ? bytes : -1;
}

int32_t relax_compressed_parts(int64_t count, int32_t size) {
  return count >= 0 && size > 0 ? relax::compressed_parts(count, size) : -1;
}

int relax_codec_encode(int32_t codec, const float* in, int64_t in_bytes, int64_t n, uint8_t* out,
                       int64_t out_bytes) {
  std::unique_ptr<relax::Codec> c;
  const relax::Status s = codec_call(true, codec, in, in_bytes, n, out, out_bytes, c);
  if (!s.is_ok()) return relax::fail(s);
  const relax::FlushDenormals flush;  // as inside the compressed collectives
  c->encode(in, n, out);
  return RELAX_OK;
}

int relax_codec_decode(int32_t codec, const uint8_t* in, int64_t in_bytes, int64_t n, float* out,
                       int64_t out_bytes) {
  std::unique_ptr<relax::Codec> c;
  const relax::Status s = codec_call(false, codec, in, in_bytes, n, out, out_bytes, c);
  if (!s.is_ok()) return relax::fail(s);
  const relax::FlushDenormals flush;
  c->decode(in, n, out);
  return RELAX_OK;
}

int relax_scale_statistics(const float* step, int64_t step_bytes, const int64_t* shapes, int32_t count, float* out,
                           int64_t out_bytes) {
  const std::string function = "relax_scale_statistics";
  std::vector<relax::ScaleFactor> factors;
  ScaleSizes sizes;
  relax::Status s = scale_factors_checked(function, shapes, count, factors, sizes);
  if (s.is_ok()) s = check_buffer(function, "step (step)", step, sizes.element_bytes, step_bytes, bucket_detail(sizes));
  if (s.is_ok()) {
    s = check_buffer(function, "statistics (out)", out, sizes.statistics_bytes, out_bytes, statistics_detail(count));
  }
  if (!s.is_ok()) return relax::fail(s);
  relax::scale_statistics(step, factors.data(), count, out);
  return RELAX_OK;
}

int relax_scale_apply(const float* previous, int64_t previous_bytes, const float* smoothed, int64_t smoothed_bytes,
                      const int64_t* shapes, int32_t count, float floor, const float* step, int64_t step_bytes,
                      float* out, int64_t out_bytes, float* worker, int64_t worker_bytes, float* owner,
                      int64_t owner_bytes, int64_t owner_offset, int64_t owner_count) {
  const std::string function = "relax_scale_apply";
  std::vector<relax::ScaleFactor> factors;
  ScaleSizes sizes;
  relax::Status s = scale_factors_checked(function, shapes, count, factors, sizes);
  const std::string bucket = bucket_detail(sizes), statistics = statistics_detail(count);
  if (s.is_ok()) s = check_buffer(function, "previous statistics (previous)", previous, sizes.statistics_bytes,
                                  previous_bytes, statistics);
  if (s.is_ok()) s = check_buffer(function, "smoothed statistics (smoothed)", smoothed, sizes.statistics_bytes,
                                  smoothed_bytes, statistics);
  if (s.is_ok()) s = check_buffer(function, "step (step)", step, sizes.element_bytes, step_bytes, bucket);
  if (s.is_ok()) s = check_buffer(function, "output (out)", out, sizes.element_bytes, out_bytes, bucket);
  // The residuals are optional (NULL: none), so each is checked only when given.
  if (s.is_ok() && worker) {
    s = check_buffer(function, "worker residual (worker)", worker, sizes.element_bytes, worker_bytes, bucket);
  }
  const int64_t elements = sizes.element_bytes / 4;
  if (s.is_ok() && owner) {
    // The owner's chunk is a range of the bucket; checked as such, owner_count * 4 cannot overflow.
    if (owner_count < 0 || owner_offset < 0 || owner_count > elements || owner_offset > elements - owner_count) {
      s = relax::Status::error(RELAX_ERR_INVALID_ARGUMENT,
                               function + ": the owner residual's range (" + std::to_string(owner_count) +
                                   " elements from " + std::to_string(owner_offset) + ") is not within " +
                                   bucket);
    } else {
      s = check_buffer(function, "owner residual (owner)", owner, relax::kinds::float_bytes(owner_count),
                       owner_bytes, std::to_string(owner_count) + " floats from element " +
                                        std::to_string(owner_offset) + " of the bucket");
    }
  }
  if (!s.is_ok()) return relax::fail(s);
  relax::scale_apply(previous, smoothed, factors.data(), count, floor, step, out,
                     relax::ScaleResiduals{worker, owner, owner_offset, owner_count});
  return RELAX_OK;
}

int relax_scale_multiply(const float* smoothed, int64_t smoothed_bytes, const int64_t* shapes, int32_t count,
                         float floor, float* data, int64_t data_bytes) {
  const std::string function = "relax_scale_multiply";
  std::vector<relax::ScaleFactor> factors;
  ScaleSizes sizes;
  relax::Status s = scale_factors_checked(function, shapes, count, factors, sizes);
  if (s.is_ok()) s = check_buffer(function, "smoothed statistics (smoothed)", smoothed, sizes.statistics_bytes,
                                  smoothed_bytes, statistics_detail(count));
  if (s.is_ok()) s = check_buffer(function, "data (data)", data, sizes.element_bytes, data_bytes, bucket_detail(sizes));
  if (!s.is_ok()) return relax::fail(s);
  relax::scale_multiply(smoothed, factors.data(), count, floor, data);
  return RELAX_OK;
}

int relax_finishing(void) {
  std::lock_guard<std::mutex> lock(runtime().mutex);
  if (relax::Engine* engine = relax::current_engine()) engine->set_finishing();
  return RELAX_OK;
}

int relax_direct_pending(void) {
  std::lock_guard<std::mutex> lock(runtime().mutex);
  if (!relax::current_engine()) return -relax::not_initialized();
  if (!runtime().lane) return -relax::fail(relax::no_lane());
  return runtime().lane->header_pending() ? 1 : 0;
}

int relax_direct_join_start(int64_t last_step) {
  std::lock_guard<std::mutex> lock(runtime().mutex);
  if (!relax::current_engine()) return relax::not_initialized();
  if (!runtime().lane) return relax::fail(relax::no_lane());
  relax::Status s = runtime().lane->start_join(last_step);
  return s.is_ok() ? RELAX_OK : relax::fail(s);
}

int relax_direct_join_test(int64_t* max_step) {
  std::lock_guard<std::mutex> lock(runtime().mutex);
  if (!relax::current_engine()) return -relax::not_initialized();
  if (!runtime().lane) return -relax::fail(relax::no_lane());
  bool done = false;
  int64_t max = 0;
  relax::Status s = runtime().lane->test_join(done, max);
  if (!s.is_ok()) return -relax::fail(s);
  if (done && max_step) *max_step = max;
  return done ? 1 : 0;
}

int relax_group_service_start(int32_t group_size, int32_t max_lag, double grace_ms, double grace_fraction) {
  relax::Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (!relax::current_engine()) return relax::not_initialized();
  if (rt.mpi.thread_level() < MPI_THREAD_MULTIPLE) return relax::fail(relax::no_lane());
  // The generator's replies are bounded by the same timeout as every other wait.
  relax::Status s = rt.groups.start(rt.mpi.data(), group_size, max_lag, grace_ms, grace_fraction, rt.peer_timeout_s);
  return s.is_ok() ? RELAX_OK : relax::fail(s);
}

int relax_group_retire(void) {
  std::lock_guard<std::mutex> lock(runtime().mutex);
  if (!relax::current_engine()) return relax::not_initialized();
  relax::Status s = runtime().groups.retire();
  return s.is_ok() ? RELAX_OK : relax::fail(s);
}

int relax_group_request(int64_t step, int32_t* members, double* weights, int32_t capacity, int64_t* new_step,
                        int64_t* group_id) {
  relax::GroupService* service = nullptr;
  {
    std::lock_guard<std::mutex> lock(runtime().mutex);
    if (!relax::current_engine()) return -relax::not_initialized();
    service = &runtime().groups;
  }
  relax::GroupAssignment assignment;
  relax::Status s = service->request(step, assignment);  // blocks: not under the runtime lock
  if (!s.is_ok()) return -relax::fail(s);
  const int32_t n = static_cast<int32_t>(assignment.members.size());
  if (n > capacity) {
    return -relax::fail(relax::Status::error(RELAX_ERR_INVALID_ARGUMENT, "relax_group_request: capacity " +
                                                                            std::to_string(capacity) + " < group size " +
                                                                            std::to_string(n)));
  }
  for (int32_t i = 0; i < n; ++i) {
    members[i] = assignment.members[static_cast<size_t>(i)];
    weights[i] = assignment.weights[static_cast<size_t>(i)];
  }
  if (new_step) *new_step = assignment.new_step;
  if (group_id) *group_id = assignment.group_id;
  return n;
}

int relax_start_timeline(const char* path, int mark_cycles) {
  std::lock_guard<std::mutex> lock(runtime().mutex);
  relax::Engine* engine = relax::current_engine();
  if (!engine) return relax::not_initialized();
  if (!path || !*path) {
    return relax::fail(relax::Status::error(RELAX_ERR_INVALID_ARGUMENT, "start_timeline needs a file path"));
  }
  relax::Status s = engine->timeline().start(path, mark_cycles != 0, runtime().mpi.topology().rank);
  return s.is_ok() ? RELAX_OK : relax::fail(s);
}

int relax_stop_timeline(void) {
  std::lock_guard<std::mutex> lock(runtime().mutex);
  relax::Engine* engine = relax::current_engine();
  if (!engine) return relax::not_initialized();
  engine->timeline().stop();
  return RELAX_OK;
}

int relax_set_fusion_threshold(int64_t bytes) {
  std::lock_guard<std::mutex> lock(runtime().mutex);
  relax::Engine* engine = relax::current_engine();
  if (!engine) return relax::not_initialized();
  if (bytes < 0 || bytes > relax::kMaxFusionThresholdBytes) {  // the range of RELAX_FUSION_THRESHOLD
    return relax::fail(relax::Status::error(RELAX_ERR_INVALID_ARGUMENT,
                                            "fusion threshold " + std::to_string(bytes) + " is not in [0, " +
                                                std::to_string(relax::kMaxFusionThresholdBytes) + "] bytes"));
  }
  engine->set_fusion_threshold(bytes);
  return RELAX_OK;
}

int relax_set_cycle_time_ms(double ms) {
  std::lock_guard<std::mutex> lock(runtime().mutex);
  relax::Engine* engine = relax::current_engine();
  if (!engine) return relax::not_initialized();
  // The range of RELAX_CYCLE_TIME; written so that nan fails too (an engine waiting nan or inf
  // milliseconds between cycles never runs a collective).
  if (!(ms >= 0 && ms <= relax::kMaxCycleTimeMs)) {
    return relax::fail(relax::Status::error(RELAX_ERR_INVALID_ARGUMENT,
                                            "cycle time " + std::to_string(ms) + " ms is not in [0, " +
                                                std::to_string(static_cast<int>(relax::kMaxCycleTimeMs)) + "]"));
  }
  engine->set_cycle_time_ms(ms);
  return RELAX_OK;
}

int relax_get_stats(relax_stats_t* out) {
  std::lock_guard<std::mutex> lock(runtime().mutex);
  relax::Engine* engine = relax::current_engine();
  if (!engine) return relax::not_initialized();
  if (!out) return relax::fail(relax::Status::error(RELAX_ERR_INVALID_ARGUMENT, "relax_get_stats: NULL output"));
  relax::EngineStats s = engine->stats();
  if (runtime().lane) {  // neighbour and group averages run beside the engine
    s.bytes_sent += runtime().lane->traffic().bytes_sent;
    s.bytes_received += runtime().lane->traffic().bytes_received;
    s.execution_ns += runtime().lane->busy_ns();
  }
  *out = relax_stats_t{s.rounds,         s.completed,    s.bytes_sent,       s.bytes_received,
                       s.negotiation_ns, s.execution_ns, s.inline_allreduces,
                       s.fast_path_buckets, s.fast_path_engagements, s.fast_path_exits};
  return RELAX_OK;
}

}  // extern "C"
