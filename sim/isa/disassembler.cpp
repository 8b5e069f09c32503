#include <cstdio>
#include <string>

#include "spyre/isa/program.h"

namespace spyre::isa {
namespace {

std::string fmt(const char* format, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

std::string n(std::string_view s) { return std::string(s); }

std::string dma(const char* name, const Dma& d) {
  return fmt("%s t%u %s arg%u+%llu <-> sp:%u shape=[%u,%u,%u] mem_stride=[%lld,%lld,%lld] sp_stride=[%u,%u]", name,
             d.token, n(to_string(d.dtype)).c_str(), d.arg, static_cast<unsigned long long>(d.offset), d.sp_addr,
             d.shape[0], d.shape[1], d.shape[2], static_cast<long long>(d.mem_stride[0]),
             static_cast<long long>(d.mem_stride[1]), static_cast<long long>(d.mem_stride[2]), d.sp_stride[0],
             d.sp_stride[1]);
}

template <class V>
std::string binary_like(const char* name, const V& v) {
  const std::string b = v.bcast == Broadcast::immediate ? fmt("#%g", v.imm) : fmt("sp:%u", v.b);
  return fmt("%s.%s %s sp:%u, %s(%s) -> sp:%u [%ux%u]", name, n(to_string(v.op)).c_str(), n(to_string(v.dtype)).c_str(),
             v.a, b.c_str(), n(to_string(v.bcast)).c_str(), v.dst, v.rows, v.cols);
}

struct Printer {
  std::string operator()(const End&) const { return "end"; }
  std::string operator()(const Nop&) const { return "nop"; }
  std::string operator()(const DmaLoad& d) const { return dma("dma_load", d); }
  std::string operator()(const DmaStore& d) const { return dma("dma_store", d); }
  std::string operator()(const DmaGather& g) const {
    if (g.scatter) {
      return fmt("dma_scatter t%u sp:%u row_bytes=%u -> arg%u+%llu rows=%llu row_stride=%llu <- %s index sp:%u x%u",
                 g.token, g.sp_addr, g.row_bytes, g.arg, static_cast<unsigned long long>(g.offset),
                 static_cast<unsigned long long>(g.rows), static_cast<unsigned long long>(g.row_stride),
                 g.wrap ? (g.wide_index ? "int64 (negative from the end)" : "int32 (negative from the end)")
                        : (g.wide_index ? "int64" : "int32"),
                 g.index_sp, g.count);
    }
    return fmt("dma_gather t%u arg%u+%llu rows=%llu row_stride=%llu <- %s index sp:%u x%u -> sp:%u row_bytes=%u", g.token,
               g.arg, static_cast<unsigned long long>(g.offset), static_cast<unsigned long long>(g.rows),
               static_cast<unsigned long long>(g.row_stride), g.wide_index ? "int64" : "int32", g.index_sp, g.count,
               g.sp_addr, g.row_bytes);
  }
  std::string operator()(const Wait& w) const { return fmt("wait mask=0x%04x", w.token_mask); }
  std::string operator()(const Matmul& m) const {
    return fmt("matmul %s->%s sp:%u%s x sp:%u%s %s sp:%u  m=%u n=%u k=%u ld=%u,%u,%u", n(to_string(m.in)).c_str(),
               n(to_string(m.out)).c_str(), m.a, m.trans_a ? "^T" : "", m.b, m.trans_b ? "^T" : "",
               m.accumulate ? "+=" : "=", m.c, m.m, m.n, m.k, m.lda, m.ldb, m.ldc);
  }
  std::string operator()(const VUnary& u) const {
    return fmt("vunary.%s %s sp:%u -> sp:%u n=%u", n(to_string(u.op)).c_str(), n(to_string(u.dtype)).c_str(), u.src,
               u.dst, u.count);
  }
  std::string operator()(const VBinary& b) const { return binary_like("vbinary", b); }
  std::string operator()(const VCompare& c) const { return binary_like("vcompare", c); }
  std::string operator()(const VSelect& s) const {
    return fmt("vselect %s sp:%u ? sp:%u : sp:%u -> sp:%u n=%u", n(to_string(s.dtype)).c_str(), s.cond, s.a, s.b,
               s.dst, s.count);
  }
  std::string operator()(const VReduce& r) const {
    return fmt("vreduce.%s %s->%s sp:%u [%ux%u] axis=%u -> sp:%u", n(to_string(r.op)).c_str(),
               n(to_string(r.in)).c_str(), n(to_string(r.out)).c_str(), r.src, r.rows, r.cols, r.axis, r.dst);
  }
  std::string operator()(const VConvert& c) const {
    return fmt("vconvert %s->%s sp:%u -> sp:%u n=%u", n(to_string(c.from)).c_str(), n(to_string(c.to)).c_str(), c.src,
               c.dst, c.count);
  }
  std::string operator()(const VFill& f) const {
    return fmt("vfill %s sp:%u n=%u #%g", n(to_string(f.dtype)).c_str(), f.dst, f.count, f.value);
  }
  std::string operator()(const VTranspose& t) const {
    return fmt("vtranspose %s sp:%u [%ux%u] -> sp:%u", n(to_string(t.dtype)).c_str(), t.src, t.rows, t.cols, t.dst);
  }
  std::string operator()(const VRandom& r) const {
    return fmt("vrandom %s sp:%u [%ux%ux%u] state sp:%u start %llu steps %llu %llu", n(to_string(r.dist)).c_str(),
               r.dst, r.planes, r.rows, r.cols, r.state, static_cast<unsigned long long>(r.start),
               static_cast<unsigned long long>(r.row_step), static_cast<unsigned long long>(r.plane_step));
  }
  std::string operator()(const RingSend& s) const {
    return fmt("ring_send t%u sp:%u %u bytes -> core %u tag %u", s.token, s.sp_addr, s.bytes, s.dst_core, s.tag);
  }
  std::string operator()(const RingRecv& r) const {
    std::string s = fmt("ring_recv t%u sp:%u %u bytes <- core %u tag %u", r.token, r.sp_addr, r.bytes, r.src_core, r.tag);
    if (r.forward_to != RingRecv::kNoForward) s += fmt(" forward -> core %u", r.forward_to);
    return s;
  }
  std::string operator()(const Barrier& b) const { return fmt("barrier id=%u count=%u", b.id, b.count); }
};

}  // namespace

std::string disassemble(const Instruction& inst) { return std::visit(Printer{}, inst); }

std::string disassemble(const Program& program) {
  std::string out = "program '" + program.name() + "': " + std::to_string(program.num_streams()) + " stream(s)\n";
  for (std::uint32_t s = 0; s < program.num_streams(); ++s) {
    out += "stream " + std::to_string(s) + ":\n";
    for (std::uint32_t pc = 0; pc < program.stream_length(s); ++pc) {
      const Decoded d = program.decode_at(s, pc);
      out += fmt("  %5u  ", pc) + (d.inst ? disassemble(*d.inst) : "<invalid: " + d.error + ">") + "\n";
    }
  }
  return out;
}

}  // namespace spyre::isa
