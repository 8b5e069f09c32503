// spyre-sim-bench: how fast the device model simulates, against the host's own time
// for the same math (docs/ARCHITECTURE.md §5). Prints figures; asserts nothing about speed.
//
//   GEMM: fp16 M x N x K tiled over every core (256x256 output tiles, K in steps of
//   256, double-buffered DMA), against OpenBLAS cblas_sgemm fp32 of the same size.
//   ADD:  fp16 elementwise add over every core (32 Ki-element tiles, double-buffered),
//   against a vectorised host fp16 add over the same bytes.
// Wall time runs from the launch to its completion; input setup is excluded.
#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "chip/chip.h"
#include "config/config_loader.h"
#include "functional/numeric.h"
#include "spyre/isa/program.h"

namespace {

using namespace spyre;
using Clock = std::chrono::steady_clock;
using isa::DType;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

template <class F>
double median_seconds(int repeats, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    f();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

isa::Dma tile_dma(std::uint8_t token, std::uint16_t arg, std::uint64_t element_offset, std::uint32_t sp,
                  std::uint32_t cols, std::uint32_t rows, std::int64_t row_stride) {
  isa::Dma d;
  d.token = token;
  d.dtype = DType::fp16;
  d.arg = arg;
  d.offset = element_offset * 2;
  d.sp_addr = sp;
  d.shape = {cols, rows, 1};
  d.mem_stride = {1, row_stride, 0};
  return d;
}
isa::DmaLoad as_load(const isa::Dma& d) { isa::DmaLoad l; static_cast<isa::Dma&>(l) = d; return l; }
isa::DmaStore as_store(const isa::Dma& d) { isa::DmaStore s; static_cast<isa::Dma&>(s) = d; return s; }
isa::Wait wait_mask(std::uint16_t mask) { return isa::Wait{.token_mask = mask}; }

// C[m x n] = A[m x k] B[k x n], fp16 in and out, fp32 accumulation on chip.
std::vector<std::uint8_t> gemm_program(std::uint32_t cores, std::uint32_t m, std::uint32_t n, std::uint32_t k) {
  constexpr std::uint32_t T = 256;
  constexpr std::uint32_t kA[2] = {0, 256 << 10}, kB[2] = {128 << 10, 384 << 10};
  constexpr std::uint32_t kC = 512 << 10, kO = 768 << 10;
  isa::ProgramBuilder b(fmt::format("gemm_{}x{}x{}", m, n, k), cores);
  const std::uint32_t tiles_n = n / T, tiles = (m / T) * tiles_n, steps = k / T;
  for (std::uint32_t core = 0; core < cores; ++core) {
    bool store_pending = false;
    for (std::uint32_t tile = core; tile < tiles; tile += cores) {
      const std::uint32_t i0 = (tile / tiles_n) * T, j0 = (tile % tiles_n) * T;
      const auto load_step = [&](std::uint32_t s) {
        const std::uint8_t buf = s % 2;
        b.add(core, as_load(tile_dma(buf, 0, std::uint64_t{i0} * k + s * T, kA[buf], T, T, k)));
        b.add(core, as_load(tile_dma(buf, 1, std::uint64_t{s} * T * n + j0, kB[buf], T, T, n)));
      };
      load_step(0);
      for (std::uint32_t s = 0; s < steps; ++s) {
        if (s + 1 < steps) load_step(s + 1);
        b.add(core, wait_mask(static_cast<std::uint16_t>(1u << (s % 2))));
        b.add(core, isa::Matmul{.a = kA[s % 2], .b = kB[s % 2], .c = kC, .m = T, .n = T, .k = T, .lda = T,
                                .ldb = T, .ldc = T, .in = DType::fp16, .out = DType::fp32, .accumulate = s > 0});
      }
      if (store_pending) b.add(core, wait_mask(1u << 2));
      b.add(core, isa::VConvert{.from = DType::fp32, .to = DType::fp16, .src = kC, .dst = kO, .count = T * T});
      b.add(core, as_store(tile_dma(2, 2, std::uint64_t{i0} * n + j0, kO, T, T, n)));
      store_pending = true;
    }
  }
  return b.build();
}

// out = a + b over `count` fp16 values split evenly across the cores.
std::vector<std::uint8_t> add_program(std::uint32_t cores, std::uint64_t count) {
  constexpr std::uint32_t T = 32 << 10;  // elements per tile
  constexpr std::uint32_t kA[2] = {0, 128 << 10}, kB[2] = {64 << 10, 192 << 10}, kO[2] = {256 << 10, 320 << 10};
  isa::ProgramBuilder b(fmt::format("add_{}", count), cores);
  const std::uint64_t per_core = count / cores;
  for (std::uint32_t core = 0; core < cores; ++core) {
    const std::uint64_t first = per_core * core;
    const std::uint32_t tiles = static_cast<std::uint32_t>(per_core / T);
    const auto load = [&](std::uint32_t t) {
      const std::uint8_t buf = t % 2;
      b.add(core, as_load(tile_dma(buf, 0, first + std::uint64_t{t} * T, kA[buf], T, 1, 0)));
      b.add(core, as_load(tile_dma(buf, 1, first + std::uint64_t{t} * T, kB[buf], T, 1, 0)));
    };
    load(0);
    for (std::uint32_t t = 0; t < tiles; ++t) {
      if (t + 1 < tiles) load(t + 1);
      const std::uint16_t buf = t % 2;
      b.add(core, wait_mask(static_cast<std::uint16_t>(1u << buf)));
      if (t >= 2) b.add(core, wait_mask(static_cast<std::uint16_t>(1u << (2 + buf))));  // O[buf] stored
      b.add(core, isa::VBinary{.op = isa::BinaryOp::add, .dtype = DType::fp16, .bcast = isa::Broadcast::none,
                               .a = kA[buf], .b = kB[buf], .dst = kO[buf], .rows = 1, .cols = T});
      b.add(core, as_store(tile_dma(static_cast<std::uint8_t>(2 + buf), 2, first + std::uint64_t{t} * T, kO[buf], T, 1, 0)));
    }
    b.add(core, wait_mask(0xf));
  }
  return b.build();
}

struct Measured {
  sim::LaunchRecord record;
  double wall_s = 0;
};

Measured run(sim::Simulation& simulation, sim::Chip& chip, std::vector<std::uint8_t> bytes,
             std::vector<std::uint64_t> args) {
  auto program = std::make_shared<const isa::Program>(std::move(bytes));
  program->validate(chip.limits(chip.num_cores()));
  std::vector<std::uint32_t> cores(program->num_streams());
  for (std::uint32_t i = 0; i < cores.size(); ++i) cores[i] = i;
  Measured m;
  const auto t0 = Clock::now();
  chip.launch({.program = program, .args = std::move(args), .cores = cores, .name = {}, .id = 0},
              [&](const sim::LaunchRecord& r) { m.record = r; });
  simulation.run();
  m.wall_s = seconds_since(t0);
  if (m.record.fault) throw std::runtime_error(m.record.fault->to_string());
  return m;
}

void fill_fp16(std::uint8_t* dst, std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> tmp(1 << 16);
  for (std::size_t i = 0; i < n; i += tmp.size()) {
    const std::size_t c = std::min(tmp.size(), n - i);
    for (std::size_t j = 0; j < c; ++j) tmp[j] = u(rng);
    sim::numeric::store_f32(DType::fp16, tmp.data(), dst + 2 * i, c);
  }
}

// The host's own fp16 add: F16C conversions, fp32 add, 8 values per step (single thread).
__attribute__((target("avx2,f16c"))) void host_fp16_add(const _Float16* a, const _Float16* b, _Float16* out,
                                                        std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    const __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_add_ps(x, y), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) out[i] = static_cast<_Float16>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

void report(const char* what, const sim::Chip& chip, const Measured& m, double host_s, const char* host_what,
            double target) {
  const double sim_s = static_cast<double>(m.record.end - m.record.start) * 1e-12;
  const double cycles = sim_s * chip.figures().clock_hz;
  fmt::print("{}\n", what);
  fmt::print("  simulated            {:.0f} cycles = {:.3f} ms at {:.2f} GHz\n", cycles, sim_s * 1e3, chip.config().clock_ghz);
  fmt::print("  wall                 {:.1f} ms  ({:.3g} simulated cycles per wall second)\n", m.wall_s * 1e3,
             cycles / m.wall_s);
  fmt::print("  host, same math      {:.1f} ms  ({})\n", host_s * 1e3, host_what);
  fmt::print("  wall / host          {:.2f}x  (target <= {}x)\n", m.wall_s / host_s, target);
  fmt::print("  DRAM read/written    {:.1f} / {:.1f} MiB; instructions {}\n",
             static_cast<double>(m.record.dram_read_bytes) / (1 << 20),
             static_cast<double>(m.record.dram_write_bytes) / (1 << 20), m.record.instructions);
  fmt::print("  achieved             {:.1f}% of the fp16 peak, {:.1f}% of deliverable DRAM bandwidth\n",
             100.0 * static_cast<double>(m.record.macs[static_cast<int>(config::MacType::fp16)]) /
                 (chip.figures().peak_macs_per_s[static_cast<int>(config::MacType::fp16)] * sim_s),
             100.0 * static_cast<double>(m.record.dram_read_bytes + m.record.dram_write_bytes) /
                 (chip.figures().dram_deliverable_bytes_per_s * sim_s));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"spyre-sim-bench: simulation speed of the device model against the host's own math"};
  std::uint32_t size = 2048;
  std::uint64_t add_count = 64ull << 20;
  bool quick = false;
  std::string only, config_path;
  std::vector<std::string> overrides;
  app.add_option("--gemm-size", size, "M = N = K of the fp16 GEMM (a multiple of 256)");
  app.add_option("--add-count", add_count, "fp16 values in the elementwise add");
  app.add_flag("--quick", quick, "small sizes (512 cubed, 4 Mi values): a smoke run");
  app.add_option("--only", only, "run one workload")->check(CLI::IsMember({"gemm", "add"}));
  app.add_option("--config", config_path, "chip config (default: the embedded configs/spyre.yaml)");
  app.add_option("--set", overrides, "override a config field, e.g. --set memory.capacity_bytes=4GiB");
  CLI11_PARSE(app, argc, argv);
  if (quick) size = 512, add_count = 4ull << 20;

  const auto loaded = config::load_config(config_path, overrides);
  sim::Simulation simulation;
  sim::Chip& chip = simulation.add_chip(loaded.chip);
  const std::uint32_t cores = chip.num_cores();
  fmt::print("spyre-sim-bench on config '{}' from {}{} ({} cores)\n\n", loaded.chip.name, loaded.source,
             overrides.empty() ? "" : " with overrides", cores);

  // The add runs first: after an sgemm call OpenBLAS worker threads keep spinning for a
  // while, which would slow the next (single-threaded) simulation on a 2-core host.
  if (only.empty() || only == "add") {
    const auto a = *chip.memory().allocate(add_count * 2), b = *chip.memory().allocate(add_count * 2),
               out = *chip.memory().allocate(add_count * 2);
    fill_fp16(chip.memory().host(a), add_count, 3);
    fill_fp16(chip.memory().host(b), add_count, 4);
    std::memset(chip.memory().host(out), 0, add_count * 2);  // committed, like the host's output
    const Measured m = run(simulation, chip, add_program(cores, add_count), {a, b, out});
    std::vector<_Float16> ha(add_count), hb(add_count), hout(add_count);
    std::memcpy(ha.data(), chip.memory().host(a), add_count * 2);
    std::memcpy(hb.data(), chip.memory().host(b), add_count * 2);
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("f16c")) {
      fmt::print(stderr, "this host lacks AVX2/F16C: no vectorised host reference for the add\n");
      return 1;
    }
    host_fp16_add(ha.data(), hb.data(), hout.data(), add_count);
    const double host_s = median_seconds(3, [&] { host_fp16_add(ha.data(), hb.data(), hout.data(), add_count); });
    const bool exact = std::memcmp(hout.data(), chip.memory().host(out), add_count * 2) == 0;
    report(fmt::format("fp16 add of {} Mi values on {} cores (bit-exact against the host: {})", add_count >> 20, cores,
                       exact ? "yes" : "NO")
               .c_str(),
           chip, m, host_s, "vectorised host fp16 add", 5);
    if (!exact) return 1;
  }
  if (only.empty()) fmt::print("\n");
  if (only.empty() || only == "gemm") {
    const std::uint64_t elems = std::uint64_t{size} * size;
    const auto a = *chip.memory().allocate(elems * 2), b = *chip.memory().allocate(elems * 2),
               c = *chip.memory().allocate(elems * 2);
    fill_fp16(chip.memory().host(a), elems, 1);
    fill_fp16(chip.memory().host(b), elems, 2);
    std::memset(chip.memory().host(c), 0, elems * 2);
    const Measured m = run(simulation, chip, gemm_program(cores, size, size, size), {a, b, c});
    // Host: OpenBLAS sgemm of the same size in fp32 (warm, median of 3).
    std::vector<float> fa(elems), fb(elems), fc(elems);
    sim::numeric::load_f32(DType::fp16, chip.memory().host(a), fa.data(), elems);
    sim::numeric::load_f32(DType::fp16, chip.memory().host(b), fb.data(), elems);
    const int s = static_cast<int>(size);
    const auto sgemm = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, s, s, 1.0f, fa.data(), s, fb.data(), s, 0.0f, fc.data(), s);
    };
    sgemm();
    const double host_s = median_seconds(3, sgemm);
    // Sanity: the device result against the host's, as fp16.
    std::vector<float> got(elems);
    sim::numeric::load_f32(DType::fp16, chip.memory().host(c), got.data(), elems);
    double worst = 0;
    for (std::size_t i = 0; i < elems; ++i) worst = std::max(worst, double(std::fabs(got[i] - fc[i])) / (1 + std::fabs(fc[i])));
    report(fmt::format("fp16 GEMM {0}x{0}x{0} on {1} cores (max relative difference to sgemm {2:.2g})", size, cores, worst)
               .c_str(),
           chip, m, host_s, "OpenBLAS cblas_sgemm fp32", 3);
    // fp16 output rounding is 2^-11 relative; anything far above means wrong tiling.
    if (worst > 1e-2) return 1;
    chip.memory().free(a), chip.memory().free(b), chip.memory().free(c);
  }
  return 0;
}
