// libsystemc.so defines main() and references sc_main. Anything that links SystemC
// but has its own entry point (the driver library, loaded with dlopen(RTLD_NOW) by
// Python or torch.ops.load_library; test executables with Catch2's main) must define
// one, or linking/loading fails with "undefined symbol: sc_main". It is never called:
// the SystemC kernel is started with sc_start() by whoever owns the simulation.
#include <cstdio>

extern "C" __attribute__((visibility("default"))) int sc_main(int, char*[]) {
  std::fputs("spyre-sim: sc_main is not an entry point here\n", stderr);
  return 1;
}
