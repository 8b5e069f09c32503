#include "aten/pointwise.h"

#include <cmath>

#include <c10/core/DeviceGuard.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <ATen/ops/empty.h>

#include "aten/kernel_cache.h"
#include "runtime/generator.h"
#include "runtime/launch.h"
#include "runtime/streams.h"

namespace spyre::backend {

using compiler::Step;
using compiler::Value;

bool device_can_run(const at::TensorIteratorBase& iter) {
  std::optional<c10::Device> device;
  for (int arg = 0; arg < iter.ntensors(); ++arg) {
    if (arg >= iter.noutputs() && iter.is_cpu_scalar(arg)) {
      if (c10::isComplexType(iter.dtype(arg))) return false;
      continue;
    }
    const c10::Device d = iter.device(arg);
    if (d.type() != c10::DeviceType::PrivateUse1 || (device && *device != d)) return false;
    device = d;
    if (!device_dtype(iter.dtype(arg))) return false;
  }
  return device.has_value();
}

isa::DType compute_dtype(c10::ScalarType common, std::size_t steps) {
  const isa::DType t = *device_dtype(common);
  // One rounding at the end, as the CPU's vectorised opmath kernels do (its scalar
  // tails round alpha * b to fp16/bf16 first: up to half an ulp of alpha * b apart).
  if (steps > 1 && (t == isa::DType::fp16 || t == isa::DType::bf16)) return isa::DType::fp32;
  return t;
}

namespace {

double rounded(double v, c10::ScalarType t) {
  switch (t) {
    case c10::kHalf: return static_cast<float>(c10::Half(static_cast<float>(v)));
    case c10::kBFloat16: return static_cast<float>(c10::BFloat16(static_cast<float>(v)));
    case c10::kFloat: return static_cast<float>(v);
    case c10::kBool: return v != 0 ? 1 : 0;
    case c10::kInt:
    case c10::kChar: return std::trunc(v);
    default: return v;
  }
}

}  // namespace

// ---- groups -------------------------------------------------------------------

struct PointwiseGroup::Pending {
  struct Member {
    std::string key;
    compiler::PointwiseKernel kernel;
    std::vector<std::uint64_t> args;
    Traffic traffic;
    // The device bytes it reads and writes, [lo, hi) each.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> reads;
    std::pair<std::uint64_t, std::uint64_t> write;
  };
  std::string name;
  c10::DeviceIndex device = -1;
  std::optional<c10::Stream> stream;
  std::vector<Member> members;
  std::size_t args = 0;
};

namespace {

thread_local PointwiseGroup::Pending* open_group = nullptr;

bool overlap(const std::pair<std::uint64_t, std::uint64_t>& a, const std::pair<std::uint64_t, std::uint64_t>& b) {
  return a.first < b.second && b.first < a.second;
}

// The bytes an operand at `address` (its lowest element) spans.
std::pair<std::uint64_t, std::uint64_t> span(std::uint64_t address, const std::vector<std::uint64_t>& shape,
                                             const compiler::Operand& o) {
  std::uint64_t last = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    last += (shape[d] - 1) * static_cast<std::uint64_t>(std::abs(o.strides[d]));
  }
  return {address, address + (last + 1) * isa::dtype_size(o.dtype)};
}

// Launches the open group's kernels (runtime/launch.h's deferred flush).
void flush_open_group() {
  PointwiseGroup::Pending* g = open_group;
  if (g == nullptr || g->members.empty()) return;
  std::vector<PointwiseGroup::Pending::Member> members = std::move(g->members);
  g->members.clear();
  g->args = 0;
  const c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, g->device));
  if (members.size() == 1) {
    const auto& m = members.front();
    run_cached(g->device, m.key, [&](const compiler::Target& t) { return compiler::compile_pointwise(m.kernel, t, g->name); },
               m.args, g->name, m.traffic);
    return;
  }
  std::string key = "group|" + g->name;
  std::vector<std::uint64_t> args;
  Traffic traffic;
  for (const auto& m : members) {
    key += "#" + m.key;
    args.insert(args.end(), m.args.begin(), m.args.end());
    traffic.read += m.traffic.read;
    traffic.written += m.traffic.written;
  }
  run_cached(
      g->device, key,
      [&](const compiler::Target& t) {
        std::vector<compiler::PointwiseKernel> kernels;
        kernels.reserve(members.size());
        for (const auto& m : members) kernels.push_back(m.kernel);
        return compiler::compile_pointwise_group(kernels, t, g->name);
      },
      args, g->name + " (" + std::to_string(members.size()) + " kernels)", traffic);
}

// Hands a kernel to the open group (launching what it holds first when the kernel
// cannot join them).
void add_to_group(c10::DeviceIndex device, std::string key, compiler::PointwiseKernel kernel,
                  std::vector<std::uint64_t> args, Traffic traffic) {
  PointwiseGroup::Pending& g = *open_group;
  PointwiseGroup::Pending::Member m;
  for (std::size_t i = 0; i < kernel.inputs.size(); ++i) m.reads.push_back(span(args[i], kernel.shape, kernel.inputs[i]));
  m.write = span(args[kernel.inputs.size()], kernel.shape, kernel.output);
  const c10::Stream stream = current_stream(device);
  bool joins = g.device == device && g.stream == stream && g.args + args.size() <= isa::kMaxArgs;
  for (std::size_t j = 0; joins && j < g.members.size(); ++j) {
    const auto& other = g.members[j];
    if (overlap(m.write, other.write)) joins = false;
    for (const auto& r : other.reads) joins = joins && !overlap(m.write, r);
    for (const auto& r : m.reads) joins = joins && !overlap(r, other.write);
  }
  if (!joins) flush_open_group();
  g.device = device;
  g.stream = stream;
  g.args += args.size();
  m.key = std::move(key);
  m.kernel = std::move(kernel);
  m.args = std::move(args);
  m.traffic = traffic;
  g.members.push_back(std::move(m));
}

}  // namespace

PointwiseGroup::PointwiseGroup(std::string name) {
  if (open_group != nullptr) return;  // inside another: its kernels join the outer one
  pending_ = std::make_unique<Pending>();
  pending_->name = std::move(name);
  open_group = pending_.get();
  set_deferred_flush(&flush_open_group);
}

void PointwiseGroup::close() {
  if (pending_ == nullptr) return;
  flush_open_group();
  set_deferred_flush(nullptr);
  open_group = nullptr;
  pending_.reset();
}

PointwiseGroup::~PointwiseGroup() {
  if (pending_ == nullptr) return;
  try {
    flush_open_group();
  } catch (...) {  // NOLINT(bugprone-empty-catch): only while another exception unwinds (close() reports)
  }
  set_deferred_flush(nullptr);
  open_group = nullptr;
}

namespace {

void run(const char* name, at::TensorIteratorBase& iter, const std::vector<Step>& steps,
         std::optional<c10::ScalarType> round_scalars_to, const std::optional<at::Generator>* generator,
         const Traffic* least = nullptr) {
  if (iter.numel() == 0) return;
  TORCH_INTERNAL_ASSERT(iter.noutputs() == 1, "spyre: pointwise kernels have one output");
  compiler::PointwiseKernel k;
  for (const auto d : iter.shape()) k.shape.push_back(static_cast<std::uint64_t>(d));
  const auto operand = [&](int arg) {
    compiler::Operand o;
    o.dtype = *device_dtype(iter.dtype(arg));
    const auto size = static_cast<std::int64_t>(isa::dtype_size(o.dtype));
    for (const auto s : iter.strides(arg)) o.strides.push_back(s / size);
    return o;
  };
  k.output = operand(0);
  std::vector<int> args;              // iterator operand of each kernel input
  std::vector<Value> remap;           // iterator input -> kernel value
  for (int i = 0; i < iter.ninputs(); ++i) {
    const int arg = iter.noutputs() + i;
    if (iter.is_cpu_scalar(arg)) {
      const double v = iter.scalar_value<double>(arg);
      remap.push_back(Value::constant(round_scalars_to ? rounded(v, *round_scalars_to) : v));
    } else {
      remap.push_back(Value::input(static_cast<std::uint32_t>(k.inputs.size())));
      k.inputs.push_back(operand(arg));
      args.push_back(arg);
    }
  }
  for (Step s : steps) {
    for (Value& v : s.args) {
      if (v.kind == Value::Kind::input) v = remap.at(v.index);
    }
    k.steps.push_back(s);
  }
  TORCH_CHECK(!k.inputs.empty() || k.random(), "spyre: ", name,
              " needs at least one spyre tensor input (all inputs are CPU scalars)");
  const c10::Device device = iter.device(0);
  const c10::DeviceGuard guard(device);
  const std::string key = std::string(name) + "|" + k.key();
  std::vector<std::uint64_t> addresses;
  const auto address = [&](int arg, const compiler::Operand& o) {
    const std::int64_t low = compiler::lowest_offset(k.shape, o.strides);
    return reinterpret_cast<std::uint64_t>(static_cast<char*>(iter.data_ptr(arg)) +
                                           low * static_cast<std::int64_t>(isa::dtype_size(o.dtype)));
  };
  for (std::size_t i = 0; i < args.size(); ++i) addresses.push_back(address(args[i], k.inputs[i]));
  addresses.push_back(address(0, k.output));
  at::Tensor state;  // the random stream position, in device memory until the kernel ran
  if (k.random()) {
    TORCH_INTERNAL_ASSERT(generator != nullptr, name, ": random steps need run_random_pointwise");
    // Counters the kernel uses: a uniform number takes a quarter of one, a normal half.
    const auto n = static_cast<std::uint64_t>(iter.numel());
    const auto [seed, offset] = generator_or_default(*generator, device)
                                    ->reserve(k.draws(isa::RandomDist::normal) ? (n + 1) / 2 : (n + 3) / 4);
    at::Tensor host = at::empty({2}, at::TensorOptions().dtype(at::kLong));
    host[0] = static_cast<std::int64_t>(seed);
    host[1] = static_cast<std::int64_t>(offset);
    state = at::empty({2}, at::TensorOptions().dtype(at::kLong).device(device));
    state.copy_(host);
    addresses.push_back(reinterpret_cast<std::uint64_t>(state.data_ptr()));
  }
  const Traffic traffic =
      least != nullptr ? *least : Traffic{.read = compiler::min_read_bytes(k), .written = compiler::min_write_bytes(k)};
  if (open_group != nullptr && !k.random()) {
    add_to_group(device.index(), key, std::move(k), std::move(addresses), traffic);
    return;
  }
  run_cached(device.index(), key, [&](const compiler::Target& t) { return compiler::compile_pointwise(k, t, name); },
             addresses, name, traffic);
}

}  // namespace

void run_pointwise(const char* name, at::TensorIteratorBase& iter, const std::vector<Step>& steps,
                   std::optional<c10::ScalarType> round_scalars_to) {
  run(name, iter, steps, round_scalars_to, nullptr);
}

void run_pointwise_with_traffic(const char* name, at::TensorIteratorBase& iter, const std::vector<Step>& steps,
                                const Traffic& least) {
  run(name, iter, steps, std::nullopt, nullptr, &least);
}

void run_pointwise_into(const char* name, at::Tensor& out, const std::vector<at::Tensor>& inputs,
                        const std::vector<Step>& steps) {
  at::TensorIteratorConfig config;
  config.check_all_same_dtype(false).resize_outputs(false).add_output(out);
  for (const at::Tensor& t : inputs) config.add_const_input(t);
  auto iter = config.build();
  run(name, iter, steps, std::nullopt, nullptr);
}

void run_random_pointwise(const char* name, at::TensorIteratorBase& iter, const std::vector<Step>& steps,
                          const std::optional<at::Generator>& generator) {
  run(name, iter, steps, std::nullopt, &generator);
}

bool device_copy(const at::Tensor& dst, const at::Tensor& src) {
  if (!device_dtype(dst.scalar_type()) || !device_dtype(src.scalar_type())) return false;
  auto iter = at::TensorIteratorConfig()
                  .add_output(dst)
                  .add_const_input(src)
                  .resize_outputs(false)
                  .check_all_same_dtype(false)
                  .check_all_same_device(true)
                  .build();
  // Conversions get their own name, so reports and traces show where a model converts.
  run_pointwise(dst.scalar_type() == src.scalar_type() ? "aten::copy_" : "aten::copy_ (dtype conversion)", iter, {});
  return true;
}

at::Tensor int64_word(const at::Tensor& t, std::int64_t word) {
  std::vector<std::int64_t> strides(t.strides().begin(), t.strides().end());
  for (auto& st : strides) st *= 2;
  at::Tensor w = at::empty({0}, t.options().dtype(at::kInt));
  w.set_(t.storage(), t.storage_offset() * 2 + word, t.sizes(), strides);
  return w;
}

bool device_copy_from_int64(const at::Tensor& dst, const at::Tensor& src) {
  const c10::ScalarType t = dst.scalar_type();
  if (src.scalar_type() != at::kLong || !(t == at::kFloat || t == at::kHalf || t == at::kBFloat16 || t == at::kInt)) {
    return false;
  }
  const at::Tensor lo = int64_word(src, 0), hi = int64_word(src, 1);
  using compiler::Step;
  using compiler::Value;
  constexpr auto f32 = isa::DType::fp32, i32 = isa::DType::int32;
  if (t == at::kInt) {
    auto iter = at::TensorIteratorConfig().add_output(dst).add_const_input(lo).resize_outputs(false).build();
    run_pointwise("aten::copy_ (dtype conversion)", iter, {});
    return true;
  }
  auto iter = at::TensorIteratorConfig()
                  .add_output(dst)
                  .add_const_input(lo)
                  .add_const_input(hi)
                  .resize_outputs(false)
                  .check_all_same_dtype(false)
                  .build();
  run_pointwise("aten::copy_ (dtype conversion)", iter,
                {Step::compare(isa::CompareOp::lt, i32, Value::input(0), Value::constant(0)),          // 0: lo < 0
                 Step::select(i32, Value::step(0), Value::constant(-1), Value::constant(0)),           // 1: lo's sign word
                 Step::compare(isa::CompareOp::eq, i32, Value::input(1), Value::step(1)),              // 2: |v| < 2^31
                 Step::convert(f32, Value::input(0)),                                                   // 3: lo as a value
                 Step::select(f32, Value::step(0), Value::constant(4294967296.0), Value::constant(0)),  // 4
                 Step::binary(isa::BinaryOp::add, f32, Value::step(3), Value::step(4)),                 // 5: unsigned lo
                 Step::binary(isa::BinaryOp::mul, f32, Value::input(1), Value::constant(4294967296.0)), // 6: hi x 2^32
                 Step::binary(isa::BinaryOp::add, f32, Value::step(6), Value::step(5)),                 // 7
                 Step::select(f32, Value::step(2), Value::step(3), Value::step(7))});
  return true;
}

bool device_copy_words(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.scalar_type() != src.scalar_type() || device_dtype(dst.scalar_type()) || dst.itemsize() % 4 != 0) return false;
  // (Raw words: a conjugate or negative view's bit would be lost; those go another way.)
  if (dst.is_conj() || src.is_conj() || dst.is_neg() || src.is_neg()) return false;
  const std::int64_t words = static_cast<std::int64_t>(dst.itemsize() / 4);
  // The tensor's elements as rows of `words` int32 words over the same storage.
  const auto as_words = [&](const at::Tensor& t) {
    std::vector<std::int64_t> sizes(t.sizes().begin(), t.sizes().end()), strides(t.strides().begin(), t.strides().end());
    for (auto& st : strides) st *= words;
    sizes.push_back(words);
    strides.push_back(1);
    at::Tensor w = at::empty({0}, t.options().dtype(at::kInt));
    w.set_(t.storage(), t.storage_offset() * words, sizes, strides);
    return w;
  };
  const at::Tensor out = as_words(dst), in = as_words(src.expand(dst.sizes()));
  auto iter = at::TensorIteratorConfig().add_output(out).add_const_input(in).resize_outputs(false).build();
  run_pointwise("aten::copy_", iter, {});
  return true;
}

}  // namespace spyre::backend
