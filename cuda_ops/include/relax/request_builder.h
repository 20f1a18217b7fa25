/*
 * request_builder.h — building relax_request_t in C++ framework bindings (header only; it calls
 * the C ABI of relax.h and nothing else).
 *
 * The torch and TensorFlow extensions build their requests here, so that a request's defaults
 * (relax_request_init), the names of a group's members (relax_request_member_name) and the
 * field each argument goes in are written once: the bindings used to fill the struct themselves,
 * and their copies drifted apart. A kind of request new to both frameworks gets its setter here.
 *
 *   relax::RequestBuilder r(RELAX_REQ_ALLREDUCE, name.c_str(), process_set);
 *   r.tensor(dtype, ndim, shape, input, input_bytes).output(out, out_bytes).reduce(op, 1.0, 1.0);
 *   relax_enqueue(&r.get(), nullptr, done, user);
 *
 * Pointers given to a builder are stored, not copied: they must live as long as relax.h says
 * (the name and argument arrays until relax_enqueue returns, buffers until the request completes).
 */
#ifndef RELAX_REQUEST_BUILDER_H_
#define RELAX_REQUEST_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "relax/relax.h"

namespace relax {

class RequestBuilder {
 public:
  // A request of `type` with its kind's defaults (relax_request_init). An unknown type is kept
  // as given, so that submitting the request fails with the core's message naming it.
  RequestBuilder(int32_t type, const char* name, int32_t process_set = 0) {
    if (relax_request_init(&r_, type) != RELAX_OK) r_.type = type;
    r_.name = name;
    r_.process_set = process_set;
  }

  // The tensor: element type, shape (`ndim` sizes) and input buffer with its capacity in bytes.
  RequestBuilder& tensor(int32_t dtype, int32_t ndim, const int64_t* shape, const void* input, int64_t input_bytes) {
    r_.dtype = dtype;
    r_.ndim = ndim;
    r_.shape = ndim > 0 ? shape : nullptr;
    r_.input = input;
    r_.input_bytes = input_bytes;
    return *this;
  }

  // The output buffer and its capacity in bytes (none: the engine allocates through `alloc`).
  RequestBuilder& output(void* data, int64_t bytes) {
    r_.output = data;
    r_.output_bytes = bytes;
    return *this;
  }

  // Reduction and scaling of an allreduce or reducescatter; other kinds have none (ignored).
  RequestBuilder& reduce(int32_t op, double prescale, double postscale) {
    relax_reduce_args_t* a = r_.type == RELAX_REQ_ALLREDUCE       ? &r_.args.allreduce
                             : r_.type == RELAX_REQ_REDUCESCATTER ? &r_.args.reducescatter.reduce
                                                                  : nullptr;
    if (a) {
      a->reduce_op = op;
      a->prescale = prescale;
      a->postscale = postscale;
    }
    return *this;
  }

  // Broadcast: the root's world rank.
  RequestBuilder& root(int32_t root_rank) {
    r_.args.broadcast.root_rank = root_rank;
    return *this;
  }

  // Alltoall: dim-0 rows sent to each rank (none: an equal split).
  RequestBuilder& splits(int32_t count, const int64_t* splits) {
    r_.args.alltoall.nsplits = count;
    r_.args.alltoall.splits = count > 0 ? splits : nullptr;
    return *this;
  }

  // Tensors laid end to end as the input (reducescatter, compressed all-reduce): `count` pieces of
  // `dtype`, `counts[i]` elements each, whose total `*total` is the request's one-dimensional shape.
  RequestBuilder& pieces(int32_t dtype, int32_t count, const void* const* data, const int64_t* counts,
                         const int64_t* total) {
    const relax_input_pieces_t pieces{count, data, counts};
    if (r_.type == RELAX_REQ_REDUCESCATTER) r_.args.reducescatter.inputs = pieces;
    if (r_.type == RELAX_REQ_COMPRESSED_ALLREDUCE) r_.args.compressed_allreduce.inputs = pieces;
    return tensor(dtype, 1, total, nullptr, 0);
  }

  // Compressed all-reduce: codec id and reduction (Average or Sum).
  RequestBuilder& compressed(int32_t codec, int32_t op) {
    r_.args.compressed_allreduce.codec = codec;
    r_.args.compressed_allreduce.reduce_op = op;
    return *this;
  }

  // Compressed all-reduce: multiply the input by this before compressing (default 1.0: none).
  RequestBuilder& input_scale(double prescale) {
    r_.args.compressed_allreduce.prescale = prescale;
    return *this;
  }

  // Compressed all-reduce: the error-feedback residuals (NULL: none) and their capacities in bytes.
  RequestBuilder& error_feedback(float* worker, int64_t worker_bytes, float* owner, int64_t owner_bytes) {
    relax_compressed_allreduce_args_t& a = r_.args.compressed_allreduce;
    a.worker_error = worker;
    a.worker_error_bytes = worker_bytes;
    a.owner_error = owner;
    a.owner_error_bytes = owner_bytes;
    return *this;
  }

  // Neighbour average: world ranks of the peers, their weights and this rank's own.
  RequestBuilder& neighbors(int32_t count, const int32_t* peers, const double* weights, double self_weight) {
    relax_neighbor_average_args_t& a = r_.args.neighbor_average;
    a.npeers = count;
    a.peers = peers;
    a.weights = weights;
    a.self_weight = self_weight;
    return *this;
  }

  // Neighbour average with a codec (CHOCO): its step and the estimates with their capacities.
  RequestBuilder& choco(int32_t codec, double consensus_step, float* estimate_self, int64_t self_bytes,
                        float* estimate_peers, int64_t peers_bytes) {
    relax_neighbor_average_args_t& a = r_.args.neighbor_average;
    a.codec = codec;
    a.consensus_step = consensus_step;
    a.estimate_self = estimate_self;
    a.estimate_self_bytes = self_bytes;
    a.estimate_peers = estimate_peers;
    a.estimate_peers_bytes = peers_bytes;
    return *this;
  }

  // Group average: the members' world ranks (ascending, this rank included) and their weights.
  RequestBuilder& group(int32_t count, const int32_t* members, const double* weights) {
    relax_group_average_args_t& a = r_.args.group_average;
    a.nmembers = count;
    a.members = members;
    a.weights = weights;
    return *this;
  }

  const relax_request_t& get() const { return r_; }
  relax_request_t& get() { return r_; }

 private:
  relax_request_t r_;
};

// The names of the `count` members of a group submitted under `base` (relax_request_member_name).
inline std::vector<std::string> member_names(const std::string& base, size_t count) {
  std::vector<std::string> names;
  names.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const int32_t index = static_cast<int32_t>(i), n = static_cast<int32_t>(count);
    const int length = relax_request_member_name(base.c_str(), index, n, nullptr, 0);
    std::vector<char> name(length > 0 ? static_cast<size_t>(length) + 1 : 1, '\0');
    if (length > 0) relax_request_member_name(base.c_str(), index, n, name.data(), length + 1);
    names.emplace_back(name.data());
  }
  return names;
}

// Announces that this rank rejected the requests `names` of `type` (one, or a group) before they
// reached the core (relax_reject), so the other members fail instead of waiting for it. Best
// effort: the caller reports its own error regardless. Returns relax_reject's status.
inline int announce_rejection(int32_t type, const std::vector<std::string>& names, int32_t process_set,
                              const std::string& why) {
  std::vector<relax_request_t> skeletons;
  skeletons.reserve(names.size());
  for (const std::string& name : names) skeletons.push_back(RequestBuilder(type, name.c_str(), process_set).get());
  return relax_reject(skeletons.data(), static_cast<int32_t>(skeletons.size()), RELAX_ERR_INVALID_ARGUMENT,
                      why.c_str());
}

}  // namespace relax

#endif  /* RELAX_REQUEST_BUILDER_H_ */
