#include "engine/coordinator.h"

#include <cstring>

#include "engine/request_kind.h"
#include "util/text.h"

#include <algorithm>
#include <functional>
#include <set>
#include <sstream>

namespace relax {

std::string encode_payload(const RankMessage& message) {
  std::string out;
  encode_u32(static_cast<uint32_t>(message.descriptors.size()), out);
  for (const Descriptor& d : message.descriptors) encode_descriptor(d, out);
  encode_u32(static_cast<uint32_t>(message.stall_aborts.size()), out);
  for (const std::string& name : message.stall_aborts) encode_string(name, out);
  return out;
}

bool decode_payload(const std::string& bytes, RankMessage& message) {
  if (bytes.empty()) return true;
  size_t pos = 0;
  uint32_t n = 0;
  // Counts come from the wire: entries are appended as they decode, never reserved up front,
  // so a corrupt count fails at the end of the bytes instead of allocating for billions.
  if (!decode_u32(bytes, pos, n)) return false;
  message.descriptors.clear();
  for (uint32_t i = 0; i < n; ++i) {
    if (!decode_descriptor(bytes, pos, message.descriptors.emplace_back())) return false;
  }
  if (!decode_u32(bytes, pos, n)) return false;
  message.stall_aborts.clear();
  for (uint32_t i = 0; i < n; ++i) {
    if (!decode_string(bytes, pos, message.stall_aborts.emplace_back())) return false;
  }
  return pos == bytes.size();
}

const Descriptor& ResponseTensor::first() const {
  for (const auto& d : per_rank) {
    if (d) return *d;
  }
  static const Descriptor empty;
  return empty;
}

Coordinator::Coordinator(int size, size_t cache_capacity, std::vector<int> world_ranks, bool joined_gather_nothing)
    : size_(size),
      cache_capacity_(cache_capacity),
      world_ranks_(std::move(world_ranks)),
      joined_gather_nothing_(joined_gather_nothing),
      joined_(static_cast<size_t>(size), false),
      finishing_(static_cast<size_t>(size), false) {}

int Coordinator::world_rank(int rank) const {
  return world_ranks_.empty() ? rank : world_ranks_[static_cast<size_t>(rank)];
}

std::vector<int> Coordinator::world_ranks_of(const std::vector<int>& ranks) const {
  std::vector<int> out;
  for (int r : ranks) out.push_back(world_rank(r));
  return out;
}

int Coordinator::cache_lookup(const Descriptor& d) const {
  // Most lookups repeat the descriptor cached under the same name: compared field by field
  // (scales bitwise, as the encoded key compares them) without building the key.
  auto named = cache_by_name_.find(d.name);
  if (named != cache_by_name_.end()) {
    const Descriptor& c = cache_[named->second];
    if (c == d && std::memcmp(&c.prescale, &d.prescale, sizeof d.prescale) == 0 &&
        std::memcmp(&c.postscale, &d.postscale, sizeof d.postscale) == 0) {
      return static_cast<int>(named->second);
    }
  }
  std::string key;
  encode_descriptor(d, key);
  auto it = cache_index_.find(key);
  return it == cache_index_.end() ? -1 : static_cast<int>(it->second);
}

void Coordinator::add_to_cache(const Descriptor& d) {
  if (cache_.size() >= cache_capacity_) return;
  std::string key;
  encode_descriptor(d, key);
  if (cache_index_.count(key)) return;
  cache_index_.emplace(std::move(key), static_cast<uint32_t>(cache_.size()));
  cache_by_name_[d.name] = static_cast<uint32_t>(cache_.size());
  cache_.push_back(d);
}

void Coordinator::record(int rank, const Descriptor& d, double now, int64_t cache_id) {
  auto it = seq_by_name_.find(d.name);
  Entry* entry;
  if (it == seq_by_name_.end()) {
    const uint64_t seq = next_seq_++;
    seq_by_name_.emplace(d.name, seq);
    entry = &entries_[seq];
    entry->seq = seq;
    entry->tensor.name = d.name;
    entry->tensor.per_rank.resize(static_cast<size_t>(size_));
    entry->first_seen = now;
  } else {
    entry = &entries_[it->second];
  }
  auto& slot = entry->tensor.per_rank[static_cast<size_t>(rank)];
  entry->cache_id = entry->cache_id == kNoCacheId || entry->cache_id == cache_id ? cache_id : -1;
  if (!slot) ++entry->present;
  slot = d;  // a rank cannot have two pending requests with one name (checked at enqueue)
}

bool Coordinator::complete(const Entry& e) const {
  if (e.present == 0) return false;
  for (int r = 0; r < size_; ++r) {
    if (!e.tensor.per_rank[static_cast<size_t>(r)] && !joined_[static_cast<size_t>(r)]) return false;
  }
  return true;
}

namespace {


// "rank 0 sent [2, 3]; ranks [1, 2] sent [4]" — groups ranks (named by `rank_name`) by the
// value of one field.
std::string describe_by_rank(const ResponseTensor& t, const std::function<std::string(const Descriptor&)>& field,
                             const std::function<int(int)>& rank_name) {
  std::map<std::string, std::vector<int>> by_value;
  std::vector<std::string> order;
  for (size_t r = 0; r < t.per_rank.size(); ++r) {
    if (!t.per_rank[r]) continue;
    std::string v = field(*t.per_rank[r]);
    if (!by_value.count(v)) order.push_back(v);
    by_value[v].push_back(rank_name(static_cast<int>(r)));
  }
  std::ostringstream os;
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& ranks = by_value[order[i]];
    os << (i ? "; " : "") << (ranks.size() == 1 ? "rank " : "ranks ")
       << (ranks.size() == 1 ? std::to_string(ranks[0]) : rank_list(ranks)) << " sent " << order[i];
  }
  return os.str();
}

bool all_equal(const ResponseTensor& t, const std::function<std::string(const Descriptor&)>& field) {
  const std::string* first = nullptr;
  std::string first_value;
  for (const auto& d : t.per_rank) {
    if (!d) continue;
    std::string v = field(*d);
    if (!first) {
      first_value = v;
      first = &first_value;
    } else if (v != first_value) {
      return false;
    }
  }
  return true;
}

}  // namespace

Status Coordinator::validate(const ResponseTensor& t, const std::vector<bool>& joined) const {
  using F = std::function<std::string(const Descriptor&)>;
  const std::function<int(int)> name = [this](int r) { return world_rank(r); };
  const std::string quoted = "'" + t.name + "'";
  struct Check {
    const char* what;
    F field;
  };
  std::vector<int> rejecting;  // ranks that rejected the request locally (announce_rejection)
  const Descriptor* rejected = nullptr;
  for (size_t r = 0; r < t.per_rank.size(); ++r) {
    if (!t.per_rank[r] || t.per_rank[r]->rejection.empty()) continue;
    rejecting.push_back(world_rank(static_cast<int>(r)));
    if (!rejected) rejected = &*t.per_rank[r];
  }
  if (rejected) {
    return Status::error(rejected->rejection_code,
                         request_type_name(rejected->type) + " " + quoted + " failed: " +
                             (rejecting.size() == 1 ? "rank " + std::to_string(rejecting[0])
                                                    : "ranks " + rank_list(rejecting)) +
                             " rejected it locally: " + rejected->rejection);
  }
  const F type = [](const Descriptor& d) { return request_type_name(d.type); };
  if (!all_equal(t, type)) {
    return Status::error(RELAX_ERR_MISMATCH, "Mismatched collective operations for " + quoted + ": " +
                                                 describe_by_rank(t, type, name) + ".");
  }
  const Descriptor& d0 = t.first();
  const std::string op = request_type_name(d0.type);
  const RequestKind* kind = request_kind(d0.type);
  if (!kind) return Status::error(RELAX_ERR_INTERNAL, "unknown request type for " + quoted);
  std::vector<Check> checks = {
      {"data types", [](const Descriptor& d) { return dtype_name(d.dtype); }},
      {"group membership",
       [](const Descriptor& d) { return d.group.empty() ? std::string("no group") : "group " + d.group; }},
  };
  for (const AgreementField& field : kind->agreement) checks.push_back({field.what, field.value});
  for (const Check& c : checks) {
    if (!all_equal(t, c.field)) {
      return Status::error(RELAX_ERR_MISMATCH, "Mismatched " + op + " " + c.what + " for " + quoted +
                                                   ": " + describe_by_rank(t, c.field, name) + ".");
    }
  }
  std::vector<int> joined_ranks;
  for (size_t r = 0; r < joined.size(); ++r) {
    if (joined[r] && !t.per_rank[r]) joined_ranks.push_back(world_rank(static_cast<int>(r)));
  }
  if (!joined_ranks.empty() && kind->check_joined) {
    return kind->check_joined(t, JoinedContext{joined, joined_ranks, joined_gather_nothing_, quoted});
  }
  return Status::ok();
}

Response Coordinator::make_response(std::vector<Entry*>& members) {
  Response response;
  response.joined = joined_;
  response.type = members.front()->tensor.first().type;
  for (Entry* e : members) seq_by_name_.erase(e->tensor.name);
  Status status;
  std::vector<bool> fresh;  // members some rank described anew: validated, then cached
  for (Entry* e : members) {
    fresh.push_back(e->cache_id < 0 || joined_count_ > 0);  // joined ranks add checks of their own
    if (fresh.back()) {
      Status s = validate(e->tensor, joined_);
      if (!s.is_ok() && status.is_ok()) status = s;
    }
    response.tensors.push_back(std::move(e->tensor));
  }
  if (!status.is_ok()) {
    response.kind = Response::Kind::Error;
    response.status = status.code;
    response.message = status.message;
  } else {
    for (size_t i = 0; i < response.tensors.size(); ++i) {
      if (!fresh[i]) continue;
      for (const auto& d : response.tensors[i].per_rank) {
        if (d) add_to_cache(*d);
      }
    }
  }
  return response;
}

std::vector<Response> Coordinator::process(const std::vector<RankMessage>& messages, double now) {
  std::vector<Response> responses;
  for (int r = 0; r < size_; ++r) {
    const RankMessage& m = messages[static_cast<size_t>(r)];
    for (uint32_t id : m.cached) {
      if (id < cache_.size()) record(r, cache_[id], now, id);
    }
    for (const Descriptor& d : m.descriptors) record(r, d, now, -1);
  }
  for (int r = 0; r < size_; ++r) {
    const RankMessage& m = messages[static_cast<size_t>(r)];
    if ((m.flags & kFlagShutdown) && !shutdown_) {
      shutdown_ = true;
      shutdown_rank_ = r;
    }
    if (m.flags & kFlagFinishing) finishing_[static_cast<size_t>(r)] = true;
    if ((m.flags & kFlagJoin) && !joined_[static_cast<size_t>(r)]) {
      joined_[static_cast<size_t>(r)] = true;
      ++joined_count_;
      last_joined_ = r;
    }
  }
  // Stall aborts come from rank 0 so that every rank fails the same requests in the same round.
  for (const std::string& name : messages[0].stall_aborts) {
    auto it = seq_by_name_.find(name);
    if (it == seq_by_name_.end()) continue;
    Entry& e = entries_[it->second];
    std::vector<int> submitted, missing;
    split_ranks(e, submitted, missing);
    responses.push_back(error_for(e, RELAX_ERR_STALLED,
                                  "Stalled " + request_type_name(e.tensor.first().type) + " '" + name + "': ranks " +
                                      rank_list(world_ranks_of(missing)) +
                                      " never submitted it within RELAX_OP_TIMEOUT / RELAX_STALL_SHUTDOWN_TIME; one or "
                                      "more ranks may have skipped this operation or stopped."));
    entries_.erase(it->second);
    seq_by_name_.erase(it);
  }

  fail_left_to_finishing_ranks(responses);

  // Ready entries in first-announcement order; a group is emitted when all its members are ready.
  std::map<std::string, std::vector<Entry*>> ready_groups;
  std::map<std::string, int32_t> group_sizes;
  std::vector<uint64_t> done;
  for (auto& [seq, entry] : entries_) {
    if (!complete(entry)) continue;
    const Descriptor& d = entry.tensor.first();
    if (d.group.empty()) {
      std::vector<Entry*> members{&entry};
      responses.push_back(make_response(members));
      done.push_back(seq);
      continue;
    }
    auto& members = ready_groups[d.group];
    members.push_back(&entry);
    if (static_cast<int32_t>(members.size()) == d.group_size) {
      for (Entry* e : members) done.push_back(e->seq);
      responses.push_back(make_response(members));
    }
  }
  for (uint64_t seq : done) entries_.erase(seq);

  bool all_blocked = true;
  for (const RankMessage& m : messages) all_blocked = all_blocked && (m.flags & kFlagBlocked);
  if (all_blocked && responses.empty() && !entries_.empty()) fail_deadlocked(responses);

  if (joined_count_ == size_) {
    Response response;
    response.kind = Response::Kind::JoinDone;
    response.type = RELAX_REQ_JOIN;
    response.last_joined = last_joined_;
    response.joined = joined_;
    responses.push_back(std::move(response));
    std::fill(joined_.begin(), joined_.end(), false);
    joined_count_ = 0;
    last_joined_ = -1;
  }
  return responses;
}

void Coordinator::split_ranks(const Entry& e, std::vector<int>& submitted, std::vector<int>& missing) const {
  for (int r = 0; r < size_; ++r) {
    if (e.tensor.per_rank[static_cast<size_t>(r)]) {
      submitted.push_back(r);
    } else if (!joined_[static_cast<size_t>(r)]) {
      missing.push_back(r);
    }
  }
}

Response Coordinator::error_for(Entry& e, int32_t status, std::string message) const {
  Response response;
  response.kind = Response::Kind::Error;
  response.status = status;
  response.type = e.tensor.first().type;
  response.message = std::move(message);
  response.joined = joined_;
  response.tensors.push_back(std::move(e.tensor));
  return response;
}

void Coordinator::fail_left_to_finishing_ranks(std::vector<Response>& responses) {
  if (std::find(finishing_.begin(), finishing_.end(), true) == finishing_.end()) return;
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    std::vector<int> submitted, missing;
    split_ranks(e, submitted, missing);
    const bool only_finishing = std::all_of(missing.begin(), missing.end(),
                                            [&](int r) { return finishing_[static_cast<size_t>(r)]; });
    if (missing.empty() || !only_finishing) {
      ++it;
      continue;
    }
    seq_by_name_.erase(e.tensor.name);
    responses.push_back(error_for(
        e, RELAX_ERR_SHUTDOWN,
        request_type_name(e.tensor.first().type) + " '" + e.tensor.name + "' cannot complete: ranks " +
            rank_list(world_ranks_of(missing)) +
            " finished training and are shutting down (still serving the relaxed averaging of ranks that train "
            "on), so they will not submit it. Run operations that need every rank before any rank calls "
            "shutdown() or exits."));
    it = entries_.erase(it);
  }
}

void Coordinator::fail_deadlocked(std::vector<Response>& responses) {
  std::string pending;
  constexpr int kNamed = 8;
  int named = 0;
  for (const auto& [seq, entry] : entries_) {
    (void)seq;
    if (named++ == kNamed) {
      pending += "; and " + std::to_string(entries_.size() - kNamed) + " more";
      break;
    }
    std::vector<int> submitted, missing;
    split_ranks(entry, submitted, missing);
    pending += std::string(pending.empty() ? "" : "; ") + request_type_name(entry.tensor.first().type) + " '" +
               entry.tensor.name + "' submitted by ranks " + rank_list(world_ranks_of(submitted)) + ", not by " +
               rank_list(world_ranks_of(missing));
  }
  const std::string message =
      "Deadlock: every rank has been waiting for a collective for RELAX_DEADLOCK_TIME without anything "
      "completing, and none of the pending operations was submitted by every rank, so none can complete: " +
      pending +
      ". The ranks ran collectives in different orders or one skipped an operation (for example after an "
      "exception on some ranks only); names of unnamed operations count calls, so they differ too.";
  for (auto& [seq, entry] : entries_) {
    (void)seq;
    responses.push_back(error_for(entry, RELAX_ERR_STALLED, message));
  }
  entries_.clear();
  seq_by_name_.clear();
}

std::vector<StallInfo> Coordinator::stalled(double now, double age) const {
  std::vector<StallInfo> result;
  for (const auto& [seq, entry] : entries_) {
    (void)seq;
    if (now - entry.first_seen < age) continue;
    StallInfo info;
    info.name = entry.tensor.name;
    info.waited_seconds = now - entry.first_seen;
    split_ranks(entry, info.submitted, info.missing);
    info.submitted = world_ranks_of(info.submitted);
    info.missing = world_ranks_of(info.missing);
    result.push_back(std::move(info));
  }
  return result;
}

}  // namespace relax
