#include "util/types.h"

#include <chrono>
#include <cstring>
#include <ctime>
#include <sstream>

#include "util/text.h"

namespace relax {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double coarse_seconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

size_t dtype_size(int32_t dtype) {
  switch (dtype) {
    case RELAX_FLOAT32: return 4;
    case RELAX_FLOAT64: return 8;
    case RELAX_FLOAT16: return 2;
    case RELAX_BFLOAT16: return 2;
    case RELAX_INT32: return 4;
    case RELAX_INT64: return 8;
    case RELAX_UINT8: return 1;
    case RELAX_INT8: return 1;
    case RELAX_BOOL: return 1;
    case RELAX_INT16: return 2;
    case RELAX_UINT16: return 2;
    default: return 0;
  }
}

bool dtype_is_valid(int32_t dtype) { return dtype_size(dtype) != 0; }

bool dtype_is_floating(int32_t dtype) {
  return dtype == RELAX_FLOAT32 || dtype == RELAX_FLOAT64 || dtype == RELAX_FLOAT16 ||
         dtype == RELAX_BFLOAT16;
}

std::string dtype_name(int32_t dtype) {
  switch (dtype) {
    case RELAX_FLOAT32: return "float32";
    case RELAX_FLOAT64: return "float64";
    case RELAX_FLOAT16: return "float16";
    case RELAX_BFLOAT16: return "bfloat16";
    case RELAX_INT32: return "int32";
    case RELAX_INT64: return "int64";
    case RELAX_UINT8: return "uint8";
    case RELAX_INT8: return "int8";
    case RELAX_BOOL: return "bool";
    case RELAX_INT16: return "int16";
    case RELAX_UINT16: return "uint16";
    default: return "dtype(" + std::to_string(dtype) + ")";
  }
}

std::string reduce_op_name(int32_t op) {
  switch (op) {
    case RELAX_OP_AVERAGE: return "Average";
    case RELAX_OP_SUM: return "Sum";
    case RELAX_OP_ADASUM: return "Adasum";
    case RELAX_OP_MIN: return "Min";
    case RELAX_OP_MAX: return "Max";
    case RELAX_OP_PRODUCT: return "Product";
    default: return "op(" + std::to_string(op) + ")";
  }
}

std::string shape_string(const std::vector<int64_t>& shape) { return bracketed_list(shape); }

bool checked_tensor_size(const std::vector<int64_t>& shape, size_t element_size, int64_t& elements, int64_t& bytes,
                         std::string& why) {
  for (int64_t dim : shape) {
    if (dim < 0) {
      why = "negative dimension in shape " + shape_string(shape);
      return false;
    }
  }
  // The product of the non-zero dimensions must fit, with the element size: then so does every
  // partial product in any order (num_elements, row_elements, dim0 * row), even for an empty
  // tensor such as [0, 2^62, 2^62] whose rows alone would overflow.
  int64_t nonzero = 1;
  bool empty = false;
  for (int64_t dim : shape) {
    if (dim == 0) {
      empty = true;
    } else if (!checked_mul(nonzero, dim, nonzero)) {
      why = "shape " + shape_string(shape) + " has more elements than fit in int64";
      return false;
    }
  }
  int64_t b = 0;
  if (!checked_mul(nonzero, static_cast<int64_t>(element_size), b)) {
    why = "shape " + shape_string(shape) + " has " + std::to_string(nonzero) + " elements of " +
          std::to_string(element_size) + " bytes: more bytes than fit in int64";
    return false;
  }
  elements = empty ? 0 : nonzero;
  bytes = empty ? 0 : b;
  return true;
}

int64_t Descriptor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Descriptor::row_elements() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

bool Descriptor::operator==(const Descriptor& o) const {
  return name == o.name && type == o.type && dtype == o.dtype && reduce_op == o.reduce_op &&
         root_rank == o.root_rank && prescale == o.prescale && postscale == o.postscale &&
         shape == o.shape && splits == o.splits && recv_counts == o.recv_counts &&
         group == o.group && group_size == o.group_size && codec == o.codec && flags == o.flags &&
         scale_shapes == o.scale_shapes && scale_floor == o.scale_floor && scale_decay == o.scale_decay &&
         rejection == o.rejection && rejection_code == o.rejection_code;
}

void encode_u32(uint32_t v, std::string& out) { out.append(reinterpret_cast<const char*>(&v), 4); }
void encode_i64(int64_t v, std::string& out) { out.append(reinterpret_cast<const char*>(&v), 8); }

void encode_string(const std::string& s, std::string& out) {
  encode_u32(static_cast<uint32_t>(s.size()), out);
  out.append(s);
}

bool decode_u32(const std::string& in, size_t& pos, uint32_t& v) {
  if (pos + 4 > in.size()) return false;
  std::memcpy(&v, in.data() + pos, 4);
  pos += 4;
  return true;
}

bool decode_i64(const std::string& in, size_t& pos, int64_t& v) {
  if (pos + 8 > in.size()) return false;
  std::memcpy(&v, in.data() + pos, 8);
  pos += 8;
  return true;
}

bool decode_string(const std::string& in, size_t& pos, std::string& s) {
  uint32_t n = 0;
  if (!decode_u32(in, pos, n) || pos + n > in.size()) return false;
  s.assign(in, pos, n);
  pos += n;
  return true;
}

namespace {

void encode_vector(const std::vector<int64_t>& v, std::string& out) {
  encode_u32(static_cast<uint32_t>(v.size()), out);
  for (int64_t x : v) encode_i64(x, out);
}

bool decode_vector(const std::string& in, size_t& pos, std::vector<int64_t>& v) {
  uint32_t n = 0;
  if (!decode_u32(in, pos, n) || pos + 8ull * n > in.size()) return false;
  v.resize(n);
  for (uint32_t i = 0; i < n; ++i) decode_i64(in, pos, v[i]);
  return true;
}

void encode_double(double x, std::string& out) {
  int64_t bits;
  std::memcpy(&bits, &x, 8);
  encode_i64(bits, out);
}

bool decode_double(const std::string& in, size_t& pos, double& x) {
  int64_t bits;
  if (!decode_i64(in, pos, bits)) return false;
  std::memcpy(&x, &bits, 8);
  return true;
}

}  // namespace

void encode_descriptor(const Descriptor& d, std::string& out) {
  encode_string(d.name, out);
  encode_u32(static_cast<uint32_t>(d.type), out);
  encode_u32(static_cast<uint32_t>(d.dtype), out);
  encode_u32(static_cast<uint32_t>(d.reduce_op), out);
  encode_u32(static_cast<uint32_t>(d.root_rank), out);
  encode_double(d.prescale, out);
  encode_double(d.postscale, out);
  encode_vector(d.shape, out);
  encode_vector(d.splits, out);
  encode_vector(d.recv_counts, out);
  encode_string(d.group, out);
  encode_u32(static_cast<uint32_t>(d.group_size), out);
  encode_u32(static_cast<uint32_t>(d.codec), out);
  encode_u32(static_cast<uint32_t>(d.flags), out);
  encode_vector(d.scale_shapes, out);
  encode_double(d.scale_floor, out);
  encode_double(d.scale_decay, out);
  encode_string(d.rejection, out);
  encode_u32(static_cast<uint32_t>(d.rejection_code), out);
}

bool decode_descriptor(const std::string& in, size_t& pos, Descriptor& d) {
  uint32_t type, dtype, op, root, group_size, codec, flags, rejection_code;
  return decode_string(in, pos, d.name) && decode_u32(in, pos, type) &&
         decode_u32(in, pos, dtype) && decode_u32(in, pos, op) && decode_u32(in, pos, root) &&
         decode_double(in, pos, d.prescale) && decode_double(in, pos, d.postscale) &&
         decode_vector(in, pos, d.shape) && decode_vector(in, pos, d.splits) &&
         decode_vector(in, pos, d.recv_counts) && decode_string(in, pos, d.group) &&
         decode_u32(in, pos, group_size) && decode_u32(in, pos, codec) && decode_u32(in, pos, flags) &&
         decode_vector(in, pos, d.scale_shapes) && decode_double(in, pos, d.scale_floor) &&
         decode_double(in, pos, d.scale_decay) && decode_string(in, pos, d.rejection) && decode_u32(in, pos, rejection_code) &&
         ((d.type = static_cast<int32_t>(type)), (d.dtype = static_cast<int32_t>(dtype)),
          (d.reduce_op = static_cast<int32_t>(op)), (d.root_rank = static_cast<int32_t>(root)),
          (d.group_size = static_cast<int32_t>(group_size)), (d.codec = static_cast<int32_t>(codec)),
          (d.flags = static_cast<int32_t>(flags)),
          (d.rejection_code = static_cast<int32_t>(rejection_code)), true);
}

}  // namespace relax
