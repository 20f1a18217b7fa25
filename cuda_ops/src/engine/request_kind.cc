#include "engine/request_kind.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

namespace relax {
namespace {

// Constructed on first use: kind files register during static initialization, in any order.
// Read-only once the library is loaded, so lookups need no lock.
std::map<int32_t, std::unique_ptr<RequestKind>>& kinds() {
  static std::map<int32_t, std::unique_ptr<RequestKind>> table;
  return table;
}

}  // namespace

RequestKindRegistration::RequestKindRegistration(RequestKind kind) {
  auto& table = kinds();
  const auto it = table.find(kind.type);
  if (it != table.end()) {
    std::fprintf(stderr, "relaxlib: request kinds '%s' and '%s' share the type %d\n", it->second->name, kind.name,
                 kind.type);
    std::abort();
  }
  const int32_t type = kind.type;
  table.emplace(type, std::make_unique<RequestKind>(std::move(kind)));
}

const RequestKind* request_kind(int32_t type) {
  const auto& table = kinds();
  const auto it = table.find(type);
  return it == table.end() ? nullptr : it->second.get();
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
