#include "compiler/matmul.h"

#include <algorithm>
#include <stdexcept>

#include "spyre/isa/program.h"

namespace spyre::compiler {
namespace {

template <class T>
T dma(std::uint8_t token, isa::DType dtype, std::uint16_t arg, std::uint64_t element_offset, std::uint32_t sp,
      std::uint32_t cols, std::uint32_t rows, std::int64_t row_stride) {
  T d;
  d.token = token;
  d.dtype = dtype;
  d.arg = arg;
  d.offset = element_offset * isa::dtype_size(dtype);
  d.sp_addr = sp;
  d.shape = {cols, rows, 1};
  d.mem_stride = {1, row_stride, 0};
  return d;
}

struct Tiles {
  std::uint64_t tm, tn, tk;
  std::uint64_t bytes;
};

// Scratchpad bytes for tiles: A and B double-buffered, C in fp32, the output copy.
std::uint64_t footprint(std::uint64_t tm, std::uint64_t tn, std::uint64_t tk, std::uint64_t size) {
  return 2 * (tm * tk + tk * tn) * size + tm * tn * 4 + tm * tn * size;
}

}  // namespace

std::vector<std::uint8_t> compile_matmul(const MatmulShape& s, const Target& target, const std::string& name) {
  const std::uint64_t size = isa::dtype_size(s.dtype);
  // The largest tiles that fit, preferring a long K (fewer fill/drain phases of the
  // systolic array per MAC) and square output tiles.
  Tiles t{0, 0, 0, 0};
  for (const std::uint64_t tmn : {256ull, 128ull, 64ull, 32ull, 16ull, 8ull}) {
    for (const std::uint64_t tk : {512ull, 256ull, 128ull, 64ull, 32ull, 16ull, 8ull}) {
      const std::uint64_t tm = std::min(tmn, s.m), tn = std::min(tmn, s.n), tk_ = std::min(tk, s.k);
      if (footprint(tm, tn, tk_, size) <= target.scratchpad_bytes) {
        t = {tm, tn, tk_, footprint(tm, tn, tk_, size)};
        break;
      }
    }
    if (t.tm != 0) break;
  }
  if (t.tm == 0) {
    throw std::invalid_argument(name + " " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                                std::to_string(s.k) + ": the smallest tiling needs " +
                                std::to_string(footprint(std::min<std::uint64_t>(8, s.m), std::min<std::uint64_t>(8, s.n),
                                                         std::min<std::uint64_t>(8, s.k), size)) +
                                " bytes of scratchpad, the device has " + std::to_string(target.scratchpad_bytes));
  }
  const std::uint32_t a_bytes = static_cast<std::uint32_t>(t.tm * t.tk * size);
  const std::uint32_t b_bytes = static_cast<std::uint32_t>(t.tk * t.tn * size);
  const std::uint32_t sp_a[2] = {0, a_bytes}, sp_b[2] = {2 * a_bytes, 2 * a_bytes + b_bytes};
  const std::uint32_t sp_c = 2 * a_bytes + 2 * b_bytes;
  const std::uint32_t sp_o = sp_c + static_cast<std::uint32_t>(t.tm * t.tn * 4);

  const std::uint64_t tiles_m = (s.m + t.tm - 1) / t.tm, tiles_n = (s.n + t.tn - 1) / t.tn;
  const std::uint64_t tiles = tiles_m * tiles_n, steps = (s.k + t.tk - 1) / t.tk;
  const std::uint32_t cores = static_cast<std::uint32_t>(std::min<std::uint64_t>(target.cores, tiles));
  isa::ProgramBuilder b(name, cores);
  for (std::uint32_t core = 0; core < cores; ++core) {
    bool store_pending = false;
    for (std::uint64_t tile = core; tile < tiles; tile += cores) {
      const std::uint64_t i0 = (tile / tiles_n) * t.tm, j0 = (tile % tiles_n) * t.tn;
      const auto m = static_cast<std::uint32_t>(std::min(t.tm, s.m - i0));
      const auto n = static_cast<std::uint32_t>(std::min(t.tn, s.n - j0));
      const auto k_len = [&](std::uint64_t step) {
        return static_cast<std::uint32_t>(std::min(t.tk, s.k - step * t.tk));
      };
      const auto load = [&](std::uint64_t step) {
        const std::uint8_t slot = step % 2;
        const std::uint64_t k0 = step * t.tk;
        const std::uint32_t k = k_len(step);
        b.add(core, dma<isa::DmaLoad>(slot, s.dtype, 0, i0 * s.k + k0, sp_a[slot], k, m, static_cast<std::int64_t>(s.k)));
        if (s.b_transposed) {  // rows of B^T: n rows of k values
          b.add(core, dma<isa::DmaLoad>(slot, s.dtype, 1, j0 * s.k + k0, sp_b[slot], k, n, static_cast<std::int64_t>(s.k)));
        } else {
          b.add(core, dma<isa::DmaLoad>(slot, s.dtype, 1, k0 * s.n + j0, sp_b[slot], n, k, static_cast<std::int64_t>(s.n)));
        }
      };
      load(0);
      for (std::uint64_t step = 0; step < steps; ++step) {
        const std::uint8_t slot = step % 2;
        if (step + 1 < steps) load(step + 1);
        b.add(core, isa::Wait{.token_mask = static_cast<std::uint16_t>(1u << slot)});
        const std::uint32_t k = k_len(step);
        b.add(core, isa::Matmul{.a = sp_a[slot], .b = sp_b[slot], .c = sp_c, .m = m, .n = n, .k = k, .lda = k,
                                .ldb = s.b_transposed ? k : n, .ldc = n, .in = s.dtype, .out = isa::DType::fp32,
                                .trans_b = s.b_transposed, .accumulate = step > 0});
      }
      std::uint32_t result = sp_c;
      if (store_pending) b.add(core, isa::Wait{.token_mask = 1u << 2});
      if (s.dtype != isa::DType::fp32) {
        b.add(core, isa::VConvert{.from = isa::DType::fp32, .to = s.dtype, .src = sp_c, .dst = sp_o, .count = m * n});
        result = sp_o;
      }
      b.add(core, dma<isa::DmaStore>(2, s.dtype, 2, i0 * s.n + j0, result, n, m, static_cast<std::int64_t>(s.n)));
      store_pending = true;
      if (result == sp_c) {
        // The next tile's first matmul overwrites C: wait for this store first.
        b.add(core, isa::Wait{.token_mask = 1u << 2});
        store_pending = false;
      }
    }
  }
  return b.build();
}

}  // namespace spyre::compiler
