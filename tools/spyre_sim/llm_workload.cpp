// The llm workload (llm_workload.h): a Llama-architecture decoder (RMSNorm, rotary
// embeddings, grouped-query attention with a KV cache, SwiGLU) written with ATen ops, so
// it reaches the device through the same backend a PyTorch model does.
#include "spyre_sim/llm_workload.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/add.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cos.h>
#include <ATen/ops/div.h>
#include <ATen/ops/remainder.h>
#include <ATen/ops/embedding.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/lt.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/neg.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/rms_norm.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/sin.h>
#include <ATen/ops/zeros.h>
#include <fmt/format.h>

#include "aten/cpu_fallback.h"
#include "report/run_report.h"
#include "spyre/cost/roofline.h"
#include "spyre_sim/device_session.h"

namespace spyre::tools {

using nlohmann::json;

namespace {

struct Layer {
  at::Tensor attn_norm, wq, wk, wv, wo, ffn_norm, w1, w3, w2;
};

struct Model {
  std::vector<Layer> layers;
  at::Tensor embed, norm, head;  // embedding table, final norm, output projection
  at::Tensor cos, sin;           // rotary tables [max positions, head_dim]
  at::Tensor first_half;         // [2, 1] bool, true then false: the fused rotary kernel's halves
};

// The K/V caches, one pair per layer, [batch, kv_heads, max positions, head_dim]; or,
// paged, pools [pages, page, kv_heads, head_dim] and each sequence's slot table
// [batch, max positions] (int32, for the attention); for the cache updates (int64,
// contiguous) the prompt's rows [batch x prompt] and each step's [max positions, batch].
struct Cache {
  std::vector<at::Tensor> k, v;
  at::Tensor slots, prompt_rows, step_rows;
};

constexpr double kRopeTheta = 10000.0;
constexpr double kNormEps = 1e-5;

std::int64_t max_positions(const LlmSpec& s) { return s.prompt + s.gen; }

// Random weights made where they live (the device's generator on spyre): linear
// weights ~ N(0, 0.02), embeddings ~ N(0, 1), norms 1; rotary tables from the positions.
Model make_model(const LlmSpec& s, const at::TensorOptions& o) {
  const auto normal = [&](std::vector<std::int64_t> sizes, double std) {
    return at::empty(sizes, o).normal_(0.0, std);
  };
  const std::int64_t hd = s.head_dim();
  Model m;
  for (std::int64_t i = 0; i < s.layers; ++i) {
    m.layers.push_back({at::ones({s.dim}, o), normal({s.heads * hd, s.dim}, 0.02),
                        normal({s.kv_heads * hd, s.dim}, 0.02), normal({s.kv_heads * hd, s.dim}, 0.02),
                        normal({s.dim, s.heads * hd}, 0.02), at::ones({s.dim}, o), normal({s.ffn, s.dim}, 0.02),
                        normal({s.ffn, s.dim}, 0.02), normal({s.dim, s.ffn}, 0.02)});
  }
  m.embed = normal({s.vocab, s.dim}, 1.0);
  m.norm = at::ones({s.dim}, o);
  m.head = normal({s.vocab, s.dim}, 0.02);
  // inv_freq_i = theta^(-2i / hd); angle(p, i) = p x inv_freq_i, repeated for both halves.
  const auto f32 = o.dtype(c10::kFloat);
  const at::Tensor exponent = at::arange(0, hd, 2, f32).mul(-1.0 / double(hd));
  const at::Tensor inv_freq = at::pow(kRopeTheta, exponent);
  const at::Tensor angle = at::arange(max_positions(s), f32).view({-1, 1}).mul(inv_freq.view({1, -1}));
  const at::Tensor both = at::cat({angle, angle}, -1);
  m.cos = at::cos(both).to(s.dtype);
  m.sin = at::sin(both).to(s.dtype);
  m.first_half = at::arange(2, f32).lt(1.0).view({2, 1});
  return m;
}

Model copy_model(const Model& m, const at::Device& d) {
  const auto to = [&](const at::Tensor& t) { return t.to(d); };
  Model c;
  for (const Layer& l : m.layers) {
    c.layers.push_back({to(l.attn_norm), to(l.wq), to(l.wk), to(l.wv), to(l.wo), to(l.ffn_norm), to(l.w1),
                        to(l.w3), to(l.w2)});
  }
  c.embed = to(m.embed);
  c.norm = to(m.norm);
  c.head = to(m.head);
  c.cos = to(m.cos);
  c.sin = to(m.sin);
  c.first_half = to(m.first_half);
  return c;
}

Cache make_cache(const LlmSpec& s, const at::TensorOptions& o) {
  Cache c;
  if (s.page > 0) {
    const std::int64_t per_seq = (max_positions(s) + s.page - 1) / s.page, pages = per_seq * s.batch;
    for (std::int64_t i = 0; i < s.layers; ++i) {
      c.k.push_back(at::zeros({pages, s.page, s.kv_heads, s.head_dim()}, o));
      c.v.push_back(at::zeros({pages, s.page, s.kv_heads, s.head_dim()}, o));
    }
    // Position t of sequence b: page t / P of the sequence, which is pool page
    // (t / P) x batch + b; row t % P of it.
    const at::Tensor t = at::arange(max_positions(s), at::TensorOptions().dtype(c10::kLong)).view({1, -1});
    const at::Tensor b = at::arange(s.batch, at::TensorOptions().dtype(c10::kLong)).view({-1, 1});
    const at::Tensor slots = (t.div(s.page, "floor").mul(s.batch).add(b)).mul(s.page).add(t.remainder(s.page));
    c.prompt_rows = slots.narrow(1, 0, s.prompt).reshape({-1}).to(o.device());
    c.step_rows = slots.t().contiguous().to(o.device());
    c.slots = slots.to(c10::kInt).to(o.device());
    return c;
  }
  for (std::int64_t i = 0; i < s.layers; ++i) {
    c.k.push_back(at::zeros({s.batch, s.kv_heads, max_positions(s), s.head_dim()}, o));
    c.v.push_back(at::zeros({s.batch, s.kv_heads, max_positions(s), s.head_dim()}, o));
  }
  return c;
}

// spyre::paged_attention (backend/aten/attention_ops.cpp), through the dispatcher: the
// device kernel on spyre tensors, the reference on CPU ones.
at::Tensor paged_attention(const at::Tensor& q, const at::Tensor& k_pool, const at::Tensor& v_pool,
                           const at::Tensor& slots, const std::optional<at::Tensor>& mask) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("spyre::paged_attention", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const std::optional<at::Tensor>&, std::optional<double>)>();
  return op.call(q, k_pool, v_pool, slots, mask, std::nullopt);
}

// The backend's fused kernels, through the dispatcher (device tensors only): what the
// torch.compile backend puts in place of the eager ops (backend/README.md), so the
// workload's device time is a compiled model's. The CPU reference runs the eager ops.
at::Tensor linear_concat(const at::Tensor& x, const std::vector<at::Tensor>& weights) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("spyre::linear_concat", "")
                             .typed<at::Tensor(const at::Tensor&, at::TensorList)>();
  return op.call(x, weights);
}
at::Tensor linear_gated(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("spyre::linear_gated", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, c10::string_view)>();
  return op.call(x, gate, up, "silu");
}
// residual + x @ w^T, the residual added in the matmul's epilogue.
at::Tensor linear_residual(const at::Tensor& x, const at::Tensor& w, const at::Tensor& residual) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("spyre::matmul_epilogue", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, c10::string_view,
                            const std::optional<at::Tensor>&, c10::string_view)>();
  return op.call(x, w.t(), std::nullopt, "", residual, "add");
}

// x [B, L, heads, hd] (the projections' layout; so is the result, which K's cache
// update then reads by whole rows) rotated by the angles of positions pos..pos+L-1 in
// one spyre::fused_pointwise kernel (the program the compile backend writes for it): the
// last dim split in halves, x = select(first half, x0, x1), rotate_half(x) =
// select(first half, -x1, x0), then x cos + rotate_half(x) sin in fp32, rounded once.
at::Tensor rotary_fused(const at::Tensor& x, const Model& m, std::int64_t pos) {
  static const auto codes_op = c10::Dispatcher::singleton()
                                   .findSchemaOrThrow("spyre::pointwise_codes", "")
                                   .typed<c10::Dict<std::string, std::int64_t>()>();
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("spyre::fused_pointwise", "")
          .typed<at::Tensor(c10::string_view, c10::IntArrayRef, c10::ArrayRef<double>, at::TensorList, c10::ScalarType,
                            std::int64_t, c10::IntArrayRef)>();
  static const std::vector<std::int64_t> program = [] {
    const c10::Dict<std::string, std::int64_t> c = codes_op.call();
    const std::int64_t fp32 = c.at("dtype.fp32"), in = c.at("arg.input"), step = c.at("arg.step"), none = c.at("arg.none");
    const std::int64_t select = c.at("kind.select"), binary = c.at("kind.binary"), unary = c.at("kind.unary");
    // Inputs: 0 cos, 1 the halves' mask, 2 x's first half, 3 its second half, 4 sin.
    return std::vector<std::int64_t>{
        select, 0, fp32, in, 1, in, 2, in, 3,                                 // 0: x
        binary, c.at("binary.mul"), fp32, step, 0, in, 0, none, 0,           // 1: x cos
        unary, c.at("unary.neg"), fp32, in, 3, none, 0, none, 0,             // 2: -x1
        select, 0, fp32, in, 1, step, 2, in, 2,                               // 3: rotate_half(x)
        binary, c.at("binary.mul"), fp32, step, 3, in, 4, none, 0,           // 4: rotate_half(x) sin
        binary, c.at("binary.add"), fp32, step, 1, step, 4, none, 0};        // 5: the sum
  }();
  const std::int64_t len = x.size(1), hd = x.size(3);
  const auto table = [&](const at::Tensor& t) { return t.narrow(0, pos, len).view({len, 1, hd}); };
  const std::vector<at::Tensor> inputs{table(m.cos), m.first_half, x, x, table(m.sin)};
  return op.call("spyre::fused[rotary]", program, {}, inputs, x.scalar_type(), hd / 2, {-1, 2, 0, 1, -1});
}

// x [B, heads, L, hd] rotated by the angles of positions pos..pos+L-1:
// x cos + rotate_half(x) sin, rotate_half(x) = (-x2, x1).
at::Tensor rotary(const at::Tensor& x, const Model& m, std::int64_t pos) {
  const std::int64_t len = x.size(2), half = x.size(3) / 2;
  const at::Tensor rotated = at::cat({at::neg(x.narrow(3, half, half)), x.narrow(3, 0, half)}, 3);
  return at::add(at::mul(x, m.cos.narrow(0, pos, len)), at::mul(rotated, m.sin.narrow(0, pos, len)));
}

// One forward over tokens [B, L] at positions pos..pos+L-1; returns the greedy next
// token [B, 1] (int64). `mask`: [B, 1, L, pos+L] boolean, or undefined (causal, one
// length for the whole batch).
at::Tensor forward(const LlmSpec& s, const Model& m, Cache& cache, const at::Tensor& tokens, std::int64_t pos,
                   const at::Tensor& mask) {
  const std::int64_t b = tokens.size(0), len = tokens.size(1), hd = s.head_dim();
  at::Tensor h = at::embedding(m.embed, tokens);
  const bool fused = h.device().type() == c10::DeviceType::PrivateUse1;
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const Layer& l = m.layers[i];
    const at::Tensor a = at::rms_norm(h, {s.dim}, l.attn_norm, kNormEps);
    // Q, K (rotated) and V as [B, heads, L, hd]. On the device: one kernel for the three
    // projections and one rotating Q's and K's heads together (adjacent in its result).
    at::Tensor q, k_new, v_new;
    if (fused) {
      const at::Tensor qkv = linear_concat(a.reshape({b * len, s.dim}), {l.wq, l.wk, l.wv});
      const auto heads = [&](std::int64_t first, std::int64_t n) {  // [B, L, n, hd]
        return qkv.narrow(1, first * hd, n * hd).view({b, len, n, hd});
      };
      const at::Tensor qk = rotary_fused(heads(0, s.heads + s.kv_heads), m, pos);
      q = qk.narrow(2, 0, s.heads).transpose(1, 2);
      k_new = qk.narrow(2, s.heads, s.kv_heads).transpose(1, 2);
      v_new = heads(s.heads + s.kv_heads, s.kv_heads).transpose(1, 2);
    } else {
      const auto heads_of = [&](const at::Tensor& w, std::int64_t n) {
        return at::linear(a, w).view({b, len, n, hd}).transpose(1, 2);
      };
      q = rotary(heads_of(l.wq, s.heads), m, pos);
      k_new = rotary(heads_of(l.wk, s.kv_heads), m, pos);
      v_new = heads_of(l.wv, s.kv_heads);
    }
    const std::optional<at::Tensor> opt_mask = mask.defined() ? std::optional(mask) : std::nullopt;
    at::Tensor att;
    if (s.page > 0) {
      // The new rows written at their slots; the prompt attends over its own keys, a
      // decode step through the slot table.
      // (Rows in (sequence, position) order: a decode step has one position.)
      const at::Tensor where = pos == 0 ? cache.prompt_rows : cache.step_rows.narrow(0, pos, len).reshape({-1});
      const auto rows = [&](const at::Tensor& x) { return x.transpose(1, 2).reshape({b * len, s.kv_heads, hd}); };
      cache.k[i].view({-1, s.kv_heads, hd}).index_copy_(0, where, rows(k_new));
      cache.v[i].view({-1, s.kv_heads, hd}).index_copy_(0, where, rows(v_new));
      if (pos == 0) {
        att = at::scaled_dot_product_attention(q, k_new, v_new, opt_mask, 0.0, /*is_causal=*/!mask.defined() && len > 1,
                                               std::nullopt, /*enable_gqa=*/s.kv_heads != s.heads);
      } else {
        att = paged_attention(q, cache.k[i], cache.v[i], cache.slots.narrow(1, 0, pos + len), opt_mask);
      }
    } else {
      cache.k[i].narrow(2, pos, len).copy_(k_new);
      cache.v[i].narrow(2, pos, len).copy_(v_new);
      const at::Tensor k = cache.k[i].narrow(2, 0, pos + len), v = cache.v[i].narrow(2, 0, pos + len);
      att = at::scaled_dot_product_attention(q, k, v, opt_mask, 0.0, /*is_causal=*/!mask.defined() && len > 1,
                                             std::nullopt, /*enable_gqa=*/s.kv_heads != s.heads);
    }
    if (fused) {  // the residual adds in the projections' epilogues; SwiGLU's two linears as one kernel
      const at::Tensor rows = att.transpose(1, 2).reshape({b * len, s.heads * hd});
      h = linear_residual(rows, l.wo, h.reshape({b * len, s.dim})).view({b, len, s.dim});
      const at::Tensor f = at::rms_norm(h, {s.dim}, l.ffn_norm, kNormEps);
      const at::Tensor g = linear_gated(f.reshape({b * len, s.dim}), l.w1, l.w3);
      h = linear_residual(g, l.w2, h.reshape({b * len, s.dim})).view({b, len, s.dim});
    } else {
      h = at::add(h, at::linear(att.transpose(1, 2).reshape({b, len, s.heads * hd}), l.wo));
      const at::Tensor f = at::rms_norm(h, {s.dim}, l.ffn_norm, kNormEps);
      h = at::add(h, at::linear(at::mul(at::silu(at::linear(f, l.w1)), at::linear(f, l.w3)), l.w2));
    }
  }
  const at::Tensor last = at::rms_norm(h.narrow(1, len - 1, 1), {s.dim}, m.norm, kNormEps);
  return at::argmax(at::linear(last, m.head), -1);
}

// The prompts [B, prompt] (left-padded with token 0) and, when lengths differ, the key
// validity [B, 1, 1, max positions] (false on padding), made on the host.
struct Prompts {
  at::Tensor tokens;
  at::Tensor key_valid;
};

Prompts make_prompts(const LlmSpec& s) {
  Prompts p;
  const at::Generator g = at::detail::createCPUGenerator(s.seed);
  p.tokens = at::randint(1, s.vocab, {s.batch, s.prompt}, g, at::TensorOptions().dtype(c10::kLong));
  if (s.batch == 1) return p;
  const auto lengths = llm_prompt_lengths(s);
  p.key_valid = at::ones({s.batch, 1, 1, max_positions(s)}, at::TensorOptions().dtype(c10::kBool));
  for (std::int64_t i = 0; i < s.batch; ++i) {
    const std::int64_t pad = s.prompt - lengths[std::size_t(i)];
    if (pad > 0) {
      p.tokens[i].narrow(0, 0, pad).fill_(0);
      p.key_valid[i].narrow(2, 0, pad).fill_(false);
    }
  }
  return p;
}

// The prefill mask [B, 1, L, L]: causal, padding keys off, and each padding row sees
// itself (so no row is all -inf and no NaN reaches the cache).
at::Tensor prefill_mask(const LlmSpec& s, const at::Tensor& key_valid) {
  const at::Tensor r = at::arange(s.prompt).view({-1, 1}), c = at::arange(s.prompt).view({1, -1});
  return c.le(r).logical_and(key_valid.narrow(3, 0, s.prompt)).logical_or(c.eq(r));
}

struct Generated {
  std::vector<at::Tensor> tokens;  // gen tensors [B, 1]
};

// Prefill, then gen - 1 decode steps. `between` runs after the prefill's token is
// enqueued (the phase boundary).
template <class F>
Generated generate(const LlmSpec& s, const Model& m, Cache& cache, const Prompts& p, const at::Device& d, F between) {
  Generated g;
  const at::Tensor valid = p.key_valid.defined() ? p.key_valid.to(d) : at::Tensor();
  const at::Tensor pmask = valid.defined() ? prefill_mask(s, p.key_valid).to(d) : at::Tensor();
  g.tokens.push_back(forward(s, m, cache, p.tokens.to(d), 0, pmask));
  between();
  for (std::int64_t i = 1; i < s.gen; ++i) {
    const std::int64_t pos = s.prompt + i - 1;
    const at::Tensor mask = valid.defined() ? valid.narrow(3, 0, pos + 1) : at::Tensor();
    g.tokens.push_back(forward(s, m, cache, g.tokens.back(), pos, mask));
  }
  return g;
}

at::Tensor on_host(const Generated& g) {
  std::vector<at::Tensor> t;
  for (const auto& x : g.tokens) t.push_back(x.cpu());
  return at::cat(t, 1);
}

double num(const json& j, const char* key) { return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0; }

}  // namespace

LlmSpec LlmSpec::parse(const std::vector<std::string>& items) {
  LlmSpec s;
  bool paged = false;
  std::int64_t block = 0;
  const std::map<std::string, std::int64_t*> ints = {
      {"layers", &s.layers}, {"dim", &s.dim},       {"heads", &s.heads},   {"kv_heads", &s.kv_heads}, {"ffn", &s.ffn},
      {"vocab", &s.vocab},   {"prompt", &s.prompt}, {"gen", &s.gen},       {"batch", &s.batch}};
  for (const std::string& item : items) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) {
      throw UsageError(fmt::format("llm: expected key=value items ({}), found '{}'", kLlmHelp, item));
    }
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (const auto it = ints.find(key); it != ints.end()) {
      *it->second = positive_integer(value, "llm " + key);
    } else if (key == "seed") {
      try {
        std::size_t used = 0;
        s.seed = std::stoull(value, &used);
        if (used != value.size() || value.front() == '-') throw std::invalid_argument(value);
      } catch (const std::exception&) {
        throw UsageError("llm seed: expected a non-negative integer, found '" + value + "'");
      }
    } else if (key == "dtype") {
      s.dtype = dtype_of(value);
    } else if (key == "warmup") {
      if (value != "0" && value != "1") throw UsageError("llm warmup: expected 0 or 1, found '" + value + "'");
      s.warmup = value == "1";
    } else if (key == "kv") {
      if (value != "paged" && value != "contiguous") {
        throw UsageError("llm kv: expected 'paged' or 'contiguous', found '" + value + "'");
      }
      paged = value == "paged";
    } else if (key == "block") {
      block = positive_integer(value, "llm block");
    } else if (key == "check") {
      if (value != "cpu") throw UsageError("llm check: expected 'cpu', found '" + value + "'");
      s.check_cpu = true;
    } else {
      throw UsageError(fmt::format("llm: unknown key '{}' ({})", key, kLlmHelp));
    }
  }
  if (s.dim % s.heads != 0) throw UsageError(fmt::format("llm: dim {} is not a multiple of heads {}", s.dim, s.heads));
  if (s.heads % s.kv_heads != 0) {
    throw UsageError(fmt::format("llm: heads {} is not a multiple of kv_heads {}", s.heads, s.kv_heads));
  }
  if (s.head_dim() % 2 != 0) throw UsageError(fmt::format("llm: head dim {} must be even (rotary)", s.head_dim()));
  if (block > 0 && !paged) throw UsageError("llm: block= sizes the pages of a paged cache; add kv=paged");
  if (paged) s.page = block > 0 ? block : 16;
  return s;
}

std::string LlmSpec::describe() const {
  return fmt::format("llm:layers={},dim={},heads={},kv_heads={},ffn={},vocab={},prompt={},gen={},batch={},dtype={}{}",
                     layers, dim, heads, kv_heads, ffn, vocab, prompt, gen, batch,
                     dtype == c10::kFloat ? "fp32" : dtype == c10::kBFloat16 ? "bf16" : "fp16",
                     page > 0 ? fmt::format(",kv=paged,block={}", page) : "");
}

std::vector<std::int64_t> llm_prompt_lengths(const LlmSpec& s) {
  std::vector<std::int64_t> lengths;
  for (std::int64_t b = 0; b < s.batch; ++b) lengths.push_back(s.prompt - b * s.prompt / (2 * s.batch));
  return lengths;
}

LlmBounds llm_bounds(const LlmSpec& s, const json& derived) {
  const double e = double(c10::elementSize(s.dtype));
  const double hd = double(s.head_dim()), dim = double(s.dim), b = double(s.batch);
  const double q_width = double(s.heads) * hd, kv_width = double(s.kv_heads) * hd;
  // Parameters a token passes through: per layer the four attention projections, the
  // three FFN matrices and two norms; then the final norm and the output projection.
  const double layer_params = dim * q_width + 2 * dim * kv_width + q_width * dim + 3 * dim * double(s.ffn) + 2 * dim;
  const double matmul_params = double(s.layers) * layer_params;
  const double head_params = dim * double(s.vocab) + dim;
  LlmBounds r;
  r.weight_bytes = (matmul_params + head_params) * e;
  const double kv_per_position = double(s.layers) * 2 * b * kv_width * e;  // bytes of K and V, all layers
  const std::string dt = s.dtype == c10::kFloat ? "fp32" : s.dtype == c10::kBFloat16 ? "bf16" : "fp16";
  const json ops = derived.value("peak_ops_per_s", json::object());
  const double peak = ops.value(dt, ops.value("fp16", 0.0));
  const double bw = num(derived, "dram_deliverable_bytes_per_s"), turn = num(derived, "dram_turnaround_s_per_byte");
  const double p = double(s.prompt);
  // Prefill: every prompt token through the layers (the output projection for the last
  // one only); attention 4 x hd FLOPs per (query, key) pair per head, p(p+1)/2 pairs.
  r.prefill_flops = 2 * b * p * matmul_params + 2 * b * head_params +
                    double(s.layers) * 4 * b * double(s.heads) * hd * p * (p + 1) / 2;
  const double prefill_read = r.weight_bytes + b * p * dim * e;  // weights + embedding rows
  r.prefill_s = cost::roofline_s(r.prefill_flops, peak, prefill_read, p * kv_per_position, bw, turn);
  for (std::int64_t i = 1; i < s.gen; ++i) {
    const double keys = p + double(i);  // positions attended, the new one included
    const double flops = 2 * b * (matmul_params + head_params) + double(s.layers) * 4 * b * double(s.heads) * hd * keys;
    r.decode_flops += flops;
    const double read = r.weight_bytes + b * dim * e + (keys - 1) * kv_per_position;
    r.decode_s += cost::roofline_s(flops, peak, read, kv_per_position, bw, turn);
  }
  return r;
}

json run_llm(const LlmSpec& s, const std::string& workload, const std::string& trace) {
  const c10::Device device(c10::DeviceType::PrivateUse1, 0);
  const at::TensorOptions o = at::TensorOptions().device(device).dtype(s.dtype);
  {
    // The weights come from the device's generator: seeded, so every run is the same.
    at::Generator g = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_current_seed(s.seed);
  }
  const Model model = make_model(s, o);
  Cache cache = make_cache(s, o);
  const Prompts prompts = make_prompts(s);
  if (s.warmup) generate(s, model, cache, prompts, device, [] {});  // compiles and loads every kernel
  spyreDeviceSynchronize(device_handle());
  spyreDeviceResetStats(device_handle());
  backend::reset_fallback_counts();
  if (!trace.empty()) spyreTraceStart(device_handle());
  json prefill;
  const auto fault = [&](spyre_result_t r) {
    if (r == SPYRE_SUCCESS) return;
    const std::string what = spyreGetLastErrorMessage();
    if (!trace.empty()) spyreTraceStop(device_handle(), trace.c_str());
    throw DeviceFault(what);
  };
  const Generated g = generate(s, model, cache, prompts, device, [&] {
    fault(spyreDeviceSynchronize(device_handle()));
    prefill = report::make_report(workload, 0, device_report(), backend::fallback_counts());
  });
  fault(spyreDeviceSynchronize(device_handle()));
  if (!trace.empty() && spyreTraceStop(device_handle(), trace.c_str()) != SPYRE_SUCCESS) {
    throw UsageError(fmt::format("--trace: {}", spyreGetLastErrorMessage()));
  }
  const json dev = device_report();
  const LlmBounds bounds = llm_bounds(s, dev.value("derived", json::object()));
  json result = report::make_report(workload, bounds.prefill_flops + bounds.decode_flops, dev, backend::fallback_counts());
  const double ttft_us = prefill["metrics"].value("time_us", 0.0);
  const double total_us = result["metrics"].value("time_us", 0.0);
  const double steps = double(s.gen - 1);
  const double decode_us = total_us - ttft_us;
  json llm = {{"spec", s.describe()},
              {"prompt_lengths", llm_prompt_lengths(s)},
              {"weight_bytes", bounds.weight_bytes},
              {"ttft_us", ttft_us},
              {"prefill_bound_us", bounds.prefill_s * 1e6},
              {"prefill_kernels", prefill["metrics"].value("kernels", 0)},
              {"decode_steps", s.gen - 1},
              {"decode_us_per_token", steps > 0 ? decode_us / steps : 0.0},
              {"decode_bound_us_per_token", steps > 0 ? bounds.decode_s * 1e6 / steps : 0.0},
              {"decode_tokens_per_s", decode_us > 0 ? double(s.batch) * steps / (decode_us * 1e-6) : 0.0},
              {"tokens_per_s", total_us > 0 ? double(s.batch * s.gen) / (total_us * 1e-6) : 0.0}};
  for (const char* k : {"ttft_us", "prefill_bound_us", "decode_us_per_token", "decode_bound_us_per_token",
                        "decode_tokens_per_s", "tokens_per_s"}) {
    result["metrics"][k] = llm[k];
  }
  if (s.check_cpu) {
    const at::Tensor ours = on_host(g);
    const c10::Device cpu(c10::kCPU);
    const Model reference = copy_model(model, cpu);
    Cache cpu_cache = make_cache(s, at::TensorOptions().dtype(s.dtype));
    const at::Tensor theirs = on_host(generate(s, reference, cpu_cache, prompts, cpu, [] {}));
    const at::Tensor same = ours.eq(theirs);
    llm["cpu_check"] = {{"tokens", ours.numel()}, {"equal", same.sum().item<std::int64_t>()}};
  }
  result["llm"] = llm;
  return result;
}

}  // namespace spyre::tools
