// spyre-sim run --workload resnet18 / resnet50 / mobilenet_v3_small / vit_b_16 /
// train:ARCH (vision_workload.h). The architectures follow torchvision's definitions
// layer for layer (torchvision/models/resnet.py, mobilenetv3.py, vision_transformer.py
// of torchvision 0.21): the same convolutions, strides, paddings, groups, activations,
// squeeze-excitation sizes and encoder widths. Weights are random (He-scaled, from a
// seeded CPU generator), batch norms start from torchvision's initial state (weight 1,
// bias 0, running mean 0, running variance 1), and convolution weights and activations
// are channels-last, as a CNN is usually run for speed.
#include "spyre_sim/vision_workload.h"

#include <cmath>
#include <functional>
#include <map>
#include <utility>

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/_fused_sgd.h>
#include <ATen/ops/adaptive_avg_pool2d.h>
#include <ATen/ops/add.h>
#include <ATen/ops/batch_norm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/hardsigmoid.h>
#include <ATen/ops/hardswish.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/max_pool2d.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "report/run_report.h"
#include "spyre_sim/device_session.h"

namespace spyre::tools {
namespace {

using nlohmann::json;
using Fn = std::function<at::Tensor(const at::Tensor&)>;

struct Layer {
  std::string name;
  Fn run;
};

// Makes the parameters on the device; training marks them as requiring gradients and
// keeps them for the optimizer.
class Builder {
 public:
  Builder(at::TensorOptions o, bool train) : o_(o), train_(train), g_(at::detail::createCPUGenerator(0)) {}

  at::Tensor param(at::IntArrayRef sizes, double std, bool channels_last = false) {
    at::Tensor t = at::mul(at::randn(sizes, g_), std).to(o_);
    return keep(channels_last ? t.contiguous(at::MemoryFormat::ChannelsLast) : t);
  }
  at::Tensor constant(at::IntArrayRef sizes, double value, bool learnt) {
    at::Tensor t = at::mul(at::ones(sizes, o_), value);
    return learnt ? keep(t) : t;
  }

  // conv (He-scaled), then batch norm, then the activation ("" none).
  Fn conv_bn(std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t stride, std::int64_t groups,
             const std::string& act) {
    const at::Tensor w = param({out, in / groups, k, k}, std::sqrt(1.0 / double(in / groups * k * k)), true);
    Fn bn = batch_norm(out);
    const std::int64_t pad = (k - 1) / 2;
    return [=](const at::Tensor& x) {
      return activation(bn(at::conv2d(x, w, {}, stride, pad, 1, groups)), act);
    };
  }
  Fn batch_norm(std::int64_t c) {
    const at::Tensor weight = constant({c}, 1, true), bias = constant({c}, 0, true);
    const at::Tensor mean = constant({c}, 0, false), var = constant({c}, 1, false);
    const bool training = train_;
    return [=](const at::Tensor& x) { return at::batch_norm(x, weight, bias, mean, var, training, 0.1, 1e-5, false); };
  }
  Fn linear(std::int64_t in, std::int64_t out) {
    const at::Tensor w = param({out, in}, std::sqrt(1.0 / double(in))), b = constant({out}, 0, true);
    return [=](const at::Tensor& x) { return at::linear(x, w, b); };
  }
  Fn conv1x1_bias(std::int64_t in, std::int64_t out) {  // a squeeze-excitation fc
    const at::Tensor w = param({out, in, 1, 1}, std::sqrt(1.0 / double(in)), true), b = constant({out}, 0, true);
    return [=](const at::Tensor& x) { return at::conv2d(x, w, b); };
  }

  static at::Tensor activation(const at::Tensor& x, const std::string& act) {
    if (act == "relu") return at::relu(x);
    if (act == "hardswish") return at::hardswish(x);
    return x;
  }

  const std::vector<at::Tensor>& params() const { return params_; }

 private:
  at::Tensor keep(at::Tensor t) {
    if (train_) {
      t.set_requires_grad(true);
      params_.push_back(t);
    }
    return t;
  }
  at::TensorOptions o_;
  bool train_;
  at::Generator g_;
  std::vector<at::Tensor> params_;
};

std::vector<Layer> resnet(Builder& b, bool bottleneck, const std::vector<int>& blocks) {
  std::vector<Layer> layers;
  const Fn stem = b.conv_bn(3, 64, 7, 2, 1, "relu");
  layers.push_back({"stem", [=](const at::Tensor& x) { return at::max_pool2d(stem(x), 3, 2, 1); }});
  const std::int64_t expansion = bottleneck ? 4 : 1;
  std::int64_t in = 64;
  for (std::size_t stage = 0; stage < blocks.size(); ++stage) {
    const std::int64_t width = 64 << stage;
    for (int i = 0; i < blocks[stage]; ++i) {
      const std::int64_t stride = stage > 0 && i == 0 ? 2 : 1, out = width * expansion;
      // torchvision's Bottleneck (v1.5) strides its 3x3 convolution.
      std::vector<Fn> path;
      if (bottleneck) {
        path = {b.conv_bn(in, width, 1, 1, 1, "relu"), b.conv_bn(width, width, 3, stride, 1, "relu"),
                b.conv_bn(width, out, 1, 1, 1, "")};
      } else {
        path = {b.conv_bn(in, width, 3, stride, 1, "relu"), b.conv_bn(width, out, 3, 1, 1, "")};
      }
      const Fn down = stride != 1 || in != out ? b.conv_bn(in, out, 1, stride, 1, "") : Fn();
      layers.push_back({fmt::format("layer{}.{}", stage + 1, i), [=](const at::Tensor& x) {
                          at::Tensor y = x;
                          for (const Fn& f : path) y = f(y);
                          return at::relu(at::add(y, down ? down(x) : x));
                        }});
      in = out;
    }
  }
  const Fn fc = b.linear(in, 1000);
  layers.push_back({"head", [=](const at::Tensor& x) { return fc(at::adaptive_avg_pool2d(x, {1, 1}).flatten(1)); }});
  return layers;
}

// torchvision's _make_divisible(v, 8).
std::int64_t divisible8(double v) {
  std::int64_t r = std::max<std::int64_t>(8, std::int64_t(v + 4) / 8 * 8);
  if (double(r) < 0.9 * v) r += 8;
  return r;
}

std::vector<Layer> mobilenet_v3_small(Builder& b) {
  struct Conf {
    std::int64_t in, kernel, expanded, out;
    bool se;
    const char* act;
    std::int64_t stride;
  };
  const Conf confs[] = {{16, 3, 16, 16, true, "relu", 2},       {16, 3, 72, 24, false, "relu", 2},
                        {24, 3, 88, 24, false, "relu", 1},      {24, 5, 96, 40, true, "hardswish", 2},
                        {40, 5, 240, 40, true, "hardswish", 1}, {40, 5, 240, 40, true, "hardswish", 1},
                        {40, 5, 120, 48, true, "hardswish", 1}, {48, 5, 144, 48, true, "hardswish", 1},
                        {48, 5, 288, 96, true, "hardswish", 2}, {96, 5, 576, 96, true, "hardswish", 1},
                        {96, 5, 576, 96, true, "hardswish", 1}};
  std::vector<Layer> layers;
  layers.push_back({"stem", b.conv_bn(3, 16, 3, 2, 1, "hardswish")});
  int index = 1;
  for (const Conf& c : confs) {
    std::vector<Fn> path;
    if (c.expanded != c.in) path.push_back(b.conv_bn(c.in, c.expanded, 1, 1, 1, c.act));
    path.push_back(b.conv_bn(c.expanded, c.expanded, c.kernel, c.stride, c.expanded, c.act));
    if (c.se) {
      const std::int64_t squeeze = divisible8(double(c.expanded / 4));
      const Fn fc1 = b.conv1x1_bias(c.expanded, squeeze), fc2 = b.conv1x1_bias(squeeze, c.expanded);
      path.push_back([=](const at::Tensor& x) {
        return at::mul(x, at::hardsigmoid(fc2(at::relu(fc1(at::adaptive_avg_pool2d(x, {1, 1}))))));
      });
    }
    path.push_back(b.conv_bn(c.expanded, c.out, 1, 1, 1, ""));
    const bool residual = c.stride == 1 && c.in == c.out;
    layers.push_back({fmt::format("features.{}", index++), [=](const at::Tensor& x) {
                        at::Tensor y = x;
                        for (const Fn& f : path) y = f(y);
                        return residual ? at::add(y, x) : y;
                      }});
  }
  layers.push_back({fmt::format("features.{}", index), b.conv_bn(96, 576, 1, 1, 1, "hardswish")});
  const Fn fc1 = b.linear(576, 1024), fc2 = b.linear(1024, 1000);
  layers.push_back({"head", [=](const at::Tensor& x) {
                      return fc2(at::hardswish(fc1(at::adaptive_avg_pool2d(x, {1, 1}).flatten(1))));
                    }});
  return layers;
}

std::vector<Layer> vit_b_16(Builder& b, std::int64_t resolution) {
  constexpr std::int64_t kDim = 768, kHeads = 12, kMlp = 3072, kLayers = 12, kPatch = 16;
  const std::int64_t tokens = (resolution / kPatch) * (resolution / kPatch) + 1;
  std::vector<Layer> layers;
  const at::Tensor patch_w = b.param({kDim, 3, kPatch, kPatch}, std::sqrt(1.0 / (3.0 * kPatch * kPatch)));
  const at::Tensor patch_b = b.constant({kDim}, 0, true);
  const at::Tensor cls = b.param({1, 1, kDim}, 0.02), pos = b.param({1, tokens, kDim}, 0.02);
  layers.push_back({"patch_embed", [=](const at::Tensor& x) {
                      const at::Tensor p = at::conv2d(x, patch_w, patch_b, kPatch).flatten(2).transpose(1, 2);
                      return at::add(at::cat({cls.expand({x.size(0), 1, kDim}), p}, 1), pos);
                    }});
  const auto norm = [&b] {
    const at::Tensor w = b.constant({kDim}, 1, true), bias = b.constant({kDim}, 0, true);
    return [=](const at::Tensor& x) { return at::layer_norm(x, {kDim}, w, bias, 1e-6); };
  };
  for (std::int64_t i = 0; i < kLayers; ++i) {
    const Fn ln1 = norm(), qkv = b.linear(kDim, 3 * kDim), proj = b.linear(kDim, kDim), ln2 = norm(),
             fc1 = b.linear(kDim, kMlp), fc2 = b.linear(kMlp, kDim);
    layers.push_back({fmt::format("encoder.{}", i), [=](const at::Tensor& x) {
                        const std::int64_t n = x.size(0), t = x.size(1);
                        const auto parts = qkv(ln1(x)).view({n, t, 3, kHeads, kDim / kHeads}).permute({2, 0, 3, 1, 4});
                        const at::Tensor att = at::scaled_dot_product_attention(parts[0], parts[1], parts[2]);
                        const at::Tensor y = at::add(x, proj(att.transpose(1, 2).reshape({n, t, kDim})));
                        return at::add(y, fc2(at::gelu(fc1(ln2(y)))));
                      }});
  }
  const Fn ln = norm(), head = b.linear(kDim, 1000);
  layers.push_back({"head", [=](const at::Tensor& x) { return head(ln(x).select(1, 0)); }});
  return layers;
}

std::vector<Layer> make_layers(const VisionSpec& s, Builder& b) {
  if (s.arch == "resnet18") return resnet(b, false, {2, 2, 2, 2});
  if (s.arch == "resnet50") return resnet(b, true, {3, 4, 6, 3});
  if (s.arch == "mobilenet_v3_small") return mobilenet_v3_small(b);
  return vit_b_16(b, s.resolution);
}

const char* dtype_name(c10::ScalarType t) { return t == c10::kFloat ? "fp32" : t == c10::kBFloat16 ? "bf16" : "fp16"; }

}  // namespace

bool is_vision_workload(const std::string& name) {
  return name == "resnet18" || name == "resnet50" || name == "mobilenet_v3_small" || name == "vit_b_16" ||
         name == "train";
}

VisionSpec VisionSpec::parse(const std::string& name, const std::vector<std::string>& args) {
  VisionSpec s;
  std::vector<std::string> a = args;
  if (name == "train") {
    if (a.empty()) throw UsageError(fmt::format("train: name the model to train ({})", kVisionHelp));
    s.train = true;
    s.arch = a.front();
    a.erase(a.begin());
    if (!is_vision_workload(s.arch) || s.arch == "train") {
      throw UsageError(fmt::format("train: unknown model '{}' (resnet18, resnet50, mobilenet_v3_small, vit_b_16)",
                                   s.arch));
    }
  } else {
    s.arch = name;
  }
  if (a.size() > 3) {
    throw UsageError(fmt::format("workload '{}' takes at most BATCH,RES,dtype, got {} parameters ({})", name,
                                 args.size(), kVisionHelp));
  }
  if (a.size() > 0) s.batch = positive_integer(a[0], s.arch + " BATCH");
  if (a.size() > 1) s.resolution = positive_integer(a[1], s.arch + " RES");
  if (a.size() > 2) s.dtype = dtype_of(a[2]);
  // The stem's strides and pooling leave a 1x1 map at RES 32 (resnet, mobilenet);
  // vit_b_16 cuts the image into 16x16 patches.
  if (s.arch == "vit_b_16" ? s.resolution % 16 != 0 : s.resolution < 32) {
    throw UsageError(fmt::format("{}: RES {} is {}", s.arch, s.resolution,
                                 s.arch == "vit_b_16" ? "not a multiple of 16 (the patch size)" : "below 32"));
  }
  return s;
}

std::string VisionSpec::describe() const {
  return fmt::format("{}{}:batch={},res={},dtype={}", train ? "train:" : "", arch, batch, resolution,
                     dtype_name(dtype));
}

json run_vision(const VisionSpec& s, const std::string& workload, const std::string& trace) {
  const c10::Device device(c10::DeviceType::PrivateUse1, 0);
  const at::TensorOptions o = at::TensorOptions().device(device).dtype(s.dtype);
  Builder builder(o, s.train);
  const std::vector<Layer> layers = make_layers(s, builder);
  const at::Generator g = at::detail::createCPUGenerator(1);
  at::Tensor x = at::randn({s.batch, 3, s.resolution, s.resolution}, g).to(o);
  if (s.arch != "vit_b_16") x = x.contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor target = at::randint(1000, {s.batch}, g, at::TensorOptions().dtype(c10::kLong)).to(device);
  std::vector<at::Tensor> momentum;
  for (const auto& p : builder.params()) momentum.push_back(at::zeros_like(p));

  // One pass; `after(name)` runs after each layer, the loss and backward, and the step.
  bool first_step = true;
  const auto pass = [&](const std::function<void(const std::string&)>& after) {
    at::Tensor y = x;
    for (const Layer& l : layers) {
      y = l.run(y);
      after(l.name);
    }
    if (!s.train) return;
    at::cross_entropy_loss(y, target).backward();
    after("loss and backward");
    std::vector<at::Tensor> grads;
    for (const auto& p : builder.params()) grads.push_back(p.grad());
    {
      const at::NoGradGuard no_grad;
      at::_fused_sgd_(builder.params(), grads, momentum, 1e-4, 0.9, 0.01, 0.0, false, false, first_step);
    }
    first_step = false;
    for (const auto& p : builder.params()) p.mutable_grad().reset();
    after("sgd step");
  };
  const auto no_grad_unless_training = [&](auto body) {
    if (s.train) return body();
    const at::NoGradGuard no_grad;
    return body();
  };
  no_grad_unless_training([&] { pass([](const std::string&) {}); });  // compiles and loads every kernel
  spyreDeviceSynchronize(device_handle());
  spyreDeviceResetStats(device_handle());
  backend::reset_fallback_counts();
  if (!trace.empty()) spyreTraceStart(device_handle());
  const auto fault = [&](spyre_result_t r) {
    if (r == SPYRE_SUCCESS) return;
    const std::string what = spyreGetLastErrorMessage();
    if (!trace.empty()) spyreTraceStop(device_handle(), trace.c_str());
    throw DeviceFault(what);
  };
  // Each layer's share: the device's totals after it (synchronized) less those before.
  json rows = json::array();
  json before = {{"time_us", 0.0}, {"kernels", 0}, {"macs", 0.0}, {"dram_read_bytes", 0.0}, {"dram_write_bytes", 0.0}};
  no_grad_unless_training([&] {
    pass([&](const std::string& name) {
      fault(spyreDeviceSynchronize(device_handle()));
      const json now = report::make_report(workload, 0, device_report(), {})["metrics"];
      json row = {{"name", name}};
      for (auto it = before.begin(); it != before.end(); ++it) row[it.key()] = now[it.key()].get<double>() - it->get<double>();
      row["dram_bytes"] = row["dram_read_bytes"].get<double>() + row["dram_write_bytes"].get<double>();
      rows.push_back(row);
      for (auto it = before.begin(); it != before.end(); ++it) before[it.key()] = now[it.key()];
    });
  });
  fault(spyreDeviceSynchronize(device_handle()));
  if (!trace.empty() && spyreTraceStop(device_handle(), trace.c_str()) != SPYRE_SUCCESS) {
    throw UsageError(fmt::format("--trace: {}", spyreGetLastErrorMessage()));
  }
  json result = report::make_report(workload, 0, device_report(), backend::fallback_counts());
  const double total_us = result["metrics"].value("time_us", 0.0);
  result["metrics"]["images_per_s"] = total_us > 0 ? double(s.batch) / (total_us * 1e-6) : 0.0;
  result["vision"] = {{"spec", s.describe()}, {"images_per_s", result["metrics"]["images_per_s"]}, {"layers", rows}};
  return result;
}

}  // namespace spyre::tools
