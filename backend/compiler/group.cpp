#include "compiler/group.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <variant>

#include "spyre/isa/program.h"

namespace spyre::compiler {
namespace {

std::uint64_t dma_bytes(const isa::Dma& d) {
  return std::uint64_t{d.shape[0]} * d.shape[1] * d.shape[2] * isa::dtype_size(d.dtype);
}

}  // namespace

std::vector<std::uint8_t> compile_group(const std::vector<GroupMember>& members, std::uint32_t cores,
                                        const std::string& name) {
  if (members.empty()) throw std::invalid_argument(name + ": a group needs at least one member");
  if (cores == 0) throw std::invalid_argument(name + ": a group needs at least one core");
  std::uint64_t total_args = 0;
  for (const GroupMember& m : members) total_args += m.args;
  if (total_args > isa::kMaxArgs) {
    throw std::invalid_argument(name + ": the members take " + std::to_string(total_args) +
                                " launch arguments, a launch has at most " + std::to_string(isa::kMaxArgs));
  }
  std::vector<std::vector<isa::Instruction>> code(cores);
  // Each core's work so far, as the DMA bytes its streams move (the members are
  // streaming kernels: their time is their traffic).
  std::vector<std::uint64_t> load(cores, 0);
  std::uint32_t base = 0, used = 0;
  for (std::size_t m = 0; m < members.size(); ++m) {
    const std::string who = name + ": member " + std::to_string(m);
    const isa::Program p(members[m].program);
    if (p.num_streams() > cores) {
      throw std::invalid_argument(who + " has " + std::to_string(p.num_streams()) + " streams, the launch " +
                                  std::to_string(cores) + " cores");
    }
    std::vector<std::vector<isa::Instruction>> streams(p.num_streams());
    std::vector<std::uint64_t> work(p.num_streams(), 0);
    for (std::uint32_t s = 0; s < p.num_streams(); ++s) {
      for (std::uint32_t pc = 0; pc < p.stream_length(s); ++pc) {
        const isa::Decoded d = p.decode_at(s, pc);
        if (!d.inst) throw std::invalid_argument(who + ", stream " + std::to_string(s) + " pc " + std::to_string(pc) + ": " + d.error);
        isa::Instruction inst = *d.inst;
        bool keep = true;
        std::visit(
            [&](auto& i) {
              using T = std::decay_t<decltype(i)>;
              if constexpr (std::is_base_of_v<isa::Dma, T> || std::is_same_v<T, isa::DmaGather>) {
                if (i.arg >= members[m].args) {
                  throw std::invalid_argument(who + " uses argument " + std::to_string(i.arg) + " of its " +
                                              std::to_string(members[m].args));
                }
                i.arg = static_cast<std::uint16_t>(i.arg + base);
                if constexpr (std::is_base_of_v<isa::Dma, T>) {
                  work[s] += dma_bytes(i);
                } else {
                  work[s] += std::uint64_t{i.count} * i.row_bytes;
                }
              } else if constexpr (std::is_same_v<T, isa::RingSend> || std::is_same_v<T, isa::RingRecv> ||
                                   std::is_same_v<T, isa::Barrier>) {
                throw std::invalid_argument(who + " synchronises its cores (" + std::string(isa::to_string(isa::opcode_of(inst))) +
                                            " in stream " + std::to_string(s) + "): it cannot share a launch");
              } else if constexpr (std::is_same_v<T, isa::End>) {
                keep = false;
              }
            },
            inst);
        if (keep) streams[s].push_back(inst);
      }
    }
    // The rotation of the member's streams over the cores that leaves the busiest core
    // least busy (the first such: same members, same program).
    std::uint32_t best = 0;
    std::uint64_t best_peak = std::numeric_limits<std::uint64_t>::max();
    for (std::uint32_t r = 0; r < cores; ++r) {
      std::uint64_t peak = 0;
      for (std::uint32_t s = 0; s < p.num_streams(); ++s) peak = std::max(peak, load[(r + s) % cores] + work[s]);
      if (peak < best_peak) best_peak = peak, best = r;
    }
    for (std::uint32_t s = 0; s < p.num_streams(); ++s) {
      const std::uint32_t core = (best + s) % cores;
      auto& out = code[core];
      // The member before on this core ends with its transfers done: tokens and the
      // scratchpad are the next one's. (Pointwise members already end so; the wait
      // then costs nothing.)
      if (!out.empty()) out.push_back(isa::Wait{.token_mask = static_cast<std::uint16_t>((1u << isa::kNumTokens) - 1)});
      out.insert(out.end(), streams[s].begin(), streams[s].end());
      load[core] += work[s];
      used = std::max(used, core + 1);
    }
    base += members[m].args;
  }
  isa::ProgramBuilder b(name, used);
  for (std::uint32_t c = 0; c < used; ++c) {
    for (const auto& inst : code[c]) b.add(c, inst);
  }
  return b.build();
}

}  // namespace spyre::compiler
