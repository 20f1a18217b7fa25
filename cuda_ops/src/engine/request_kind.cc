#include "engine/request_kind.h"

#include <cstdio>
#include <cstdlib>
#include <vector>
#include <memory>

namespace relax {
namespace {

// Constructed on first use: kind files register during static initialization, in any order.
// Indexed by type (the types are small numbers) and read-only once the library is loaded, so a
// lookup is one load and needs no lock: every request does several.
std::vector<std::unique_ptr<RequestKind>>& kinds() {
  static std::vector<std::unique_ptr<RequestKind>> table;
  return table;
}

}  // namespace

RequestKindRegistration::RequestKindRegistration(RequestKind kind) {
  auto& table = kinds();
  if (kind.type < 0 || kind.type > 1023) {
    std::fprintf(stderr, "relaxlib: request kind '%s' has type %d, outside [0, 1023]\n", kind.name, kind.type);
    std::abort();
  }
  const size_t index = static_cast<size_t>(kind.type);
  if (table.size() <= index) table.resize(index + 1);
  if (table[index]) {
    std::fprintf(stderr, "relaxlib: request kinds '%s' and '%s' share the type %d\n", table[index]->name, kind.name,
                 kind.type);
    std::abort();
  }
  table[index] = std::make_unique<RequestKind>(std::move(kind));
}

const RequestKind* request_kind(int32_t type) {
  const auto& table = kinds();
  return type >= 0 && static_cast<size_t>(type) < table.size() ? table[static_cast<size_t>(type)].get() : nullptr;
}

std::string request_type_name(int32_t type) {
  const RequestKind* kind = request_kind(type);
  return kind ? kind->name : "request(" + std::to_string(type) + ")";
}

void* RunContext::output_for(ExecItem& item, const std::vector<int64_t>& shape, std::vector<uint8_t>& fallback,
                             int64_t bytes) const {
  if (!item.local) {
    fallback.resize(static_cast<size_t>(bytes));
    return fallback.data();
  }
  LocalRequest& local = *item.local;
  if (local.alloc) local.output = local.alloc(local.user, static_cast<int32_t>(shape.size()), shape.data());
  return local.output;
}

}  // namespace relax
