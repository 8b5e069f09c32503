// scratchpad_access: the scratchpad bytes each instruction reads and writes, from the
// same extents check() validates (a rows x cols block with leading dimension ld spans
// (rows - 1) x ld + cols elements).
#include <algorithm>

#include "spyre/isa/program.h"

namespace spyre::isa {
namespace {

SpRange range(std::uint64_t addr, std::uint64_t elements, std::uint64_t size) { return {addr, addr + elements * size}; }

std::uint64_t block(std::uint64_t rows, std::uint64_t cols, std::uint64_t ld) { return rows == 0 ? 0 : (rows - 1) * ld + cols; }

// The scratchpad side of a strided DMA (packed or with explicit scratchpad strides).
SpRange dma_range(const Dma& d) {
  const std::uint64_t s0 = d.sp_stride[0] ? d.sp_stride[0] : d.shape[0];
  const std::uint64_t s1 = d.sp_stride[1] ? d.sp_stride[1] : s0 * d.shape[1];
  const std::uint64_t elements = (std::uint64_t{d.shape[1]} - 1) * s0 + (std::uint64_t{d.shape[2]} - 1) * s1 + d.shape[0];
  return range(d.sp_addr, elements, dtype_size(d.dtype));
}

template <class V>
SpAccess binary_like(const V& v, DType dst_type) {
  const std::uint64_t n = std::uint64_t{v.rows} * v.cols, size = dtype_size(v.dtype);
  return {{range(v.a, n, size), range(v.b, broadcast_elements(v.bcast, v.rows, v.cols), size), {}},
          range(v.dst, n, dtype_size(dst_type))};
}

struct Access {
  SpAccess operator()(const Matmul& m) const {
    const std::uint64_t in = dtype_size(m.in), out = dtype_size(m.out);
    const SpRange c = range(m.c, block(m.m, m.n, m.ldc), out);
    return {{range(m.a, m.trans_a ? block(m.k, m.m, m.lda) : block(m.m, m.k, m.lda), in),
             range(m.b, m.trans_b ? block(m.n, m.k, m.ldb) : block(m.k, m.n, m.ldb), in), m.accumulate ? c : SpRange{}},
            c};
  }
  SpAccess operator()(const VUnary& u) const {
    return {{range(u.src, u.count, dtype_size(u.dtype)), {}, {}}, range(u.dst, u.count, dtype_size(u.dtype))};
  }
  SpAccess operator()(const VBinary& b) const { return binary_like(b, b.dtype); }
  SpAccess operator()(const VCompare& c) const { return binary_like(c, DType::boolean); }
  SpAccess operator()(const VSelect& s) const {
    const std::uint64_t size = dtype_size(s.dtype);
    return {{range(s.cond, s.count, 1), range(s.a, s.count, size), range(s.b, s.count, size)},
            range(s.dst, s.count, size)};
  }
  SpAccess operator()(const VReduce& r) const {
    return {{range(r.src, std::uint64_t{r.rows} * r.cols, dtype_size(r.in)), {}, {}},
            range(r.dst, r.axis == 1 ? r.rows : r.cols, dtype_size(r.out))};
  }
  SpAccess operator()(const VConvert& c) const {
    return {{range(c.src, c.count, dtype_size(c.from)), {}, {}}, range(c.dst, c.count, dtype_size(c.to))};
  }
  SpAccess operator()(const VFill& f) const { return {{}, range(f.dst, f.count, dtype_size(f.dtype))}; }
  SpAccess operator()(const VTranspose& t) const {
    const std::uint64_t n = std::uint64_t{t.rows} * t.cols;
    return {{range(t.src, n, dtype_size(t.dtype)), {}, {}}, range(t.dst, n, dtype_size(t.dtype))};
  }
  SpAccess operator()(const VRandom& r) const {
    return {{range(r.state, 4, 4), {}, {}}, range(r.dst, std::uint64_t{r.planes} * r.rows * r.cols, 4)};
  }
  SpAccess operator()(const DmaLoad& d) const { return {{}, dma_range(d)}; }
  SpAccess operator()(const DmaStore& d) const { return {{dma_range(d), {}, {}}, {}}; }
  SpAccess operator()(const DmaGather& g) const {
    const SpRange rows = range(g.sp_addr, g.count, g.row_bytes);
    const SpRange index = range(g.index_sp, g.count, g.wide_index ? 8 : 4);
    return g.scatter ? SpAccess{{index, rows, {}}, {}} : SpAccess{{index, {}, {}}, rows};
  }
  SpAccess operator()(const RingSend& r) const { return {{range(r.sp_addr, r.bytes, 1), {}, {}}, {}}; }
  SpAccess operator()(const RingRecv& r) const { return {{}, range(r.sp_addr, r.bytes, 1)}; }
  template <class Other>
  SpAccess operator()(const Other&) const {
    return {};
  }
};

}  // namespace

SpAccess scratchpad_access(const Instruction& inst) { return std::visit(Access{}, inst); }

std::uint64_t broadcast_elements(Broadcast b, std::uint64_t rows, std::uint64_t cols) {
  switch (b) {
    case Broadcast::none: return rows * cols;
    case Broadcast::row: return cols;
    case Broadcast::col: return rows;
    case Broadcast::scalar: return 1;
    case Broadcast::immediate: return 0;
  }
  return 0;
}

}  // namespace spyre::isa
