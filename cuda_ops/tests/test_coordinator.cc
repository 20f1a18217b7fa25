// Negotiation logic: readiness, ordering, validation, cache, join, groups, stalls.
#include <string>
#include <utility>
#include <vector>

#include "check.h"
#include "collectives/collectives.h"
#include "engine/coordinator.h"

using relax::Coordinator;
using relax::Descriptor;
using relax::RankMessage;
using relax::Response;

namespace {

Descriptor tensor(const std::string& name, std::vector<int64_t> shape, int32_t dtype = RELAX_FLOAT32) {
  Descriptor d;
  d.name = name;
  d.type = RELAX_REQ_ALLREDUCE;
  d.dtype = dtype;
  d.reduce_op = RELAX_OP_AVERAGE;
  d.shape = std::move(shape);
  return d;
}

// Two members of one atomically negotiated group.
std::pair<Descriptor, Descriptor> group_of_two() {
  Descriptor g0 = tensor("g.0", {1});
  Descriptor g1 = tensor("g.1", {1});
  g0.group = g1.group = "group:g.0:2";
  g0.group_size = g1.group_size = 2;
  return {g0, g1};
}

std::vector<RankMessage> round_of(int size) { return std::vector<RankMessage>(static_cast<size_t>(size)); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(request_runs_only_when_every_rank_submitted_it) {
  Coordinator c(3, 16);
  auto m = round_of(3);
  m[0].descriptors = {tensor("a", {4})};
  m[1].descriptors = {tensor("a", {4})};
  CHECK_EQ(c.process(m, 0.0).size(), size_t{0});
  auto m2 = round_of(3);
  m2[2].descriptors = {tensor("a", {4})};
  auto responses = c.process(m2, 1.0);
  CHECK_EQ(responses.size(), size_t{1});
  CHECK(responses[0].kind == Response::Kind::Execute);
  CHECK_EQ(responses[0].tensors[0].name, std::string("a"));
  CHECK_EQ(c.pending_count(), size_t{0});
}

TEST(ready_requests_run_in_first_announcement_order) {
  Coordinator c(2, 16);
  auto m = round_of(2);
  m[0].descriptors = {tensor("x", {1}), tensor("y", {1})};
  CHECK_EQ(c.process(m, 0).size(), size_t{0});
  auto m2 = round_of(2);
  m2[1].descriptors = {tensor("y", {1}), tensor("x", {1})};  // other order on rank 1
  auto r = c.process(m2, 0);
  if (r.size() != 2) return check::fail(__FILE__, __LINE__, "expected two responses");
  CHECK_EQ(r[0].tensors[0].name, std::string("x"));
  CHECK_EQ(r[1].tensors[0].name, std::string("y"));
}

TEST(shape_mismatch_fails_on_every_rank_naming_tensor_and_ranks) {
  Coordinator c(3, 16);
  auto m = round_of(3);
  m[0].descriptors = {tensor("w", {2, 3})};
  m[1].descriptors = {tensor("w", {2, 3})};
  m[2].descriptors = {tensor("w", {4})};
  auto r = c.process(m, 0);
  CHECK_EQ(r.size(), size_t{1});
  CHECK(r[0].kind == Response::Kind::Error);
  CHECK_EQ(r[0].status, static_cast<int32_t>(RELAX_ERR_MISMATCH));
  CHECK(contains(r[0].message, "'w'"));
  CHECK(contains(r[0].message, "shapes"));
  CHECK(contains(r[0].message, "ranks [0, 1] sent [2, 3]"));
  CHECK(contains(r[0].message, "rank 2 sent [4]"));
}

TEST(dtype_op_and_type_mismatches_are_named) {
  Coordinator c(2, 16);
  auto m = round_of(2);
  m[0].descriptors = {tensor("d", {2}, RELAX_FLOAT32), tensor("o", {2})};
  Descriptor other_op = tensor("o", {2});
  other_op.reduce_op = RELAX_OP_SUM;
  Descriptor bcast = tensor("t", {2});
  bcast.type = RELAX_REQ_BROADCAST;
  m[0].descriptors.push_back(tensor("t", {2}));
  m[1].descriptors = {tensor("d", {2}, RELAX_FLOAT64), other_op, bcast};
  auto r = c.process(m, 0);
  CHECK_EQ(r.size(), size_t{3});
  CHECK(contains(r[0].message, "data types") && contains(r[0].message, "float64"));
  CHECK(contains(r[1].message, "reduction ops") && contains(r[1].message, "Sum"));
  CHECK(contains(r[2].message, "collective operations") && contains(r[2].message, "broadcast"));
}

TEST(allgather_accepts_different_first_dimensions_only) {
  Coordinator c(2, 16);
  Descriptor a = tensor("g", {2, 5});
  a.type = RELAX_REQ_ALLGATHER;
  Descriptor b = a;
  b.shape = {7, 5};
  Descriptor bad = a;
  bad.name = "h";
  bad.shape = {2, 4};
  Descriptor good = a;
  good.name = "h";
  auto m = round_of(2);
  m[0].descriptors = {a, good};
  m[1].descriptors = {b, bad};
  auto r = c.process(m, 0);
  CHECK(r[0].kind == Response::Kind::Execute);
  CHECK(r[1].kind == Response::Kind::Error);
  CHECK(contains(r[1].message, "beyond the first dimension"));
}

TEST(executed_requests_are_cached_and_announced_by_id) {
  Coordinator c(2, 16);
  auto m = round_of(2);
  m[0].descriptors = {tensor("a", {3})};
  m[1].descriptors = {tensor("a", {3})};
  c.process(m, 0);
  const int id = c.cache_lookup(tensor("a", {3}));
  CHECK(id >= 0);
  CHECK_EQ(c.cache_lookup(tensor("a", {4})), -1);
  auto m2 = round_of(2);
  m2[0].cached = {static_cast<uint32_t>(id)};
  m2[1].cached = {static_cast<uint32_t>(id)};
  auto r = c.process(m2, 0);
  CHECK_EQ(r.size(), size_t{1});
  CHECK(r[0].kind == Response::Kind::Execute);
}

TEST(a_name_announced_by_different_cache_ids_or_a_fresh_descriptor_is_still_validated) {
  Coordinator c(2, 16);
  for (int64_t length : {3, 4}) {  // two shapes of one name, both cached
    auto m = round_of(2);
    m[0].descriptors = {tensor("a", {length})};
    m[1].descriptors = {tensor("a", {length})};
    c.process(m, 0);
  }
  const int three = c.cache_lookup(tensor("a", {3}));
  const int four = c.cache_lookup(tensor("a", {4}));
  CHECK(three >= 0 && four >= 0 && three != four);
  auto by_ids = round_of(2);
  by_ids[0].cached = {static_cast<uint32_t>(three)};
  by_ids[1].cached = {static_cast<uint32_t>(four)};
  auto r = c.process(by_ids, 0);
  CHECK_EQ(r.size(), size_t{1});
  CHECK(r[0].kind == Response::Kind::Error && contains(r[0].message, "shapes"));
  auto mixed = round_of(2);
  mixed[0].cached = {static_cast<uint32_t>(three)};
  mixed[1].descriptors = {tensor("a", {5})};
  r = c.process(mixed, 0);
  CHECK_EQ(r.size(), size_t{1});
  CHECK(r[0].kind == Response::Kind::Error && contains(r[0].message, "rank 1 sent [5]"));
}

TEST(cache_capacity_is_respected) {
  Coordinator c(1, 2);
  auto m = round_of(1);
  m[0].descriptors = {tensor("a", {1}), tensor("b", {1}), tensor("c", {1})};
  c.process(m, 0);
  CHECK_EQ(c.cache_size(), size_t{2});
}

TEST(joined_ranks_count_as_ready_and_join_completes_with_last_rank) {
  Coordinator c(3, 16);
  auto m = round_of(3);
  m[1].flags = relax::kFlagJoin;
  m[0].descriptors = {tensor("a", {2})};
  CHECK_EQ(c.process(m, 0).size(), size_t{0});
  auto m2 = round_of(3);
  m2[2].descriptors = {tensor("a", {2})};
  auto r = c.process(m2, 0);
  CHECK_EQ(r.size(), size_t{1});
  CHECK(!r[0].tensors[0].per_rank[1].has_value());
  CHECK(r[0].joined[1]);
  auto m3 = round_of(3);
  m3[2].flags = relax::kFlagJoin;
  m3[0].flags = relax::kFlagJoin;
  auto done = c.process(m3, 0);
  CHECK_EQ(done.size(), size_t{1});
  CHECK(done[0].kind == Response::Kind::JoinDone);
  CHECK_EQ(done[0].last_joined, 2);
  CHECK_EQ(c.joined_count(), 0);
}

TEST(group_runs_atomically_when_all_members_are_ready) {
  Coordinator c(2, 16);
  const auto [g0, g1] = group_of_two();
  auto m = round_of(2);
  m[0].descriptors = {g0, g1};
  m[1].descriptors = {g0};
  CHECK_EQ(c.process(m, 0).size(), size_t{0});
  auto m2 = round_of(2);
  m2[1].descriptors = {g1};
  auto r = c.process(m2, 0);
  CHECK_EQ(r.size(), size_t{1});
  CHECK_EQ(r[0].tensors.size(), size_t{2});
}

TEST(a_local_rejection_fails_the_request_on_every_rank_when_it_completes) {
  Coordinator c(3, 16);
  Descriptor placeholder;  // what announce_rejection submits: name, type and why
  placeholder.name = "a";
  placeholder.type = RELAX_REQ_ALLREDUCE;
  placeholder.rejection = "unsupported data type complex64";
  placeholder.rejection_code = RELAX_ERR_INVALID_ARGUMENT;
  auto m = round_of(3);
  m[0].descriptors = {tensor("a", {4})};
  m[1].descriptors = {placeholder};
  CHECK_EQ(c.process(m, 0).size(), size_t{0});  // rank 2 has not submitted yet
  auto m2 = round_of(3);
  m2[2].descriptors = {tensor("a", {4})};
  auto r = c.process(m2, 0);
  CHECK_EQ(r.size(), size_t{1});
  CHECK(r[0].kind == Response::Kind::Error);
  CHECK_EQ(r[0].status, RELAX_ERR_INVALID_ARGUMENT);
  CHECK(contains(r[0].message, "'a'") && contains(r[0].message, "rank 1 rejected it locally") &&
        contains(r[0].message, "complex64"));
  CHECK_EQ(c.cache_lookup(tensor("a", {4})), -1);  // a failed request is not cached
}

TEST(a_rejected_group_member_fails_the_whole_group) {
  Coordinator c(2, 16);
  const auto [g0, g1] = group_of_two();
  Descriptor p0 = g0, p1 = g1;
  p0.rejection = p1.rejection = "bad";
  p0.rejection_code = p1.rejection_code = RELAX_ERR_INVALID_ARGUMENT;
  auto m = round_of(2);
  m[0].descriptors = {g0, g1};
  m[1].descriptors = {p0, p1};
  auto r = c.process(m, 0);
  CHECK_EQ(r.size(), size_t{1});
  CHECK(r[0].kind == Response::Kind::Error && r[0].tensors.size() == 2);
}

TEST(stall_report_names_missing_ranks_and_aborts_fail_everywhere) {
  Coordinator c(3, 16);
  auto m = round_of(3);
  m[0].descriptors = {tensor("slow", {1})};
  m[2].descriptors = {tensor("slow", {1})};
  c.process(m, 10.0);
  CHECK(c.stalled(20.0, 60.0).empty());
  auto stalled = c.stalled(80.0, 60.0);
  CHECK_EQ(stalled.size(), size_t{1});
  CHECK_EQ(stalled[0].missing.size(), size_t{1});
  CHECK_EQ(stalled[0].missing[0], 1);
  auto m2 = round_of(3);
  m2[0].stall_aborts = {"slow"};
  auto r = c.process(m2, 81.0);
  CHECK_EQ(r.size(), size_t{1});
  CHECK_EQ(r[0].status, static_cast<int32_t>(RELAX_ERR_STALLED));
  CHECK(contains(r[0].message, "ranks [1]"));
  CHECK_EQ(c.pending_count(), size_t{0});
}

TEST(every_rank_blocked_with_nothing_ready_fails_all_pending_naming_who_submitted) {
  Coordinator c(3, 16);
  auto m = round_of(3);
  m[0].descriptors = {tensor("a", {1})};
  m[1].descriptors = {tensor("b", {1})};
  m[2].descriptors = {tensor("b", {1})};
  CHECK(c.process(m, 0.0).empty());
  auto some_blocked = round_of(3);
  some_blocked[0].flags = some_blocked[1].flags = relax::kFlagBlocked;
  CHECK(c.process(some_blocked, 1.0).empty());  // rank 2 may still submit 'a'
  CHECK_EQ(c.pending_count(), size_t{2});
  auto all_blocked = round_of(3);
  for (auto& message : all_blocked) message.flags = relax::kFlagBlocked;
  auto r = c.process(all_blocked, 2.0);
  CHECK_EQ(r.size(), size_t{2});
  for (const Response& response : r) {
    CHECK(response.kind == Response::Kind::Error);
    CHECK_EQ(response.status, static_cast<int32_t>(RELAX_ERR_STALLED));
    CHECK(contains(response.message, "'a' submitted by ranks [0], not by [1, 2]"));
    CHECK(contains(response.message, "'b' submitted by ranks [1, 2], not by [0]"));
  }
  CHECK_EQ(c.pending_count(), size_t{0});
}

TEST(blocked_ranks_whose_request_becomes_ready_are_not_deadlocked) {
  Coordinator c(2, 16);
  auto m = round_of(2);
  m[0].descriptors = {tensor("a", {1}), tensor("late", {1})};
  c.process(m, 0.0);
  auto m2 = round_of(2);
  m2[0].flags = m2[1].flags = relax::kFlagBlocked;
  m2[1].descriptors = {tensor("a", {1})};  // arrives in the round both say they are blocked
  auto r = c.process(m2, 1.0);
  CHECK_EQ(r.size(), size_t{1});
  CHECK(r[0].kind == Response::Kind::Execute);
  CHECK_EQ(c.pending_count(), size_t{1});  // 'late' waits for the next round's verdict
}

TEST(a_request_waiting_only_for_finishing_ranks_fails_and_others_wait) {
  Coordinator c(3, 16);
  auto m = round_of(3);
  m[0].descriptors = {tensor("after", {1})};
  m[2].descriptors = {tensor("after", {1})};
  m[0].flags = relax::kFlagFinishing;  // rank 0 finishing: nothing it must still submit
  m[1].descriptors = {tensor("other", {1})};
  auto r = c.process(m, 0.0);
  CHECK(r.empty());  // 'after' waits for rank 1, which still trains
  auto m2 = round_of(3);
  m2[1].flags = relax::kFlagFinishing;  // now rank 1 finishes too
  r = c.process(m2, 1.0);
  CHECK_EQ(r.size(), size_t{1});
  CHECK(r[0].kind == Response::Kind::Error);
  CHECK_EQ(r[0].status, static_cast<int32_t>(RELAX_ERR_SHUTDOWN));
  CHECK(contains(r[0].message, "'after' cannot complete: ranks [1] finished training"));
  CHECK_EQ(c.pending_count(), size_t{1});  // 'other' still waits for rank 2, which trains on
}

TEST(shutdown_flag_is_seen_by_everyone) {
  Coordinator c(2, 4);
  auto m = round_of(2);
  m[1].flags = relax::kFlagShutdown;
  c.process(m, 0);
  CHECK(c.shutdown_requested());
  CHECK_EQ(c.shutdown_rank(), 1);
}

TEST(payload_round_trips) {
  RankMessage m;
  Descriptor d = tensor("name with spaces", {3, 0, 2}, RELAX_BFLOAT16);
  d.splits = {1, 2};
  d.prescale = 0.25;
  d.group = "grp";
  d.group_size = 3;
  d.rejection = "unsupported dtype";
  d.rejection_code = RELAX_ERR_INVALID_ARGUMENT;
  m.descriptors = {d, tensor("b", {})};
  m.stall_aborts = {"x", "y"};
  RankMessage back;
  CHECK(relax::decode_payload(relax::encode_payload(m), back));
  CHECK(back.descriptors.size() == 2 && back.descriptors[0] == d);
  CHECK(back.stall_aborts == m.stall_aborts);
  std::string truncated = relax::encode_payload(m);
  truncated.resize(truncated.size() - 3);
  RankMessage broken;
  CHECK(!relax::decode_payload(truncated, broken));
}

TEST(even_counts_differ_by_at_most_one_first_blocks_larger) {
  CHECK(relax::even_counts(10, 4) == std::vector<int64_t>({3, 3, 2, 2}));
  CHECK(relax::even_counts(2, 4) == std::vector<int64_t>({1, 1, 0, 0}));
  CHECK(relax::even_counts(0, 3) == std::vector<int64_t>({0, 0, 0}));
  CHECK(relax::block_offsets({3, 3, 2, 2}) == std::vector<int64_t>({0, 3, 6, 8}));
}

TEST(step_scales_travel_in_the_descriptor_and_must_agree) {
  Descriptor scaled = tensor("s", {6});
  scaled.type = RELAX_REQ_COMPRESSED_ALLREDUCE;
  scaled.scale_shapes = {2, 3};
  scaled.scale_floor = 0.1;
  scaled.scale_decay = 0.5;
  std::string wire;
  relax::encode_descriptor(scaled, wire);
  Descriptor decoded;
  size_t pos = 0;
  CHECK(relax::decode_descriptor(wire, pos, decoded) && pos == wire.size());
  CHECK(decoded == scaled);

  Coordinator c(2, 16);
  auto m = round_of(2);
  Descriptor other = scaled;
  other.scale_shapes = {3, 2};
  m[0].descriptors = {scaled};
  m[1].descriptors = {other};
  auto r = c.process(m, 0);
  CHECK_EQ(r.size(), size_t{1});
  CHECK(contains(r[0].message, "step scales") && contains(r[0].message, "2x3") && contains(r[0].message, "3x2"));
}
