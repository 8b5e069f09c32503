#include "functional/interpreter.h"

#include <cstring>
#include <deque>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "functional/dma.h"
#include "functional/numeric.h"

namespace spyre::sim::functional {
namespace {

enum class Step { advanced, blocked, ended, faulted };

struct StreamState {
  std::uint32_t pc = 0;
  bool done = false;
  bool at_barrier = false;
  std::uint64_t barrier_generation = 0;
  std::string waiting_for;
};

class Interpreter {
 public:
  Interpreter(Chip& chip, const LaunchRequest& request)
      : chip_(chip), request_(request), program_(*request.program), streams_(program_.num_streams()),
        limits_(chip.limits(static_cast<std::uint32_t>(request.cores.size()))) {
    record_.id = request.id;
    record_.queue_tag = request.queue_tag;
    record_.name = request.name.empty() ? program_.name() : request.name;
    record_.cores.assign(request.cores.begin(), request.cores.begin() + program_.num_streams());
  }

  LaunchRecord run() {
    for (;;) {
      bool progress = false, all_done = true;
      for (std::uint32_t s = 0; s < streams_.size() && !record_.fault; ++s) {
        StreamState& st = streams_[s];
        if (st.done) continue;
        all_done = false;
        for (;;) {
          const Step step = execute(s, st);
          if (step == Step::advanced) {
            progress = true;
            continue;
          }
          if (step == Step::ended) progress = true;
          break;
        }
      }
      if (record_.fault || all_done) break;
      if (!progress) {
        for (std::uint32_t s = 0; s < streams_.size(); ++s) {
          if (streams_[s].done) continue;
          fault(s, "deadlock: the stream waits for " + streams_[s].waiting_for, std::nullopt);
          break;
        }
        break;
      }
    }
    return record_;
  }

 private:
  void fault(std::uint32_t stream, const std::string& reason, std::optional<std::uint64_t> address,
             const isa::Instruction* inst = nullptr) {
    if (record_.fault) return;
    Fault f;
    f.device = chip_.device_index();
    f.core = request_.cores[stream];
    f.stream = stream;
    f.pc = streams_[stream].pc;
    f.kernel = record_.name;
    f.instruction = inst ? isa::disassemble(*inst) : std::string{};
    f.reason = reason;
    f.address = address;
    record_.fault = std::move(f);
  }

  Step execute(std::uint32_t s, StreamState& st) {
    if (st.pc >= program_.stream_length(s)) {
      fault(s, "ran past the end of its stream without END", std::nullopt);
      return Step::faulted;
    }
    const isa::Decoded decoded = program_.decode_at(s, st.pc);
    if (!decoded.inst) {
      fault(s, decoded.error, std::nullopt);
      return Step::faulted;
    }
    const isa::Instruction& inst = *decoded.inst;
    if (auto reason = isa::check(inst, limits_)) {
      fault(s, *reason, std::nullopt, &inst);
      return Step::faulted;
    }
    std::uint8_t* sp = chip_.scratchpad(request_.cores[s]);
    std::optional<std::string> error;
    std::optional<std::uint64_t> address;
    bool blocked = false;
    if (std::holds_alternative<isa::End>(inst)) {
      ++record_.instructions;
      st.done = true;
      return Step::ended;
    } else if (const auto* d = std::get_if<isa::DmaLoad>(&inst)) {
      dma(*d, true, sp, error, address);
    } else if (const auto* d2 = std::get_if<isa::DmaStore>(&inst)) {
      dma(*d2, false, sp, error, address);
    } else if (const auto* g = std::get_if<isa::DmaGather>(&inst)) {
      if (g->arg >= request_.args.size()) {
        error = fmt::format("argument {} is used but the launch passed {} argument(s)", g->arg, request_.args.size());
      } else {
        DmaResult moved;
        std::uint64_t touched = 0;
        if (auto f = gather(*g, request_.args[g->arg], chip_.memory(), sp, moved,
                            [&](std::uint64_t, std::uint64_t n) { touched += n; })) {
          error = f->reason;
          address = f->address;
        } else {
          record_.dram_read_bytes += touched;
        }
      }
    } else if (const auto* mm = std::get_if<isa::Matmul>(&inst)) {
      const auto type = mm->in == isa::DType::fp32   ? config::MacType::fp32
                        : mm->in == isa::DType::fp16 ? config::MacType::fp16
                        : mm->in == isa::DType::bf16 ? config::MacType::bf16
                                                     : config::MacType::int8;
      if (config::simd_depth(chip_.config().cores.compute_array.simd_depth, type) == 0) {
        error = fmt::format("the compute array of this chip does not support {} operands", isa::to_string(mm->in));
      } else {
        numeric::matmul(*mm, sp);
        record_.macs[static_cast<int>(type)] += std::uint64_t{mm->m} * mm->n * mm->k;
      }
    } else if (const auto* u = std::get_if<isa::VUnary>(&inst)) {
      numeric::unary(u->op, u->dtype, sp + u->src, sp + u->dst, u->count);
      record_.vector_elements += u->count;
    } else if (const auto* b = std::get_if<isa::VBinary>(&inst)) {
      error = numeric::binary(*b, sp);
      record_.vector_elements += std::uint64_t{b->rows} * b->cols;
    } else if (const auto* c = std::get_if<isa::VCompare>(&inst)) {
      numeric::compare(*c, sp);
      record_.vector_elements += std::uint64_t{c->rows} * c->cols;
    } else if (const auto* sel = std::get_if<isa::VSelect>(&inst)) {
      numeric::select(*sel, sp);
      record_.vector_elements += sel->count;
    } else if (const auto* r = std::get_if<isa::VReduce>(&inst)) {
      numeric::reduce(*r, sp);
      record_.vector_elements += std::uint64_t{r->rows} * r->cols;
    } else if (const auto* cv = std::get_if<isa::VConvert>(&inst)) {
      numeric::convert(cv->from, cv->to, sp + cv->src, sp + cv->dst, cv->count);
      record_.vector_elements += cv->count;
    } else if (const auto* f = std::get_if<isa::VFill>(&inst)) {
      numeric::fill(*f, sp);
      record_.vector_elements += f->count;
    } else if (const auto* send = std::get_if<isa::RingSend>(&inst)) {
      post(send->dst_core, s, send->tag, std::vector<std::uint8_t>(sp + send->sp_addr, sp + send->sp_addr + send->bytes));
    } else if (const auto* recv = std::get_if<isa::RingRecv>(&inst)) {
      auto& queue = mailbox_[std::make_tuple(s, std::uint32_t{recv->src_core}, recv->tag)];
      if (queue.empty()) {
        st.waiting_for = fmt::format("a ring message with tag {} from stream {} that is never sent", recv->tag,
                                     recv->src_core);
        blocked = true;
      } else {
        std::vector<std::uint8_t> data = std::move(queue.front());
        queue.pop_front();
        if (data.size() != recv->bytes) {
          error = fmt::format("received {} bytes from stream {} (tag {}) into a {}-byte buffer", data.size(),
                              recv->src_core, recv->tag, recv->bytes);
        } else {
          std::memcpy(sp + recv->sp_addr, data.data(), data.size());
          if (recv->forward_to != isa::RingRecv::kNoForward) post(recv->forward_to, s, recv->tag, std::move(data));
        }
      }
    } else if (const auto* bar = std::get_if<isa::Barrier>(&inst)) {
      auto& state = barriers_[bar->id];
      if (!st.at_barrier) {
        st.at_barrier = true;
        st.barrier_generation = state.second;
        if (++state.first >= bar->count) {
          state.first = 0;
          ++state.second;
        }
      }
      if (state.second == st.barrier_generation) {
        st.waiting_for = fmt::format("barrier {} ({} of {} streams arrived)", bar->id, state.first, bar->count);
        blocked = true;
      } else {
        st.at_barrier = false;
      }
    }
    if (error) {
      fault(s, *error, address, &inst);
      return Step::faulted;
    }
    if (blocked) return Step::blocked;
    ++record_.instructions;
    ++st.pc;
    return Step::advanced;
  }

  void dma(const isa::Dma& d, bool load, std::uint8_t* sp, std::optional<std::string>& error,
           std::optional<std::uint64_t>& address) {
    if (d.arg >= request_.args.size()) {
      error = fmt::format("argument {} is used but the launch passed {} argument(s)", d.arg, request_.args.size());
      return;
    }
    DmaResult moved;
    std::uint64_t touched = 0;
    if (auto f = transfer(d, load, request_.args[d.arg], chip_.memory(), sp, moved,
                          [&](std::uint64_t, std::uint64_t n) { touched += n; })) {
      error = f->reason;
      address = f->address;
      return;
    }
    (load ? record_.dram_read_bytes : record_.dram_write_bytes) += touched;
  }

  void post(std::uint32_t dst, std::uint32_t src, std::uint16_t tag, std::vector<std::uint8_t> data) {
    record_.ring_bytes += data.size();
    mailbox_[std::make_tuple(dst, src, tag)].push_back(std::move(data));
  }

  Chip& chip_;
  const LaunchRequest& request_;
  const isa::Program& program_;
  std::vector<StreamState> streams_;
  isa::Limits limits_;
  LaunchRecord record_;
  std::map<std::tuple<std::uint32_t, std::uint32_t, std::uint16_t>, std::deque<std::vector<std::uint8_t>>> mailbox_;
  std::map<std::uint16_t, std::pair<std::uint32_t, std::uint64_t>> barriers_;  // id -> (arrived, generation)
};

}  // namespace

LaunchRecord run(Chip& chip, const LaunchRequest& request) { return Interpreter(chip, request).run(); }

}  // namespace spyre::sim::functional
