// spyre-kernel-bench: what the kernel compiler's kernels achieve on the modelled device
// (fractions of peak and of deliverable DRAM bandwidth, from the device's own launch
// records), what compiling a kernel costs, and what a cached eager op costs the host
// (Google Benchmark). Run it on the unmodified default config:
//
//   tools/dev run spyre-kernel-bench            # full sizes (about a minute)
//   tools/dev run spyre-kernel-bench --quick    # small sizes (the ctest smoke run)
//   tools/dev run spyre-kernel-bench --convolutions  # only ResNet-50's convolutions
//   tools/dev run spyre-kernel-bench --predictions [--fp32] [--plans]   # only the predicted-
//       # against-simulated table (with SPYRE_SIM_SET for what-ifs); --plans adds each GEMM's
//       # plan and its DRAM and ring bytes, the model's against the simulated
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

// Narrow ATen includes (no precompiled header here: an executable's -fPIE flags
// cannot reuse the library's).
#include <ATen/core/Tensor.h>
#include <ATen/ops/_int_mm.h>
#include <ATen/ops/_scaled_mm.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/_softmax.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/add.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "aten/kernel_cache.h"
#include "compiler/cost.h"
#include "compiler/matmul.h"
#include "compiler/pointwise.h"
#include "compiler/reduce.h"
#include "spyre/spyre_drv.h"

namespace {

const c10::Device kDevice(c10::DeviceType::PrivateUse1, 0);

spyre_device_t device_handle() {
  spyre_device_t d = nullptr;
  if (spyreDeviceGet(0, &d) != SPYRE_SUCCESS) throw std::runtime_error(spyreGetLastErrorMessage());
  return d;
}

spyre_device_properties_t properties() {
  spyre_device_properties_t p{};
  p.struct_size = sizeof p;
  spyreDeviceGetProperties(device_handle(), &p);
  return p;
}

// The launch records after the first `from` (after synchronizing).
std::vector<spyre_launch_record_t> launches_from(std::uint32_t from) {
  spyreDeviceSynchronize(device_handle());
  std::uint32_t count = 0;
  spyreDeviceGetLaunchRecords(device_handle(), &count, nullptr);
  std::vector<spyre_launch_record_t> records(count);
  for (auto& r : records) r.struct_size = sizeof r;
  spyreDeviceGetLaunchRecords(device_handle(), &count, records.data());
  return {records.begin() + std::min<std::uint32_t>(from, count), records.end()};
}

// The device's record of the last launch named `name` (after synchronizing).
spyre_launch_record_t last_launch(const std::string& name) {
  const std::vector<spyre_launch_record_t> records = launches_from(0);
  for (auto it = records.rbegin(); it != records.rend(); ++it) {
    if (name == it->name) return *it;
  }
  throw std::runtime_error("no launch named " + name);
}

double seconds(const spyre_launch_record_t& r) { return static_cast<double>(r.end_ps - r.start_ps) * 1e-12; }

// Deliverable DRAM bandwidth: a plain device-to-device DMA copy of `bytes`, timed by
// device events; read + write bytes per second.
double copy_bandwidth(std::size_t bytes) {
  spyre_device_t dev = device_handle();
  void *src = nullptr, *dst = nullptr;
  spyre_queue_t q = nullptr;
  spyre_event_t start = nullptr, end = nullptr;
  spyreMemAlloc(dev, bytes, &src);
  spyreMemAlloc(dev, bytes, &dst);
  spyreQueueCreate(dev, SPYRE_QUEUE_PRIORITY_NORMAL, &q);
  spyreEventCreate(dev, &start);
  spyreEventCreate(dev, &end);
  spyreEventRecord(start, q);
  spyreMemcpyAsync(q, dst, src, bytes);
  spyreEventRecord(end, q);
  spyreEventSynchronize(end);
  double ns = 0;
  spyreEventElapsedTime(start, end, &ns);
  spyreEventDestroy(start);
  spyreEventDestroy(end);
  spyreQueueDestroy(q);
  spyreMemFree(src);
  spyreMemFree(dst);
  return 2.0 * static_cast<double>(bytes) / (ns * 1e-9);
}

void gemms(bool quick) {
  const auto p = properties();
  const double peak_flops = 2 * p.peak_macs_per_s[SPYRE_MAC_FP16];
  const double dram = p.dram_deliverable_bytes_per_s;
  fmt::print("fp16 GEMM on {} ({} cores, peak {:.2f} TFLOPS, DRAM {:.1f} GB/s deliverable of {:.1f})\n",
             p.config_name, p.cores, peak_flops * 1e-12, dram * 1e-9, p.dram_peak_bytes_per_s * 1e-9);
  fmt::print("{:>16} {:>10} {:>8} {:>6} {:>11} {:>11} {:>7} {:>9} {:>10}\n", "m x n x k", "time us", "TFLOPS",
             "%peak", "DRAM MB", "compulsory", "ratio", "bound %", "grid r");
  std::vector<std::array<std::int64_t, 3>> shapes = {{512, 512, 512},    {1024, 1024, 1024}, {2048, 2048, 2048},
                                                     {4096, 4096, 4096}, {1, 4096, 4096}};
  if (quick) shapes = {{256, 256, 256}, {1, 512, 512}};
  const auto opts = at::TensorOptions().dtype(at::kHalf).device(kDevice);
  for (const auto& [m, n, k] : shapes) {
    const at::Tensor a = at::randn({m, k}).to(opts), b = at::randn({k, n}).to(opts);
    at::mm(a, b);  // compile and load
    at::mm(a, b);
    const auto r = last_launch("aten::mm");
    const double t = seconds(r);
    const double flops = 2.0 * static_cast<double>(m * n * k);
    const double bytes = static_cast<double>(r.dram_read_bytes + r.dram_write_bytes);
    const double compulsory = 2.0 * static_cast<double>(m * k + k * n + m * n);
    // The best these bytes allow: compute at peak, or the bytes at the memory model's
    // best for their read/write mix (include/spyre/cost/roofline.h).
    const auto& target = spyre::backend::target(0);
    const double bound = (flops / peak_flops) /
                         spyre::cost::roofline_s(flops, peak_flops, static_cast<double>(r.dram_read_bytes),
                                                 static_cast<double>(r.dram_write_bytes), dram,
                                                 target.dram_turnaround_s_per_byte) * 100;
    const auto plan = spyre::compiler::plan_matmul(
        {.m = static_cast<std::uint64_t>(m), .n = static_cast<std::uint64_t>(n), .k = static_cast<std::uint64_t>(k),
         .dtype = spyre::isa::DType::fp16},
        spyre::backend::target(0));
    fmt::print("{:>16} {:>10.1f} {:>8.2f} {:>6.1f} {:>11.1f} {:>11.1f} {:>7.2f} {:>9.1f} {:>4}x{}x{} {}\n",
               fmt::format("{}x{}x{}", m, n, k), t * 1e6, flops / t * 1e-12, flops / t / peak_flops * 100,
               bytes * 1e-6, compulsory * 1e-6, bytes / compulsory, bound, plan.grid_rows, plan.grid_cols, plan.groups,
               plan.rows_per_core);
  }
}

// One low-precision GEMM table: `run(m, n, k)` launches the op (twice: compile, then
// measure) and the last launch of `kernel` is timed against `peak` ops per second.
template <class Run>
void low_precision_table(const std::string& title, const char* unit, const char* kernel, double peak,
                         const std::vector<std::array<std::int64_t, 3>>& shapes, Run&& run) {
  fmt::print("\n{}\n{:>16} {:>10} {:>8} {:>6} {:>11}\n", title, "m x n x k", "time us", unit, "%peak", "DRAM MB");
  for (const auto& [m, n, k] : shapes) {
    run(m, n, k);
    const auto r = last_launch(kernel);
    const double t = seconds(r);
    const double ops = 2.0 * static_cast<double>(m * n * k);
    fmt::print("{:>16} {:>10.1f} {:>8.2f} {:>6.1f} {:>11.1f}\n", fmt::format("{}x{}x{}", m, n, k), t * 1e6,
               ops / t * 1e-12, ops / t / peak * 100,
               static_cast<double>(r.dram_read_bytes + r.dram_write_bytes) * 1e-6);
  }
}

// torch._int_mm and torch._scaled_mm on the arrays at the config's int8 and fp8 SIMD
// depths, against those peaks.
void int8_gemms(bool quick) {
  const auto p = properties();
  std::vector<std::array<std::int64_t, 3>> shapes = {{1024, 1024, 1024}, {4096, 4096, 4096}};
  if (quick) shapes = {{256, 256, 256}};
  const double int8_peak = 2 * p.peak_macs_per_s[SPYRE_MAC_INT8];
  // int8's int32 results make the square shapes memory-bound (backend/README.md): a long
  // K shows the arrays at the int8 depth (about 30 s of host time for its MACs).
  std::vector<std::array<std::int64_t, 3>> int8_shapes = shapes;
  if (!quick) int8_shapes.push_back({2048, 2048, 32768});
  low_precision_table(
      fmt::format("int8 GEMM (torch._int_mm, int32 accumulation; int8 peak {:.1f} TOPS, SIMD depth {})",
                  int8_peak * 1e-12, p.simd_depth[SPYRE_MAC_INT8]),
      "TOPS", "aten::_int_mm", int8_peak, int8_shapes, [](std::int64_t m, std::int64_t n, std::int64_t k) {
        const auto int8 = at::TensorOptions().dtype(at::kChar);
        const at::Tensor a = at::randint(-128, 128, {m, k}, int8).to(kDevice);
        const at::Tensor b = at::randint(-128, 128, {k, n}, int8).to(kDevice);
        at::_int_mm(a, b);
        at::_int_mm(a, b);
      });
  const double fp8_peak = 2 * p.peak_macs_per_s[SPYRE_MAC_FP8];
  low_precision_table(
      fmt::format("fp8 GEMM (torch._scaled_mm, e4m3, fp32 accumulation, fp16 result; fp8 peak {:.1f} TFLOPS, depth {})",
                  fp8_peak * 1e-12, p.simd_depth[SPYRE_MAC_FP8]),
      "TFLOPS", "aten::_scaled_mm", fp8_peak, shapes, [](std::int64_t m, std::int64_t n, std::int64_t k) {
        const auto fp8 = at::TensorOptions().dtype(at::kFloat8_e4m3fn);
        const at::Tensor a = at::randn({m, k}).to(fp8).to(kDevice), b = at::randn({n, k}).to(fp8).to(kDevice).t();
        const at::Tensor one = at::scalar_tensor(1.0, at::TensorOptions().dtype(at::kFloat)).to(kDevice);
        at::_scaled_mm(a, b, one, one, {}, {}, at::kHalf);
        at::_scaled_mm(a, b, one, one, {}, {}, at::kHalf);
      });
}

void bandwidth_kernels(bool quick) {
  const std::int64_t n = quick ? (1 << 20) : (64ll << 20);
  const std::int64_t rows = quick ? 256 : 8192, cols = quick ? 1024 : 4096;
  const auto opts = at::TensorOptions().dtype(at::kHalf).device(kDevice);
  const at::Tensor a = at::empty({n}, opts).fill_(1.5), b = at::empty({n}, opts).fill_(2.5);
  at::add(a, b);
  at::add(a, b);
  const auto add = last_launch("aten::add");
  const at::Tensor x = at::randn({rows, cols}).to(opts);
  at::_softmax(x, 1, false);
  at::_softmax(x, 1, false);
  const auto sm = last_launch("aten::_softmax");
  const double copy = copy_bandwidth(static_cast<std::size_t>(n) * 2);
  fmt::print("\nbandwidth kernels (fraction of a device-to-device DMA copy's {:.1f} GB/s, read + write)\n",
             copy * 1e-9);
  for (const auto& [what, r] : {std::pair{fmt::format("add {} fp16", n), add},
                               std::pair{fmt::format("softmax {}x{} fp16", rows, cols), sm}}) {
    const double bytes = static_cast<double>(r.dram_read_bytes + r.dram_write_bytes);
    const double bw = bytes / seconds(r);
    fmt::print("  {:<28} {:>9.1f} us  {:>7.1f} MB  {:>6.1f} GB/s  {:>5.1f}% of deliverable\n", what,
               seconds(r) * 1e6, bytes * 1e-6, bw * 1e-9, bw / copy * 100);
  }
}

// ResNet-50's distinct convolutions (torchvision's, stride on the 3x3 of a bottleneck)
// at batch 8, fp16, 224 x 224, channels-last inputs and weights (a model moved with
// .to(memory_format=torch.channels_last), as the convolutions' own results are): each
// with its modelled time (the convolution kernel, plus the kernels that copy a padded
// input), % of the fp16 peak and % of its roofline bound (its FLOPs at the peak, or
// the input pixels it reads, its weights and its result moved once at the memory
// model's best), and all 53 together.
void convolutions(bool quick) {
  struct Conv {
    std::int64_t in, size, out, k, stride, count;
  };
  // in channels, input height = width, out channels, kernel, stride, uses in the model
  std::vector<Conv> convs = {
      {3, 224, 64, 7, 2, 1},                                                                       // stem
      {64, 56, 64, 1, 1, 1},    {64, 56, 64, 3, 1, 3},    {64, 56, 256, 1, 1, 4},   {256, 56, 64, 1, 1, 2},    // layer1
      {256, 56, 128, 1, 1, 1},  {128, 56, 128, 3, 2, 1},  {128, 28, 512, 1, 1, 4},  {256, 56, 512, 1, 2, 1},
      {512, 28, 128, 1, 1, 3},  {128, 28, 128, 3, 1, 3},                                            // layer2
      {512, 28, 256, 1, 1, 1},  {256, 28, 256, 3, 2, 1},  {256, 14, 1024, 1, 1, 6}, {512, 28, 1024, 1, 2, 1},
      {1024, 14, 256, 1, 1, 5}, {256, 14, 256, 3, 1, 5},                                            // layer3
      {1024, 14, 512, 1, 1, 1}, {512, 14, 512, 3, 2, 1},  {512, 7, 2048, 1, 1, 3},  {1024, 14, 2048, 1, 2, 1},
      {2048, 7, 512, 1, 1, 2},  {512, 7, 512, 3, 1, 2}};                                            // layer4
  std::int64_t batch = 8;
  if (quick) convs = {{3, 32, 16, 7, 2, 1}, {16, 8, 16, 3, 1, 1}, {16, 8, 32, 1, 2, 1}}, batch = 1;
  const auto p = properties();
  const double peak = 2 * p.peak_macs_per_s[SPYRE_MAC_FP16];
  const auto& target = spyre::backend::target(0);
  fmt::print("\nResNet-50's convolutions, batch {}, fp16, channels-last (implicit GEMM; fp16 peak {:.2f} TFLOPS)\n",
             batch, peak * 1e-12);
  fmt::print("  {:<32} {:>4} {:>10} {:>10} {:>7} {:>8}\n", "in x size -> out, kernel/stride", "uses", "conv us",
             "copies us", "%peak", "%bound");
  double total = 0, bound_total = 0, flops_total = 0;
  const auto opts = at::TensorOptions().dtype(at::kHalf).device(kDevice);
  for (const Conv& c : convs) {
    const std::int64_t pad = c.k / 2, out_size = (c.size + 2 * pad - c.k) / c.stride + 1;
    const at::Tensor x = at::randn({batch, c.in, c.size, c.size}).to(opts).contiguous(at::MemoryFormat::ChannelsLast);
    const at::Tensor w = at::randn({c.out, c.in, c.k, c.k}).to(opts).contiguous(at::MemoryFormat::ChannelsLast);
    at::conv2d(x, w, {}, c.stride, pad);  // compile and load
    std::uint32_t before = 0;
    spyreDeviceSynchronize(device_handle());
    spyreDeviceGetLaunchRecords(device_handle(), &before, nullptr);
    at::conv2d(x, w, {}, c.stride, pad);
    double conv = 0, copies = 0;
    for (const auto& r : launches_from(before)) (std::string(r.name) == "aten::convolution" ? conv : copies) += seconds(r);
    const double flops = 2.0 * static_cast<double>(batch * out_size * out_size * c.out * c.in * c.k * c.k);
    const auto side = static_cast<std::int64_t>(spyre::compiler::conv_positions_read(
        static_cast<std::uint64_t>(c.size), static_cast<std::uint64_t>(out_size), static_cast<std::uint64_t>(c.k),
        static_cast<std::uint64_t>(c.stride), 1, static_cast<std::uint64_t>(pad)));
    const double read = 2.0 * static_cast<double>(batch * c.in * side * side + c.out * c.in * c.k * c.k);
    const double written = 2.0 * static_cast<double>(batch * c.out * out_size * out_size);
    const double bound = spyre::cost::roofline_s(flops, peak, read, written, p.dram_deliverable_bytes_per_s,
                                                 target.dram_turnaround_s_per_byte);
    const double t = conv + copies;
    fmt::print("  {:<32} {:>4} {:>10.1f} {:>10.1f} {:>7.1f} {:>8.1f}\n",
               fmt::format("{} x {} -> {}, {}x{}/{}", c.in, c.size, c.out, c.k, c.k, c.stride), c.count, conv * 1e6,
               copies * 1e6, flops / t / peak * 100, bound / t * 100);
    total += static_cast<double>(c.count) * t;
    bound_total += static_cast<double>(c.count) * bound;
    flops_total += static_cast<double>(c.count) * flops;
  }
  fmt::print("  all {} uses: {:.1f} us modelled, {:.1f}% of the fp16 peak, {:.1f}% of their summed roofline bound\n",
             std::accumulate(convs.begin(), convs.end(), std::int64_t{0},
                             [](std::int64_t n, const Conv& c) { return n + c.count; }),
             total * 1e6, flops_total / total / peak * 100, bound_total / total * 100);
}

// The compiler's predicted time against the simulated one, for a fixed list of
// kernels: the check that plans follow the config (run on the default chip and on
// what-if configs; backend/README.md has the table and the command).
void predictions(bool quick, at::ScalarType dtype, bool show_plans) {
  namespace compiler = spyre::compiler;
  const auto& target = spyre::backend::target(0);
  const auto isa_dtype = dtype == at::kFloat ? spyre::isa::DType::fp32 : spyre::isa::DType::fp16;
  const auto p = properties();
  fmt::print("\npredicted against simulated time on {} ({}), {}\n", p.config_name, p.config_hash,
             dtype == at::kFloat ? "fp32" : "fp16");
  fmt::print("  {:<26} {:>12} {:>12} {:>8}\n", "kernel", "predicted us", "simulated us", "error");
  const auto opts = at::TensorOptions().dtype(dtype).device(kDevice);
  double worst = 0;
  const auto row = [&](const std::string& what, double predicted, const spyre_launch_record_t& r) {
    const double simulated = seconds(r);
    const double error = (predicted - simulated) / simulated * 100;
    worst = std::max(worst, std::abs(error));
    fmt::print("  {:<26} {:>12.1f} {:>12.1f} {:>+7.1f}%\n", what, predicted * 1e6, simulated * 1e6, error);
  };
  std::vector<std::array<std::int64_t, 3>> gemms = {{64, 64, 64},     {512, 512, 512},   {1024, 1024, 1024},
                                                    {2048, 2048, 2048}, {4096, 4096, 4096}, {1, 4096, 4096},
                                                    {300, 200, 1000},  {4097, 33, 515}};
  if (quick) gemms = {{64, 64, 64}, {300, 200, 1000}, {1, 512, 512}};
  for (const auto& [m, n, k] : gemms) {
    const at::Tensor a = at::randn({m, k}).to(opts), b = at::randn({k, n}).to(opts);
    at::mm(a, b);
    at::mm(a, b);
    const auto plan = compiler::plan_matmul({.m = static_cast<std::uint64_t>(m), .n = static_cast<std::uint64_t>(n),
                                             .k = static_cast<std::uint64_t>(k), .dtype = isa_dtype},
                                            target);
    const compiler::MatmulShape shape{.m = static_cast<std::uint64_t>(m), .n = static_cast<std::uint64_t>(n),
                                      .k = static_cast<std::uint64_t>(k), .dtype = isa_dtype};
    const auto r = last_launch("aten::mm");
    row(fmt::format("gemm {}x{}x{}", m, n, k), compiler::predict_matmul_s(shape, plan, target), r);
    if (show_plans)
      fmt::print("    plan {}x{}x{} rows/core {} grid {}x{} groups {} super-blocks {}: read MB model {:.2f} sim {:.2f}, written {:.2f}, ring {:.2f}\n",
                 plan.tm, plan.tn, plan.tk, plan.rows_per_core, plan.grid_rows, plan.grid_cols, plan.groups,
                 plan.super_blocks, plan.dram_read_bytes * 1e-6, r.dram_read_bytes * 1e-6, r.dram_write_bytes * 1e-6,
                 r.ring_bytes * 1e-6);
  }
  const std::int64_t elements = quick ? (1 << 20) : (64ll << 20);
  {
    const at::Tensor a = at::empty({elements}, opts).fill_(1.5), b = at::empty({elements}, opts).fill_(2.5);
    at::add(a, b);
    at::add(a, b);
    compiler::PointwiseKernel add;
    add.shape = {static_cast<std::uint64_t>(elements)};
    add.inputs = {{isa_dtype, {1}}, {isa_dtype, {1}}};
    add.output = {isa_dtype, {1}};
    add.steps = {compiler::Step::binary(spyre::isa::BinaryOp::add, isa_dtype, compiler::Value::input(0),
                                        compiler::Value::input(1))};
    row(fmt::format("add {} Mi", elements >> 20), compiler::predict_pointwise_s(add, target), last_launch("aten::add"));
  }
  {
    const std::int64_t rows = quick ? 256 : 8192, cols = quick ? 1024 : 4096;
    const at::Tensor x = at::randn({rows, cols}).to(opts);
    at::_softmax(x, 1, false);
    at::_softmax(x, 1, false);
    const compiler::SoftmaxShape sm{.rows = static_cast<std::uint64_t>(rows), .cols = static_cast<std::uint64_t>(cols),
                                    .row_stride = cols, .in = isa_dtype, .out = isa_dtype};
    row(fmt::format("softmax {}x{}", rows, cols), compiler::predict_softmax_s(sm, target), last_launch("aten::_softmax"));
  }
  fmt::print("  largest error {:.1f}%\n", worst);
}

void compile_times() {
  using clock = std::chrono::steady_clock;
  const auto& target = spyre::backend::target(0);
  const auto time = [](auto&& f) {
    double best = 1e9;
    for (int i = 0; i < 5; ++i) {
      const auto t0 = clock::now();
      benchmark::DoNotOptimize(f());
      best = std::min(best, std::chrono::duration<double>(clock::now() - t0).count());
    }
    return best;
  };
  spyre::compiler::PointwiseKernel add;
  add.shape = {1 << 20};
  add.inputs = {{spyre::isa::DType::fp16, {1}}, {spyre::isa::DType::fp16, {1}}};
  add.output = {spyre::isa::DType::fp16, {1}};
  add.steps = {spyre::compiler::Step::binary(spyre::isa::BinaryOp::add, spyre::isa::DType::fp16,
                                             spyre::compiler::Value::input(0), spyre::compiler::Value::input(1))};
  const spyre::compiler::MatmulShape mm{.m = 4096, .n = 4096, .k = 4096, .dtype = spyre::isa::DType::fp16};
  const spyre::compiler::SoftmaxShape sm{.rows = 8192, .cols = 4096, .row_stride = 4096,
                                         .in = spyre::isa::DType::fp16, .out = spyre::isa::DType::fp16};
  fmt::print("\ncompile time of a new kernel (best of 5)\n");
  fmt::print("  add 1 Mi fp16          {:8.3f} ms\n", time([&] { return spyre::compiler::compile_pointwise(add, target, "add"); }) * 1e3);
  fmt::print("  softmax 8192x4096 fp16 {:8.3f} ms\n", time([&] { return spyre::compiler::compile_softmax(sm, target, "softmax"); }) * 1e3);
  fmt::print("  mm 4096^3 fp16         {:8.3f} ms\n", time([&] { return spyre::compiler::compile_matmul(mm, target, "mm"); }) * 1e3);

  const auto opts = at::TensorOptions().dtype(at::kFloat).device(kDevice);
  const at::Tensor a = at::ones({4099}, opts);
  spyre::backend::reset_kernel_cache_stats();
  at::mul(a, a);
  const auto first = spyre::backend::kernel_cache_stats();
  at::mul(a, a);
  const auto second = spyre::backend::kernel_cache_stats();
  fmt::print("  kernel cache: first mul {} miss(es) {} hit(s); second mul {} miss(es) {} hit(s)\n", first.misses,
             first.hits, second.misses - first.misses, second.hits - first.hits);
}

// Host cost of a cached eager op: tensors already on the device, no synchronisation.
void BM_cached_eager_add(benchmark::State& state) {
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(kDevice);
  const at::Tensor a = at::ones({1024}, opts), b = at::ones({1024}, opts);
  at::add(a, b);
  for (auto _ : state) benchmark::DoNotOptimize(at::add(a, b));
  spyreDeviceSynchronize(device_handle());  // after the timed loop
}
BENCHMARK(BM_cached_eager_add)->Unit(benchmark::kMicrosecond)->Iterations(2000)->Repetitions(3)->ReportAggregatesOnly(true);

void BM_cached_eager_broadcast_mul(benchmark::State& state) {
  const auto opts = at::TensorOptions().dtype(at::kHalf).device(kDevice);
  const at::Tensor a = at::ones({64, 256}, opts), b = at::ones({256}, opts);
  at::mul(a, b);
  for (auto _ : state) benchmark::DoNotOptimize(at::mul(a, b));
  spyreDeviceSynchronize(device_handle());  // after the timed loop
}
BENCHMARK(BM_cached_eager_broadcast_mul)->Unit(benchmark::kMicrosecond)->Iterations(2000)->Repetitions(3)->ReportAggregatesOnly(true);

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, only_predictions = false, only_convolutions = false, show_plans = false;
  at::ScalarType dtype = at::kHalf;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--predictions") == 0) {
      only_predictions = true;
    } else if (std::strcmp(argv[i], "--convolutions") == 0) {
      only_convolutions = true;
    } else if (std::strcmp(argv[i], "--plans") == 0) {
      show_plans = true;
    } else if (std::strcmp(argv[i], "--fp32") == 0) {
      dtype = at::kFloat;
    } else {
      args.push_back(argv[i]);
    }
  }
  if (only_predictions) {
    predictions(quick, dtype, show_plans);
    return 0;
  }
  if (only_convolutions) {
    convolutions(quick);
    return 0;
  }
  gemms(quick);
  int8_gemms(quick);
  bandwidth_kernels(quick);
  convolutions(quick);
  predictions(quick, dtype, show_plans);
  compile_times();
  fmt::print("\nhost time per cached eager op (no synchronisation)\n");
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
