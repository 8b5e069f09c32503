// libsystemc.so defines main() and references sc_main. A shared library loaded with
// dlopen(RTLD_NOW) (Python's ctypes, torch.ops.load_library) fails with "undefined
// symbol: sc_main" unless someone defines it. The driver starts the SystemC kernel
// itself, so this one is never called.
#include <cstdio>

extern "C" __attribute__((visibility("default"))) int sc_main(int, char*[]) {
  std::fputs("spyre_drv: sc_main is not an entry point of the driver library\n", stderr);
  return 1;
}
