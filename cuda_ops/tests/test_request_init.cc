// Building requests (issue #51): relax_request_init fills each kind's defaults in one place,
// relax_request_member_name names a group's members by one rule, and the header-only
// relax::RequestBuilder the framework bindings use puts every argument in its kind's field.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "relax/relax.h"
#include "relax/request_builder.h"

namespace {

bool all_zero(const void* p, size_t n) {
  const auto* bytes = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (bytes[i] != 0) return false;
  }
  return true;
}

TEST(request_init_sets_each_kinds_defaults) {
  relax_request_t r;
  CHECK_EQ(relax_request_init(&r, RELAX_REQ_ALLREDUCE), RELAX_OK);
  CHECK_EQ(r.type, RELAX_REQ_ALLREDUCE);
  CHECK_EQ(r.args.allreduce.reduce_op, RELAX_OP_AVERAGE);
  CHECK(r.args.allreduce.prescale == 1.0 && r.args.allreduce.postscale == 1.0);
  CHECK(r.name == nullptr && r.input == nullptr && r.output == nullptr && r.ndim == 0 && r.process_set == 0);

  CHECK_EQ(relax_request_init(&r, RELAX_REQ_REDUCESCATTER), RELAX_OK);
  CHECK(r.args.reducescatter.reduce.prescale == 1.0 && r.args.reducescatter.reduce.postscale == 1.0);
  CHECK(r.args.reducescatter.ncounts == 0 && r.args.reducescatter.recv_counts == nullptr);
  CHECK(r.args.reducescatter.inputs.count == 0);

  // The disagreement the bindings had: the compressed all-reduce's input scale defaults to none.
  CHECK_EQ(relax_request_init(&r, RELAX_REQ_COMPRESSED_ALLREDUCE), RELAX_OK);
  CHECK(r.args.compressed_allreduce.prescale == 1.0);
  CHECK_EQ(r.args.compressed_allreduce.reduce_op, RELAX_OP_AVERAGE);
  CHECK(r.args.compressed_allreduce.worker_error == nullptr && r.args.compressed_allreduce.step_scale == nullptr);

  for (int32_t type : {RELAX_REQ_ALLGATHER, RELAX_REQ_BROADCAST, RELAX_REQ_ALLTOALL, RELAX_REQ_BARRIER, RELAX_REQ_JOIN,
                       RELAX_REQ_ADD_PROCESS_SET, RELAX_REQ_REMOVE_PROCESS_SET, RELAX_REQ_NEIGHBOR_AVERAGE,
                       RELAX_REQ_GROUP_AVERAGE}) {
    std::memset(&r, 0xab, sizeof r);  // whatever was there before is overwritten
    CHECK_EQ(relax_request_init(&r, type), RELAX_OK);
    CHECK_EQ(r.type, type);
    CHECK(all_zero(&r.args, sizeof r.args));
    CHECK(r.input_bytes == 0 && r.output_bytes == 0);
  }
}

TEST(request_init_refuses_an_unknown_kind_or_no_request) {
  relax_request_t r;
  std::memset(&r, 0xab, sizeof r);
  CHECK_EQ(relax_request_init(&r, 99), RELAX_ERR_INVALID_ARGUMENT);
  CHECK(std::string(relax_last_error()).find("unknown request type 99") != std::string::npos);
  CHECK(all_zero(&r, sizeof r));
  CHECK_EQ(relax_request_init(nullptr, RELAX_REQ_ALLREDUCE), RELAX_ERR_INVALID_ARGUMENT);
}

TEST(member_names_follow_one_rule) {
  char out[32];
  CHECK_EQ(relax_request_member_name("grads", 1, 3, out, sizeof out), 10);
  CHECK_EQ(std::string(out), "grads.1of3");
  CHECK_EQ(relax_request_member_name("grads", 0, 12, nullptr, 0), 11);  // the length alone
  CHECK_EQ(relax_request_member_name("grads", 10, 12, out, 6), 12);     // cut short, terminated
  CHECK_EQ(std::string(out), "grads");
  CHECK_EQ(relax_request_member_name("grads", 3, 3, out, sizeof out), -1);
  CHECK_EQ(relax_last_error_code(), RELAX_ERR_INVALID_ARGUMENT);
  CHECK_EQ(relax_request_member_name("grads", -1, 3, out, sizeof out), -1);
  CHECK_EQ(relax_request_member_name("grads", 0, 0, out, sizeof out), -1);
  CHECK_EQ(relax_request_member_name(nullptr, 0, 1, out, sizeof out), -1);
  CHECK_EQ(relax_request_member_name("grads", 0, 1, nullptr, 4), -1);
  const std::vector<std::string> names = relax::member_names("g", 2);
  CHECK(names.size() == 2 && names[0] == "g.0of2" && names[1] == "g.1of2");
}

TEST(the_builder_puts_each_argument_in_its_kinds_field) {
  const int64_t shape[2] = {2, 3};
  float data[6] = {};
  relax::RequestBuilder allreduce(RELAX_REQ_ALLREDUCE, "a", 4);
  allreduce.tensor(RELAX_FLOAT32, 2, shape, data, sizeof data).output(data, sizeof data).reduce(RELAX_OP_SUM, 2.0, 0.5);
  const relax_request_t& a = allreduce.get();
  CHECK(a.type == RELAX_REQ_ALLREDUCE && std::string(a.name) == "a" && a.process_set == 4);
  CHECK(a.ndim == 2 && a.shape == shape && a.input == data && a.input_bytes == 24 && a.output_bytes == 24);
  CHECK(a.args.allreduce.reduce_op == RELAX_OP_SUM && a.args.allreduce.prescale == 2.0 &&
        a.args.allreduce.postscale == 0.5);

  relax::RequestBuilder scatter(RELAX_REQ_REDUCESCATTER, "s");
  const void* pieces[2] = {data, data + 2};
  const int64_t counts[2] = {2, 4};
  const int64_t total = 6;
  scatter.pieces(RELAX_FLOAT32, 2, pieces, counts, &total).reduce(RELAX_OP_MAX, 1.0, 1.0);
  const relax_request_t& s = scatter.get();
  CHECK(s.args.reducescatter.reduce.reduce_op == RELAX_OP_MAX && s.args.reducescatter.inputs.count == 2);
  CHECK(s.ndim == 1 && s.shape == &total && s.input == nullptr);

  relax::RequestBuilder gather(RELAX_REQ_ALLGATHER, "g");
  gather.reduce(RELAX_OP_SUM, 3.0, 3.0);  // no reduction in an allgather: nothing is set
  CHECK(all_zero(&gather.get().args, sizeof gather.get().args));

  relax::RequestBuilder compressed(RELAX_REQ_COMPRESSED_ALLREDUCE, "c");
  compressed.compressed(1, RELAX_OP_SUM).error_feedback(data, 24, nullptr, 0);
  const relax_compressed_allreduce_args_t& c = compressed.get().args.compressed_allreduce;
  CHECK(c.codec == 1 && c.reduce_op == RELAX_OP_SUM && c.prescale == 1.0 && c.worker_error == data &&
        c.worker_error_bytes == 24 && c.owner_error == nullptr);
  compressed.input_scale(0.25);
  CHECK(compressed.get().args.compressed_allreduce.prescale == 0.25);

  const int32_t ranks[2] = {1, 2};
  const double weights[2] = {0.25, 0.25};
  relax::RequestBuilder neighbors(RELAX_REQ_NEIGHBOR_AVERAGE, "n");
  neighbors.neighbors(2, ranks, weights, 0.5).choco(1, 0.3, data, 24, nullptr, 0);
  const relax_neighbor_average_args_t& n = neighbors.get().args.neighbor_average;
  CHECK(n.npeers == 2 && n.peers == ranks && n.self_weight == 0.5 && n.codec == 1 && n.consensus_step == 0.3);
  CHECK(n.estimate_self == data && n.estimate_self_bytes == 24);

  relax::RequestBuilder unknown(77, "u");  // kept as given: submitting it fails naming the type
  CHECK_EQ(unknown.get().type, 77);
}

}  // namespace
