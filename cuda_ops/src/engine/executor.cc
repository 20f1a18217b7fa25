#include "engine/executor.h"

#include <cctype>
#include <cstring>
#include <exception>

#include "collectives/compressed.h"
#include "collectives/reduce.h"

namespace relax {
namespace {

bool same_fusion_key(const Descriptor& a, const Descriptor& b) {
  return a.dtype == b.dtype && a.reduce_op == b.reduce_op && a.prescale == b.prescale && a.postscale == b.postscale;
}

int64_t byte_size(const Descriptor& d) { return d.num_elements() * static_cast<int64_t>(dtype_size(d.dtype)); }

// Average reduces as a sum and divides by the number of ranks afterwards.
int32_t reduction_of(int32_t op) { return op == RELAX_OP_AVERAGE ? RELAX_OP_SUM : op; }

double postscale_of(const Descriptor& d, int size) {
  return d.reduce_op == RELAX_OP_AVERAGE ? d.postscale / static_cast<double>(size) : d.postscale;
}

std::vector<int64_t> with_dim0(const std::vector<int64_t>& shape, int64_t dim0) {
  std::vector<int64_t> out = shape;
  if (out.empty()) out.push_back(dim0);
  else out[0] = dim0;
  return out;
}

}  // namespace

Executor::Executor(Collectives& collectives, HandleTable& handles, const EngineConfig& config, Timeline& timeline,
                   std::vector<int> world_ranks, std::function<void(const std::string&)> retire)
    : collectives_(collectives),
      handles_(handles),
      config_(config),
      timeline_(timeline),
      world_ranks_(std::move(world_ranks)),
      retire_(std::move(retire)) {}

void Executor::trace(const std::vector<Item>& items, const char* phase, double start) {
  if (!timeline_.active()) return;
  const double end = steady_seconds();
  for (const Item& item : items) {
    timeline_.record(item.tensor->name, request_type_name(item.tensor->first().type), phase, start, end);
  }
}

void Executor::complete(Item& item, const Status& status, int64_t result, std::vector<int64_t> splits) {
  if (!item.local) return;
  const std::string name = item.local->desc.name;
  retire_(name);
  finish_request(handles_, *item.local, status.code, status.message, result, std::move(splits));
  pending_->erase(name);
  item.local = nullptr;
}

void Executor::run(std::vector<Response>& responses, PendingMap& pending) {
  pending_ = &pending;
  auto find = [&](const std::string& name) -> LocalRequest* {
    auto it = pending.find(name);
    return it == pending.end() ? nullptr : &it->second;
  };
  std::vector<Item> batch;
  auto flush = [&] {
    if (!batch.empty()) run_allreduce_batch(batch);
    batch.clear();
  };
  for (Response& response : responses) {
    if (response.kind == Response::Kind::Execute && response.type == RELAX_REQ_ALLREDUCE) {
      for (const ResponseTensor& t : response.tensors) batch.push_back({&t, find(t.name)});
      continue;
    }
    flush();
    if (response.kind == Response::Kind::Error) {
      for (const ResponseTensor& t : response.tensors) {
        Item item{&t, find(t.name)};
        complete(item, Status::error(response.status, response.message));
      }
      continue;
    }
    if (response.kind == Response::Kind::JoinDone) {
      ResponseTensor join_tensor;
      join_tensor.name = kJoinRequestName;
      Item item{&join_tensor, find(kJoinRequestName)};
      complete(item, Status::ok(), response.last_joined);
      continue;
    }
    for (const ResponseTensor& t : response.tensors) {
      Item item{&t, find(t.name)};
      Status status;
      std::vector<int64_t> extra;
      const double start = steady_seconds();
      try {
        switch (response.type) {
          case RELAX_REQ_ALLGATHER: status = run_allgather(item, extra); break;
          case RELAX_REQ_BROADCAST: status = run_broadcast(item); break;
          case RELAX_REQ_REDUCESCATTER: status = run_reducescatter(item); break;
          case RELAX_REQ_ALLTOALL: status = run_alltoall(item, extra); break;
          case RELAX_REQ_COMPRESSED_ALLREDUCE: status = run_compressed(item); break;
          case RELAX_REQ_BARRIER: break;  // negotiation already proved every rank arrived
          default: status = Status::error(RELAX_ERR_INTERNAL, "unexpected request type");
        }
      } catch (const std::exception& e) {
        status = Status::error(RELAX_ERR_INTERNAL, e.what());
      }
      if (response.type != RELAX_REQ_BARRIER) {
        std::string phase = request_type_name(response.type);
        for (char& c : phase) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        trace({item}, phase.c_str(), start);
      }
      complete(item, status, -1, response.type == RELAX_REQ_ALLTOALL ? extra : std::vector<int64_t>{});
    }
  }
  flush();
}

void Executor::run_allreduce_batch(std::vector<Item>& items) {
  size_t i = 0;
  while (i < items.size()) {
    const Descriptor& key = items[i].tensor->first();
    int64_t bytes = byte_size(key);
    size_t j = i + 1;
    while (j < items.size() && same_fusion_key(items[j].tensor->first(), key) &&
           bytes + byte_size(items[j].tensor->first()) <= config_.fusion_threshold_bytes) {
      bytes += byte_size(items[j].tensor->first());
      ++j;
    }
    std::vector<Item> group(items.begin() + static_cast<std::ptrdiff_t>(i), items.begin() + static_cast<std::ptrdiff_t>(j));
    Status status;
    try {
      status = run_fused_allreduce(group);
    } catch (const std::exception& e) {
      status = Status::error(RELAX_ERR_INTERNAL, e.what());
    }
    for (Item& item : group) complete(item, status);
    i = j;
  }
}

Status Executor::run_fused_allreduce(std::vector<Item>& items) {
  const Descriptor& d = items.front().tensor->first();
  const size_t esize = dtype_size(d.dtype);
  const int32_t op = reduction_of(d.reduce_op);
  int64_t total = 0;
  for (const Item& item : items) total += item.tensor->first().num_elements();

  void* buf;
  const void* src;
  const bool fused = items.size() > 1 || !items.front().local;
  double phase_start = steady_seconds();
  if (!fused) {
    LocalRequest& local = *items.front().local;
    buf = local.output;
    src = local.input;
    if (d.prescale != 1.0 && src != buf) {  // the input must not be modified: scale a copy
      std::memcpy(buf, src, static_cast<size_t>(total) * esize);
      src = buf;
    }
  } else {
    if (fusion_buffer_.size() < static_cast<size_t>(total) * esize) fusion_buffer_.resize(static_cast<size_t>(total) * esize);
    uint8_t* p = fusion_buffer_.data();
    for (const Item& item : items) {
      const int64_t n = item.tensor->first().num_elements();
      if (item.local) {
        if (n > 0) std::memcpy(p, item.local->input, static_cast<size_t>(n) * esize);
      } else {
        fill_identity(p, n, d.dtype, op);  // joined rank: contributes nothing
      }
      p += n * static_cast<int64_t>(esize);
    }
    buf = fusion_buffer_.data();
    src = buf;
    trace(items, "MEMCPY_IN_FUSION_BUFFER", phase_start);
    phase_start = steady_seconds();
  }
  if (d.prescale != 1.0) scale_buffer(buf, total, d.dtype, d.prescale);
  Status status = collectives_.allreduce(src, buf, total, d.dtype, op, postscale_of(d, collectives_.size()));
  trace(items, "ALLREDUCE", phase_start);
  if (fused && status.is_ok()) {
    phase_start = steady_seconds();
    const uint8_t* p = fusion_buffer_.data();
    for (const Item& item : items) {
      const int64_t n = item.tensor->first().num_elements();
      if (item.local && n > 0) std::memcpy(item.local->output, p, static_cast<size_t>(n) * esize);
      p += n * static_cast<int64_t>(esize);
    }
    trace(items, "MEMCPY_OUT_FUSION_BUFFER", phase_start);
  }
  return status;
}

void* Executor::allocate_output(Item& item, const std::vector<int64_t>& shape, std::vector<uint8_t>& fallback,
                                int64_t bytes) {
  if (!item.local) {
    fallback.resize(static_cast<size_t>(bytes));
    return fallback.data();
  }
  LocalRequest& local = *item.local;
  if (local.alloc) {
    local.output = local.alloc(local.user, static_cast<int32_t>(shape.size()), shape.data());
  }
  return local.output;
}

Status Executor::run_allgather(Item& item, std::vector<int64_t>& shape_out) {
  const Descriptor& d = item.tensor->first();
  const size_t esize = dtype_size(d.dtype);
  const int64_t row = d.row_elements();
  std::vector<int64_t> counts;
  int64_t rows = 0;
  for (const auto& rank_desc : item.tensor->per_rank) {
    const int64_t dim0 = rank_desc ? rank_desc->dim0() : 0;
    counts.push_back(dim0 * row);
    rows += dim0;
  }
  shape_out = with_dim0(d.shape, rows);
  const int64_t bytes = rows * row * static_cast<int64_t>(esize);
  std::vector<uint8_t> fallback;
  void* out = allocate_output(item, shape_out, fallback, bytes);
  if (!out && bytes > 0) return Status::error(RELAX_ERR_INTERNAL, "could not allocate the allgather output for '" + d.name + "'");
  return collectives_.allgatherv(item.local ? item.local->input : nullptr, out, counts, esize);
}

Status Executor::run_broadcast(Item& item) {
  const Descriptor& d = item.tensor->first();
  const int64_t bytes = byte_size(d);
  std::vector<uint8_t> fallback;
  void* buf;
  if (item.local) {
    buf = item.local->output;
    if (collectives_.rank() == d.root_rank && item.local->input != buf && bytes > 0) {
      std::memcpy(buf, item.local->input, static_cast<size_t>(bytes));
    }
  } else {
    fallback.resize(static_cast<size_t>(bytes));
    buf = fallback.data();
  }
  return collectives_.broadcast(buf, bytes, d.root_rank);
}

Status Executor::run_reducescatter(Item& item) {
  const Descriptor& d = item.tensor->first();
  const size_t esize = dtype_size(d.dtype);
  const int size = collectives_.size();
  const int me = collectives_.rank();
  const int32_t op = reduction_of(d.reduce_op);
  const int64_t numel = d.num_elements();
  std::vector<int64_t> counts;
  std::vector<int64_t> out_shape;
  if (!d.recv_counts.empty()) {
    counts = d.recv_counts;
    out_shape = {counts[static_cast<size_t>(me)]};
  } else {
    const std::vector<int64_t> rows = even_counts(d.dim0(), size);
    for (int64_t r : rows) counts.push_back(r * d.row_elements());
    out_shape = with_dim0(d.shape, rows[static_cast<size_t>(me)]);
  }
  if (work_buffer_.size() < static_cast<size_t>(numel) * esize) work_buffer_.resize(static_cast<size_t>(numel) * esize);
  const void* src = item.local ? item.local->input : nullptr;
  if (!item.local) {
    fill_identity(work_buffer_.data(), numel, d.dtype, op);
    src = work_buffer_.data();
  } else if (d.prescale != 1.0) {  // the input must not be modified: scale a copy
    if (numel > 0) std::memcpy(work_buffer_.data(), src, static_cast<size_t>(numel) * esize);
    scale_buffer(work_buffer_.data(), numel, d.dtype, d.prescale);
    src = work_buffer_.data();
  }
  const int64_t out_bytes = counts[static_cast<size_t>(me)] * static_cast<int64_t>(esize);
  std::vector<uint8_t> fallback;
  void* out = allocate_output(item, out_shape, fallback, out_bytes);
  if (!out && out_bytes > 0) return Status::error(RELAX_ERR_INTERNAL, "could not allocate the reducescatter output for '" + d.name + "'");
  return collectives_.reduce_scatter(src, work_buffer_.data(), counts, d.dtype, op, postscale_of(d, size), out);
}

Status Executor::run_compressed(Item& item) {
  const Descriptor& d = item.tensor->first();
  std::unique_ptr<Codec> codec = make_codec(d.codec);
  CompressedAllreduce op;
  op.input = static_cast<const float*>(item.local->input);
  op.output = static_cast<float*>(item.local->output);
  op.count = d.num_elements();
  op.average = d.reduce_op == RELAX_OP_AVERAGE;
  op.worker_error = static_cast<float*>(item.local->aux0);
  op.owner_error = static_cast<float*>(item.local->aux1);
  Status status = compressed_allreduce(collectives_, *codec, op, world_ranks_, work_buffer_);
  if (!status.is_ok()) status.message = "compressed_allreduce '" + d.name + "': " + status.message;
  return status;
}

Status Executor::run_alltoall(Item& item, std::vector<int64_t>& received_splits) {
  const Descriptor& d = item.tensor->first();
  const size_t esize = dtype_size(d.dtype);
  const int size = collectives_.size();
  const size_t me = static_cast<size_t>(collectives_.rank());
  const int64_t row = d.row_elements();
  auto splits_of = [&](const Descriptor& desc) {
    return desc.splits.empty() ? even_counts(desc.dim0(), size) : desc.splits;
  };
  const std::vector<int64_t> my_splits = splits_of(item.local->desc);
  std::vector<int64_t> send_counts, recv_counts;
  received_splits.clear();
  int64_t rows = 0;
  for (int r = 0; r < size; ++r) {
    send_counts.push_back(my_splits[static_cast<size_t>(r)] * row);
    const auto& peer = item.tensor->per_rank[static_cast<size_t>(r)];
    const int64_t from_peer = peer ? splits_of(*peer)[me] : 0;
    received_splits.push_back(from_peer);
    recv_counts.push_back(from_peer * row);
    rows += from_peer;
  }
  const std::vector<int64_t> shape = with_dim0(d.shape, rows);
  const int64_t bytes = rows * row * static_cast<int64_t>(esize);
  std::vector<uint8_t> fallback;
  void* out = allocate_output(item, shape, fallback, bytes);
  if (!out && bytes > 0) return Status::error(RELAX_ERR_INTERNAL, "could not allocate the alltoall output for '" + d.name + "'");
  return collectives_.alltoallv(item.local->input, send_counts, out, recv_counts, esize);
}

}  // namespace relax
