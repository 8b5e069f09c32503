// Facts about the SystemC kernel the model runs on.
#pragma once

#include <functional>
#include <string>

namespace spyre::sim {

// The SystemC library's version string, e.g. "3.0.1-Accellera".
std::string systemc_version();

// sc_spawn for processes made again and again (one per launch stream): SystemC 3.0
// remembers every name it generates for an unnamed process, about 140 bytes each
// (measured), so a long run grows without bound. This takes a name from a pool of
// names `base`_N whose processes are gone (the pool grows to the most that are alive at
// once, per parent process), so memory stays flat. Simulation context only.
void spawn_recycling_name(std::function<void()> body, const std::string& base);

// Runs `job` in a simulation process of a pool shared by every chip: a process whose
// last job has returned takes the next one (made runnable at once, in this evaluation
// phase, as sc_spawn's new process is), and a new process is spawned only when all are
// busy. Launches run one process per stream, 32 a launch on the default chip; spawning
// each would allocate, guard (mprotect) and free a coroutine stack every time, which
// cost more host time than a small kernel's simulation. The pool grows to the most
// jobs alive at once and is never freed. Simulation context only.
void run_pooled(std::function<void()> job);

}  // namespace spyre::sim
