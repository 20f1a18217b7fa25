#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "codecs/codec.h"

namespace relax {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<CodecInfo> codecs;  // sorted by id
};

// Constructed on first use: codec files register during static initialization, in any order.
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

CodecRegistration::CodecRegistration(const CodecInfo& info) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const CodecInfo& other : r.codecs) {
    if (other.id == info.id || std::strcmp(other.name, info.name) == 0) {
      std::fprintf(stderr, "relaxlib: codecs '%s' (id %d) and '%s' (id %d) share an id or a name\n", other.name,
                   other.id, info.name, info.id);
      std::abort();
    }
  }
  auto at = std::lower_bound(r.codecs.begin(), r.codecs.end(), info.id,
                             [](const CodecInfo& c, int32_t id) { return c.id < id; });
  r.codecs.insert(at, info);
}

std::vector<CodecInfo> registered_codecs() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.codecs;
}

std::unique_ptr<Codec> make_codec(int32_t id) {
  for (const CodecInfo& info : registered_codecs()) {
    if (info.id == id) return info.make();
  }
  return nullptr;
}

std::string codec_name(int32_t id) {
  for (const CodecInfo& info : registered_codecs()) {
    if (info.id == id) return info.name;
  }
  return "codec(" + std::to_string(id) + ")";
}

int32_t codec_id(const std::string& name) {
  for (const CodecInfo& info : registered_codecs()) {
    if (name == info.name) return info.id;
  }
  return -1;
}

}  // namespace relax
