// spyre-sim run: a named workload on the simulated device through the real stack
// (PyTorch backend, driver, firmware, SystemC model), reported from the device's own
// statistics; plus the golden check (--expect-json) and spyre-sim diff.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/_softmax.h>
#include <ATen/ops/add.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "report/run_report.h"
#include "spyre_sim/device_session.h"
#include "spyre_sim/llm_workload.h"
#include "spyre_sim/vision_workload.h"

namespace spyre::tools {
namespace {

using nlohmann::json;
using report::check_golden;
using report::GoldenCheck;
using report::make_report;
using report::report_text;


// "gemm:4096,4096,4096,fp16" -> {"gemm", {"4096", "4096", "4096", "fp16"}}
std::pair<std::string, std::vector<std::string>> parse_workload(const std::string& w) {
  const auto colon = w.find(':');
  std::pair<std::string, std::vector<std::string>> r{w.substr(0, colon), {}};
  if (colon == std::string::npos) return r;
  std::stringstream ss(w.substr(colon + 1));
  for (std::string item; std::getline(ss, item, ',');) r.second.push_back(item);
  return r;
}


// A workload: set-up (inputs on the device, kernels compiled by a first run) and the
// measured run, both enqueue work on the current stream.
struct Workload {
  std::function<void()> run;
  double flops = 0;  // useful floating-point operations of one run (for the roofline)
};

const char* kWorkloadHelp =
    "gemm:M,N,K[,dtype] | add:N[,dtype] | softmax:ROWS,COLS[,dtype] | mlp[:BATCH,IN,HIDDEN,OUT[,dtype]] | "
    "attention[:BATCH,SEQ,HEADS,HEAD_DIM[,dtype]] | block[:TOKENS,DIM,HEADS,HIDDEN[,dtype]] | "
    "llm[:layers=,dim=,heads=,kv_heads=,ffn=,vocab=,prompt=,gen=,batch=,dtype=,seed=,warmup=0|1,check=cpu,"
    "kv=contiguous|paged,block=,tp=] | "
    "resnet18|resnet50|mobilenet_v3_small|vit_b_16[:BATCH,RES[,dtype]] | train:MODEL[,BATCH,RES[,dtype]] (dtype fp16 by "
    "default)";

Workload make_workload(const std::string& spec) {
  const auto [name, a] = parse_workload(spec);
  const c10::Device device(c10::DeviceType::PrivateUse1, 0);
  const auto opts = [&](std::size_t dtype_at) {
    return at::TensorOptions().device(device).dtype(a.size() > dtype_at ? dtype_of(a[dtype_at]) : c10::kHalf);
  };
  const auto need = [&](std::size_t lo, std::size_t hi) {
    if (a.size() < lo || a.size() > hi) {
      throw UsageError(fmt::format("workload '{}' takes {} to {} parameters, got {} (workloads: {})", name, lo, hi,
                                   a.size(), kWorkloadHelp));
    }
  };
  if (name == "gemm") {
    need(3, 4);
    const auto m = positive_integer(a[0], "gemm M"), n = positive_integer(a[1], "gemm N"),
               k = positive_integer(a[2], "gemm K");
    const at::Tensor x = at::randn({m, k}).to(opts(3)), y = at::randn({k, n}).to(opts(3));
    return {[x, y] { at::mm(x, y); }, 2.0 * double(m) * double(n) * double(k)};
  }
  if (name == "add") {
    need(1, 2);
    const auto n = positive_integer(a[0], "add N");
    const at::Tensor x = at::randn({n}).to(opts(1)), y = at::randn({n}).to(opts(1));
    return {[x, y] { at::add(x, y); }, double(n)};
  }
  if (name == "softmax") {
    need(2, 3);
    const auto r = positive_integer(a[0], "softmax ROWS"), c = positive_integer(a[1], "softmax COLS");
    const at::Tensor x = at::randn({r, c}).to(opts(2));
    return {[x] { at::_softmax(x, 1, false); }, 5.0 * double(r) * double(c)};
  }
  if (name == "mlp") {
    need(0, 5);
    const std::int64_t batch = a.size() > 0 ? positive_integer(a[0], "mlp BATCH") : 512;
    const std::int64_t in = a.size() > 1 ? positive_integer(a[1], "mlp IN") : 4096;
    const std::int64_t hidden = a.size() > 2 ? positive_integer(a[2], "mlp HIDDEN") : 11008;
    const std::int64_t out = a.size() > 3 ? positive_integer(a[3], "mlp OUT") : 4096;
    const auto o = opts(4);
    const at::Tensor x = at::randn({batch, in}).to(o);
    const at::Tensor w1 = at::mul(at::randn({hidden, in}), 0.02).to(o), b1 = at::randn({hidden}).to(o);
    const at::Tensor w2 = at::mul(at::randn({out, hidden}), 0.02).to(o), b2 = at::randn({out}).to(o);
    return {[=] { at::linear(at::gelu(at::linear(x, w1, b1), "tanh"), w2, b2); },
            2.0 * double(batch) * double(in * hidden + hidden * out)};
  }
  if (name == "attention") {  // causal scaled-dot-product attention (the fused device kernel)
    need(0, 5);
    const std::int64_t batch = a.size() > 0 ? positive_integer(a[0], "attention BATCH") : 1;
    const std::int64_t seq = a.size() > 1 ? positive_integer(a[1], "attention SEQ") : 2048;
    const std::int64_t heads = a.size() > 2 ? positive_integer(a[2], "attention HEADS") : 32;
    const std::int64_t dim = a.size() > 3 ? positive_integer(a[3], "attention HEAD_DIM") : 128;
    const auto o = opts(4);
    const at::Tensor q = at::randn({batch, heads, seq, dim}).to(o), k = at::randn({batch, heads, seq, dim}).to(o),
                     v = at::randn({batch, heads, seq, dim}).to(o);
    return {[=] { at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true); },
            4.0 * double(batch * heads) * double(seq) * double(seq) * double(dim)};
  }
  if (name == "block") {  // a pre-norm GPT block: x + attn(ln(x)), then + mlp(ln(x))
    need(0, 5);
    const std::int64_t tokens = a.size() > 0 ? positive_integer(a[0], "block TOKENS") : 2048;
    const std::int64_t dim = a.size() > 1 ? positive_integer(a[1], "block DIM") : 4096;
    const std::int64_t heads = a.size() > 2 ? positive_integer(a[2], "block HEADS") : 32;
    const std::int64_t hidden = a.size() > 3 ? positive_integer(a[3], "block HIDDEN") : 4 * dim;
    if (dim % heads != 0) throw UsageError(fmt::format("block: DIM {} is not a multiple of HEADS {}", dim, heads));
    const auto o = opts(4);
    const auto weight = [&](std::int64_t rows, std::int64_t cols) { return at::mul(at::randn({rows, cols}), 0.02).to(o); };
    const at::Tensor x = at::randn({tokens, dim}).to(o), g1 = at::ones({dim}).to(o), g2 = at::ones({dim}).to(o);
    const at::Tensor wqkv = weight(3 * dim, dim), bqkv = at::zeros({3 * dim}).to(o), wo = weight(dim, dim),
                     bo = at::zeros({dim}).to(o), w1 = weight(hidden, dim), b1 = at::zeros({hidden}).to(o),
                     w2 = weight(dim, hidden), b2 = at::zeros({dim}).to(o);
    const std::int64_t head_dim = dim / heads;
    return {[=] {
              const at::Tensor qkv = at::linear(at::layer_norm(x, {dim}, g1), wqkv, bqkv);
              const auto split = qkv.split(dim, -1);
              const auto heads_of = [&](const at::Tensor& t) { return t.view({tokens, heads, head_dim}).transpose(0, 1); };
              const at::Tensor att = at::scaled_dot_product_attention(heads_of(split[0]), heads_of(split[1]),
                                                                      heads_of(split[2]), {}, 0.0, true);
              const at::Tensor x2 = at::add(x, at::linear(att.transpose(0, 1).reshape({tokens, dim}), wo, bo));
              at::add(x2, at::linear(at::gelu(at::linear(at::layer_norm(x2, {dim}, g2), w1, b1), "tanh"), w2, b2));
            },
            2.0 * double(tokens) * double(4 * dim * dim + 2 * dim * hidden) +
                4.0 * double(heads) * double(tokens) * double(tokens) * double(head_dim)};
  }
  throw UsageError(fmt::format("unknown workload '{}' (workloads: {})", name, kWorkloadHelp));
}

// A TorchScript model with random inputs of the given shapes: "64,512" (fp32, as
// models are usually saved) or "64,512:fp16" (the model is converted to the first
// input's dtype).
Workload make_model_workload(const std::string& path, const std::vector<std::string>& shapes) {
  if (shapes.empty()) throw UsageError("--model needs at least one --input SHAPE[:dtype], e.g. --input 64,512");
  const c10::Device device(c10::DeviceType::PrivateUse1, 0);
  torch::jit::Module module;
  try {
    module = torch::jit::load(path, device);  // parameters created on the device
  } catch (const c10::Error& e) {
    throw UsageError("--model " + path + ": not a TorchScript file (" + e.what_without_backtrace() + ")");
  }
  std::vector<c10::IValue> inputs;
  std::optional<c10::ScalarType> dtype;
  for (const auto& spec : shapes) {
    const auto colon = spec.find(':');
    const c10::ScalarType t = colon == std::string::npos ? c10::kFloat : dtype_of(spec.substr(colon + 1));
    std::vector<std::int64_t> sizes;
    std::stringstream ss(spec.substr(0, colon));
    for (std::string d; std::getline(ss, d, ',');) sizes.push_back(positive_integer(d, "--input " + spec));
    inputs.emplace_back(at::randn(sizes).to(at::TensorOptions().device(device).dtype(t)));
    if (!dtype) dtype = t;
  }
  if (*dtype != c10::kFloat) module.to(*dtype);
  module.eval();
  return {[module, inputs]() mutable { module.forward(inputs); }, 0.0};
}

struct RunOptions {
  ConfigOptions config;
  std::string model;
  std::vector<std::string> inputs;
  std::string workload;
  std::string trace;
  bool json_out = false;
  std::string expect;
  std::string tolerance = "2%";
  bool update_golden = false;
  spyre_device_mode_t mode = SPYRE_MODE_TIMED;
};

double parse_tolerance(const std::string& t) {
  try {
    std::size_t used = 0;
    const double v = std::stod(t, &used);
    if (used == t.size()) return v;
    if (used + 1 == t.size() && t.back() == '%') return v / 100;
  } catch (const std::exception&) {
  }
  throw UsageError("--tolerance: expected a fraction (0.02) or a percentage (2%), found '" + t + "'");
}

// A `run --json` report: JSON with a non-empty `metrics` object of numbers.
json read_report(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read " + path);
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded()) throw UsageError(path + " is not JSON");
  if (!j.is_object() || !j.contains("metrics") || !j["metrics"].is_object() || j["metrics"].empty()) {
    throw UsageError(path + ": expected a spyre-sim run --json report (an object with a non-empty 'metrics'), found " +
                     (j.is_object() ? "an object without metrics" : std::string("JSON of type ") + j.type_name()));
  }
  return j;
}

// Checks now that `path` can be written (so a bad path fails before the run, not after
// it), without creating or changing the file: the folder must exist and be writable, and
// an existing file writable.
void require_writable(const std::string& path, const char* option) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw UsageError(fmt::format("{}: cannot write {} (no folder {})", option, path, dir.string()));
  }
  const bool exists = fs::exists(p, ec);
  if (::access((exists ? p : dir).c_str(), W_OK) != 0) {
    throw UsageError(fmt::format("{}: cannot write {} ({})", option, path, std::strerror(errno)));
  }
}

// The measured run of a named workload or a TorchScript model: one run compiles and
// loads every kernel, then the device's statistics are reset and a second is reported.
json run_workload(const RunOptions& o) {
  Workload w = o.model.empty() ? make_workload(o.workload) : make_model_workload(o.model, o.inputs);  // uploads inputs
  w.run();                                 // compiles and loads every kernel once
  spyreDeviceSynchronize(device_handle());
  spyreDeviceResetStats(device_handle());
  backend::reset_fallback_counts();
  if (!o.trace.empty()) spyreTraceStart(device_handle());
  w.run();
  const spyre_result_t sync = spyreDeviceSynchronize(device_handle());
  const std::string fault = sync != SPYRE_SUCCESS ? spyreGetLastErrorMessage() : "";
  // The trace is written even when the run faulted: that is when it is wanted most.
  if (!o.trace.empty() && spyreTraceStop(device_handle(), o.trace.c_str()) != SPYRE_SUCCESS) {
    throw UsageError(fmt::format("--trace: {}", spyreGetLastErrorMessage()));
  }
  if (sync != SPYRE_SUCCESS) {
    throw DeviceFault(o.trace.empty() ? fault : fmt::format("{} (trace of the run: {})", fault, o.trace));
  }
  return make_report(o.model.empty() ? o.workload : "model:" + o.model, w.flops, device_report(),
                     backend::fallback_counts());
}

int run(const RunOptions& o) {
  // An llm workload with tp=N runs on N cards (the workload is parsed first so that a
  // bad one is reported before the driver starts).
  std::optional<LlmSpec> llm;
  if (o.model.empty() && !o.workload.empty() && parse_workload(o.workload).first == "llm") {
    llm = LlmSpec::parse(parse_workload(o.workload).second);
  }
  // Its cards are driven as tensor-parallel serving drives them, a host process per
  // card (host.threads=per_card; a --set host.threads=one after it gives one host
  // thread for all of them).
  ConfigOptions config = o.config;
  if (llm && llm->tp > 1) config.overrides.insert(config.overrides.begin(), "host.threads=per_card");
  configure_driver(config, o.mode, llm ? static_cast<std::uint32_t>(llm->tp) : 1);

  if (o.workload.empty() == o.model.empty()) throw UsageError("give either --workload or --model (one of them)");
  if (!o.trace.empty()) require_writable(o.trace, "--trace");
  if (o.update_golden) {
    if (o.expect.empty()) throw UsageError("--update-golden needs --expect-json FILE");
    require_writable(o.expect, "--expect-json");
  }
  const auto [name, args] = o.model.empty() ? parse_workload(o.workload) : std::pair<std::string, std::vector<std::string>>();
  const json result = llm                          ? run_llm(*llm, o.workload, o.trace)
                      : is_vision_workload(name) ? run_vision(VisionSpec::parse(name, args), o.workload, o.trace)
                                                 : run_workload(o);
  if (o.json_out) {
    fmt::print("{}\n", result.dump(2, ' ', false, json::error_handler_t::replace));
  } else {
    fmt::print("{}", report_text(result));
    if (!o.trace.empty()) fmt::print("trace: {} (Perfetto / chrome://tracing)\n", o.trace);
  }
  if (o.update_golden) {
    std::ofstream golden(o.expect, std::ios::trunc);
    golden << result.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    golden.flush();
    if (!golden) throw UsageError(fmt::format("--expect-json: cannot write {} ({})", o.expect, std::strerror(errno)));
    std::fprintf(stderr, "spyre-sim: wrote golden %s\n", o.expect.c_str());
    return kExitSuccess;
  }
  if (!o.expect.empty()) {
    std::ifstream in(o.expect);
    if (!in) throw UsageError("--expect-json: cannot read " + o.expect);
    const json golden = json::parse(in, nullptr, false);
    if (golden.is_discarded()) throw UsageError("--expect-json: " + o.expect + " is not JSON");
    const GoldenCheck check = check_golden(golden, result, parse_tolerance(o.tolerance));
    std::fprintf(stderr, "%s", check.text.c_str());
    return check.passed ? kExitSuccess : kExitRegression;
  }
  return kExitSuccess;
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "run a workload on the simulated device and report");
  add_config_options(*cmd, o->config);
  cmd->add_option("--workload", o->workload, kWorkloadHelp);
  cmd->add_option("--model", o->model, "a TorchScript file (torch.jit.save) to run instead of a named workload");
  cmd->add_option("--input", o->inputs, "the model's inputs: SHAPE[:dtype], e.g. 64,512 (random normal; repeatable)");
  cmd->add_option("--trace", o->trace, "write a Perfetto/Chrome JSON trace of the measured run");
  cmd->add_flag("--json", o->json_out, "print the report as JSON (schema_version 1)");
  cmd->add_option("--expect-json", o->expect, "golden report: exit 1 when cycles or traffic drift beyond --tolerance");
  cmd->add_option("--tolerance", o->tolerance, "allowed relative drift (default 2%)");
  cmd->add_flag("--update-golden", o->update_golden, "write this run's report to the --expect-json file");
  add_mode_option(*cmd, o->mode,
                  "timed (default); no-data: the same cycles and traffic without computing values (fast what-if "
                  "runs of big models); functional: no timing");
  cmd->callback([o, &exit_code] { with_torch_errors([&] { exit_code = run(*o); }); });
}

void add_diff_command(CLI::App& app, int& exit_code) {
  auto files = std::make_shared<std::vector<std::string>>();
  auto tolerance = std::make_shared<std::string>("0");
  CLI::App* cmd = app.add_subcommand("diff", "compare two spyre-sim run --json results metric by metric");
  cmd->add_option("files", *files, "A.json B.json")->required()->expected(2);
  cmd->add_option("--tolerance", *tolerance, "exit 1 when a cycle or traffic metric differs by more (default 0)");
  cmd->callback([files, tolerance, &exit_code] {
    const json a = read_report((*files)[0]), b = read_report((*files)[1]);
    const GoldenCheck d = check_golden(a, b, parse_tolerance(*tolerance), /*all_metrics=*/true);
    fmt::print("{}", d.text);
    exit_code = d.passed ? kExitSuccess : kExitRegression;
  });
}

}  // namespace spyre::tools
