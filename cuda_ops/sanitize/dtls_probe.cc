// Checks that LeakSanitizer, run with make test-asan's settings, survives a dynamic TLS block that
// starts 16 bytes into a page. gcc 12's sanitizer runtime, intercepting __tls_get_addr, takes such
// a block for glibc 2.19's layout and reads its bounds from the 16 bytes before it (here the heap
// chunk's header): LeakSanitizer then scans a bogus range and its tracer dies with signal 11.
// That is what crashed build/asan/cpp_tests at exit whenever libOpenCL's block landed there, and
// why ASAN_RUN_ENV sets intercept_tls_get_addr=0. Usage: dtls_probe path/to/libdtls_module.so
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: dtls_probe path/to/libdtls_module.so\n");
    return 2;
  }
  void* module = dlopen(argv[1], RTLD_NOW);
  if (!module) {
    std::fprintf(stderr, "dtls_probe: %s\n", dlerror());
    return 2;
  }
  using AddressFn = char* (*)();
  auto address = reinterpret_cast<AddressFn>(dlsym(module, "dtls_module_address"));
  if (!address) {
    std::fprintf(stderr, "dtls_probe: dtls_module_address not found in %s\n", argv[1]);
    return 2;
  }
  // Take 16-byte chunks up to the last one of a page: the next one of that size class, the module's
  // TLS block, then starts 16 bytes into the following page. Kept (static) so none of them leaks.
  static std::vector<void*> kept;
  kept.reserve(1 << 16);
  while (kept.size() < kept.capacity()) {
    kept.push_back(std::malloc(16));
    if ((reinterpret_cast<std::uintptr_t>(kept.back()) & 4095) == 4096 - 16) break;
  }
  const char* tls = address();  // the first access allocates the block
  const bool placed = (reinterpret_cast<std::uintptr_t>(tls) & 4095) == 16;
  std::printf("dtls_probe: TLS block at %p (%s)\n", static_cast<const void*>(tls),
              placed ? "16 bytes into a page, as intended" : "elsewhere: the probe proves nothing here");
  std::fflush(stdout);  // a crash of the tracer at exit would lose it
  for (void* p : kept) std::free(p);
  kept.clear();
  return 0;  // LeakSanitizer runs at exit, scanning this thread's TLS blocks
}
