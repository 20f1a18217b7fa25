// A shared library with thread-local storage, loaded by dtls_probe with dlopen: glibc gives such a
// module its TLS block from malloc at the first access (as it does libOpenCL.so, which MPI_Init
// loads through hwloc's OpenCL plugin in build/asan/cpp_tests).
thread_local char module_tls[16];

extern "C" char* dtls_module_address() { return module_tls; }
