#include "kernel/sim_kernel.h"

#define SC_INCLUDE_DYNAMIC_PROCESSES
#include <map>
#include <systemc>
#include <vector>

namespace spyre::sim {

std::string systemc_version() { return sc_core::sc_release(); }

void spawn_recycling_name(std::function<void()> body, const std::string& base) {
  // Names in use are looked up by their full (hierarchical) name, so pools are per
  // parent process. A terminated process lingers until SystemC deletes it: a name is
  // free only once no object has it.
  // (parent.base) -> names. Never destroyed: launches still run from the driver's exit
  // handler, after function-local statics made later than it are gone.
  static auto& pools = *new std::map<std::string, std::vector<std::string>>();
  const sc_core::sc_process_handle parent = sc_core::sc_get_current_process_handle();
  const std::string prefix = parent.valid() ? std::string(parent.name()) + "." : std::string();
  auto& names = pools[prefix + base];
  for (const auto& name : names) {
    if (sc_core::sc_find_object((prefix + name).c_str()) == nullptr) {
      sc_core::sc_spawn(std::move(body), name.c_str());
      return;
    }
  }
  names.push_back(base + "_" + std::to_string(names.size()));
  sc_core::sc_spawn(std::move(body), names.back().c_str());
}

namespace {

struct PooledProcess {
  sc_core::sc_event go;
  std::function<void()> job;
};

}  // namespace

void run_pooled(std::function<void()> job) {
  // Never destroyed, as the name pools above: the processes outlive every chip.
  static auto& idle = *new std::vector<PooledProcess*>();
  if (!idle.empty()) {
    PooledProcess* p = idle.back();
    idle.pop_back();
    p->job = std::move(job);
    p->go.notify();
    return;
  }
  auto* p = new PooledProcess{{}, std::move(job)};
  spawn_recycling_name([p] {
    for (;;) {
      p->job();
      p->job = nullptr;  // what the job captured (a launch) is released now, not at the next job
      idle.push_back(p);
      sc_core::wait(p->go);
    }
  }, "pooled");
}

}  // namespace spyre::sim
