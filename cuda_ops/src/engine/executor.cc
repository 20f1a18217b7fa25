#include "engine/executor.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <exception>
#include <utility>

#include "collectives/adasum.h"
#include "collectives/reduce.h"
#include "engine/requests/kind_support.h"

namespace relax {
namespace {

bool fuses(int32_t type) {
  const RequestKind* kind = request_kind(type);
  return kind && kind->fuses;
}

bool same_fusion_key(const Descriptor& a, const Descriptor& b) {
  return a.dtype == b.dtype && a.reduce_op == b.reduce_op && a.prescale == b.prescale && a.postscale == b.postscale;
}

// Whether every tensor of `items` is this rank's own and none shares memory with another, so they
// can be all-reduced where they lie: a result written over another tensor's input before that
// input is read would change its sum (the fusion buffer reads every input first).
bool lie_apart(const std::vector<ExecItem>& items, size_t esize) {
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  for (const ExecItem& item : items) {
    if (!item.local) return false;  // a joined rank's share is made up, not read
    const uintptr_t bytes = static_cast<uintptr_t>(item.tensor->first().num_elements()) * esize;
    if (bytes == 0) continue;
    const auto in = reinterpret_cast<uintptr_t>(item.local->input);
    const auto out = reinterpret_cast<uintptr_t>(item.local->output);
    ranges.emplace_back(in, in + bytes);
    if (out != in) ranges.emplace_back(out, out + bytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) return false;
  }
  return true;
}

// One tensor of a fused operation: this rank's request (null: it contributes the identity, as a
// joined rank or a rank leaving the fast path does) and its element count.
struct FusedPart {
  LocalRequest* local;
  int64_t elements;
};

// Lays the parts' inputs end to end from `p` (the identity of `op` where there is no request).
uint8_t* pack_fused(uint8_t* p, const std::vector<FusedPart>& parts, size_t esize, int32_t dtype, int32_t op) {
  for (const FusedPart& part : parts) {
    if (!part.local) {
      fill_identity(p, part.elements, dtype, op);
    } else if (part.elements > 0) {
      std::memcpy(p, part.local->input, static_cast<size_t>(part.elements) * esize);
    }
    p += part.elements * static_cast<int64_t>(esize);
  }
  return p;
}

// Copies each part's share of the buffer at `p` to its request's output.
void unpack_fused(const uint8_t* p, const std::vector<FusedPart>& parts, size_t esize) {
  for (const FusedPart& part : parts) {
    if (part.local && part.elements > 0) std::memcpy(part.local->output, p, static_cast<size_t>(part.elements) * esize);
    p += part.elements * static_cast<int64_t>(esize);
  }
}

// A float32 or float64 element (the fast path's flag).
void set_float_element(uint8_t* p, int32_t dtype, double value) {
  if (dtype == RELAX_FLOAT64) {
    std::memcpy(p, &value, sizeof value);
  } else {
    const float f = static_cast<float>(value);
    std::memcpy(p, &f, sizeof f);
  }
}

double float_element(const uint8_t* p, int32_t dtype) {
  if (dtype == RELAX_FLOAT64) {
    double value = 0;
    std::memcpy(&value, p, sizeof value);
    return value;
  }
  float f = 0;
  std::memcpy(&f, p, sizeof f);
  return f;
}

std::vector<FusedPart> parts_of(const std::vector<ExecItem>& items) {
  std::vector<FusedPart> parts;
  parts.reserve(items.size());
  for (const ExecItem& item : items) parts.push_back({item.local, item.tensor->first().num_elements()});
  return parts;
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

void Executor::trace(const std::vector<const Descriptor*>& descs, const char* phase, double start) {
  if (!timeline_.active()) return;
  const double end = steady_seconds();
  for (const Descriptor* d : descs) timeline_.record(d->name, request_type_name(d->type), phase, start, end);
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
    if (response.kind == Response::Kind::Execute && fuses(response.type)) {
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
    const RequestKind* kind = request_kind(response.type);
    for (const ResponseTensor& t : response.tensors) {
      Item item{&t, find(t.name)};
      Status status;
      std::vector<int64_t> received_splits;
      const double start = steady_seconds();
      if (!kind || kind->lane != Lane::kNegotiated) {
        status = Status::error(RELAX_ERR_INTERNAL, "unexpected request type " + request_type_name(response.type));
      } else if (kind->run) {  // kinds without one have nothing left once negotiated (barrier)
        try {
          RunContext ctx{collectives_, world_ranks_, work_buffer_};
          status = kind->run(ctx, item, received_splits);
        } catch (const std::exception& e) {
          status = Status::error(RELAX_ERR_INTERNAL, e.what());
        }
        if (timeline_.active()) {  // the phase name costs an allocation: only when someone records it
          std::string phase = kind->name;
          for (char& c : phase) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
          trace({item}, phase.c_str(), start);
        }
      }
      complete(item, status, -1, std::move(received_splits));
    }
  }
  flush();
}

void Executor::run_inline_allreduce(PendingMap& pending) {
  pending_ = &pending;
  Item item{nullptr, &pending.begin()->second};
  const Descriptor& d = item.local->desc;
  collectives_.reduce_inline(item.local->output, d.num_elements(), d.dtype, kinds::reduction_of(d.reduce_op),
                             kinds::postscale_of(d, collectives_.size()));
  complete(item, Status::ok());
}

Status Executor::run_fast_bucket(const std::vector<LocalRequest*>& members,
                                 const std::vector<const Descriptor*>& descs, bool leaving, bool& left) {
  const Descriptor& d = *descs.front();
  const size_t esize = dtype_size(d.dtype);
  std::vector<FusedPart> parts;
  parts.reserve(descs.size());
  int64_t total = 0;
  for (size_t i = 0; i < descs.size(); ++i) {
    parts.push_back({members[i], descs[i]->num_elements()});
    total += parts.back().elements;
  }
  const size_t bytes = static_cast<size_t>(total + 1) * esize;
  if (fusion_buffer_.size() < bytes) fusion_buffer_.resize(bytes);
  double phase_start = steady_seconds();
  uint8_t* flag_at = pack_fused(fusion_buffer_.data(), parts, esize, d.dtype, RELAX_OP_SUM);
  // The flag: 1 or 0, exact in either type; the sum of flags times the postscale is 0 only when
  // no rank is leaving.
  set_float_element(flag_at, d.dtype, leaving ? 1.0 : 0.0);
  trace(descs, "MEMCPY_IN_FUSION_BUFFER", phase_start);
  phase_start = steady_seconds();
  Status status = collectives_.allreduce(fusion_buffer_.data(), fusion_buffer_.data(), total + 1, d.dtype,
                                         kinds::reduction_of(d.reduce_op), kinds::postscale_of(d, collectives_.size()));
  trace(descs, "FAST_ALLREDUCE", phase_start);
  if (!status.is_ok()) return status;
  left = float_element(flag_at, d.dtype) != 0;
  if (left) return Status::ok();
  phase_start = steady_seconds();
  unpack_fused(fusion_buffer_.data(), parts, esize);
  trace(descs, "MEMCPY_OUT_FUSION_BUFFER", phase_start);
  return Status::ok();
}

void Executor::run_allreduce_batch(std::vector<Item>& items) {
  size_t i = 0;
  while (i < items.size()) {
    const Descriptor& key = items[i].tensor->first();
    int64_t bytes = kinds::byte_size(key);
    size_t j = i + 1;
    while (j < items.size() && same_fusion_key(items[j].tensor->first(), key) &&
           bytes + kinds::byte_size(items[j].tensor->first()) <= config_.fusion_threshold_bytes) {
      bytes += kinds::byte_size(items[j].tensor->first());
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
  const int32_t op = kinds::reduction_of(d.reduce_op);
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
  } else if (d.prescale == 1.0 && d.reduce_op != RELAX_OP_ADASUM &&
             collectives_.reduces_pieces(total * static_cast<int64_t>(esize)) && lie_apart(items, esize)) {
    // Through shared memory or the TCP ring each tensor is read and written where it lies:
    // copying them into one buffer and back would move every byte twice more.
    std::vector<Piece> pieces;
    pieces.reserve(items.size());
    for (const Item& item : items) {
      const int64_t n = item.tensor->first().num_elements();
      pieces.push_back({item.local->input, item.local->output, n * static_cast<int64_t>(esize)});
    }
    Status status =
        collectives_.allreduce_pieces(std::move(pieces), d.dtype, op, kinds::postscale_of(d, collectives_.size()));
    trace(items, "ALLREDUCE", phase_start);
    return status;
  } else {
    if (fusion_buffer_.size() < static_cast<size_t>(total) * esize) fusion_buffer_.resize(static_cast<size_t>(total) * esize);
    pack_fused(fusion_buffer_.data(), parts_of(items), esize, d.dtype, op);  // (a joined rank contributes nothing)
    buf = fusion_buffer_.data();
    src = buf;
    trace(items, "MEMCPY_IN_FUSION_BUFFER", phase_start);
    phase_start = steady_seconds();
  }
  if (d.prescale != 1.0) scale_buffer(buf, total, d.dtype, d.prescale);
  Status status;
  if (d.reduce_op == RELAX_OP_ADASUM) {  // combined per tensor (collectives/adasum.h), never divided by size
    std::vector<int64_t> counts;
    for (const Item& item : items) counts.push_back(item.tensor->first().num_elements());
    status = adasum_allreduce(collectives_, src, buf, counts, d.dtype, d.postscale);
  } else {
    status = collectives_.allreduce(src, buf, total, d.dtype, op, kinds::postscale_of(d, collectives_.size()));
  }
  trace(items, "ALLREDUCE", phase_start);
  if (fused && status.is_ok()) {
    phase_start = steady_seconds();
    unpack_fused(fusion_buffer_.data(), parts_of(items), esize);
    trace(items, "MEMCPY_OUT_FUSION_BUFFER", phase_start);
  }
  return status;
}

}  // namespace relax
