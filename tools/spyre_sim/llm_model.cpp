#include "spyre_sim/llm_model.h"

#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cos.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/sin.h>
#include <ATen/ops/zeros.h>

namespace spyre::tools::llm {
namespace {

// Seeds the generator of the device `o` names (the device's own on spyre), so every
// run makes the same weights.
void seed_generator(const at::TensorOptions& o, std::uint64_t seed) {
  at::Generator g = at::globalContext().defaultGenerator(o.device());
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_current_seed(seed);
}

at::Tensor random_normal(const at::TensorOptions& o, std::vector<std::int64_t> sizes, double std) {
  return at::empty(sizes, o).normal_(0.0, std);
}

// The rotary tables: inv_freq_i = theta^(-2i / hd); angle(p, i) = p x inv_freq_i,
// repeated for both halves.
void make_rotary(const LlmSpec& s, const at::TensorOptions& o, Model& m) {
  const std::int64_t hd = s.head_dim();
  const auto f32 = o.dtype(c10::kFloat);
  const at::Tensor exponent = at::arange(0, hd, 2, f32).mul(-1.0 / double(hd));
  const at::Tensor inv_freq = at::pow(kRopeTheta, exponent);
  const at::Tensor angle = at::arange(max_positions(s), f32).view({-1, 1}).mul(inv_freq.view({1, -1}));
  const at::Tensor both = at::cat({angle, angle}, -1);
  m.cos = at::cos(both).to(s.dtype);
  m.sin = at::sin(both).to(s.dtype);
  m.first_half = at::arange(2, f32).lt(1.0).view({2, 1});
}

}  // namespace

// Random weights made where they live (the device's generator on spyre, seeded with
// the spec's seed): linear weights ~ N(0, 0.02), embeddings ~ N(0, 1), norms 1; rotary
// tables from the positions.
Model make_model(const LlmSpec& s, const at::TensorOptions& o) {
  seed_generator(o, s.seed);
  const std::int64_t hd = s.head_dim();
  Model m;
  for (std::int64_t i = 0; i < s.layers; ++i) {
    m.layers.push_back({at::ones({s.dim}, o), random_normal(o, {s.heads * hd, s.dim}, 0.02),
                        random_normal(o, {s.kv_heads * hd, s.dim}, 0.02), random_normal(o, {s.kv_heads * hd, s.dim}, 0.02),
                        random_normal(o, {s.dim, s.heads * hd}, 0.02), at::ones({s.dim}, o), random_normal(o, {s.ffn, s.dim}, 0.02),
                        random_normal(o, {s.ffn, s.dim}, 0.02), random_normal(o, {s.dim, s.ffn}, 0.02)});
  }
  m.embed = random_normal(o, {s.vocab, s.dim}, 1.0);
  m.norm = at::ones({s.dim}, o);
  m.head = random_normal(o, {s.vocab, s.dim}, 0.02);
  make_rotary(s, o, m);
  return m;
}

// Card r's share of the model under tensor parallelism (LlmSpec::tp), made on the card
// it lives on (no copies between cards, so a no-data run touches no host memory for
// it): the embeddings and norms whole, the same on every card (the card's generator
// seeded with the spec's seed); then, from a seed of the card's own, its vocab/N rows
// of the output projection, its heads' rows of wq, wk and wv and columns of wo, its
// rows of w1 and w3 and columns of w2. (Other weights than tp=1's: gather_model
// assembles the whole model they make.)
Model make_shard(const LlmSpec& s, std::int64_t r, const at::TensorOptions& o) {
  seed_generator(o, s.seed);
  Model m;
  m.embed = random_normal(o, {s.vocab, s.dim}, 1.0);
  m.norm = at::ones({s.dim}, o);
  make_rotary(s, o, m);
  seed_generator(o, s.seed + 0x9E3779B97F4A7C15ull * std::uint64_t(r + 1));
  m.head = random_normal(o, {s.vocab / s.tp, s.dim}, 0.02);
  const std::int64_t q = s.local_heads() * s.head_dim(), kv = s.local_kv_heads() * s.head_dim(), f = s.local_ffn();
  for (std::int64_t i = 0; i < s.layers; ++i) {
    m.layers.push_back({at::ones({s.dim}, o), random_normal(o, {q, s.dim}, 0.02), random_normal(o, {kv, s.dim}, 0.02),
                        random_normal(o, {kv, s.dim}, 0.02), random_normal(o, {s.dim, q}, 0.02), at::ones({s.dim}, o),
                        random_normal(o, {f, s.dim}, 0.02), random_normal(o, {f, s.dim}, 0.02), random_normal(o, {s.dim, f}, 0.02)});
  }
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
      c.k.push_back(at::zeros({pages, s.page, s.local_kv_heads(), s.head_dim()}, o));
      c.v.push_back(at::zeros({pages, s.page, s.local_kv_heads(), s.head_dim()}, o));
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
    c.k.push_back(at::zeros({s.batch, s.local_kv_heads(), max_positions(s), s.head_dim()}, o));
    c.v.push_back(at::zeros({s.batch, s.local_kv_heads(), max_positions(s), s.head_dim()}, o));
  }
  return c;
}

// The whole model the cards' shares make, on the CPU (the reference of check=cpu):
// the row-split matrices stacked in card order, the column-split ones side by side.
Model gather_model(const std::vector<Card>& cards) {
  const auto joined = [&](std::size_t layer, at::Tensor Layer::*w, std::int64_t dim) {
    std::vector<at::Tensor> parts;
    for (const Card& c : cards) parts.push_back((c.model.layers[layer].*w).cpu());
    return at::cat(parts, dim);
  };
  Model m = copy_model(cards[0].model, c10::Device(c10::kCPU));  // the whole parts; the shares replaced below
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    Layer& l = m.layers[i];
    l.wq = joined(i, &Layer::wq, 0);
    l.wk = joined(i, &Layer::wk, 0);
    l.wv = joined(i, &Layer::wv, 0);
    l.wo = joined(i, &Layer::wo, 1);
    l.w1 = joined(i, &Layer::w1, 0);
    l.w3 = joined(i, &Layer::w3, 0);
    l.w2 = joined(i, &Layer::w2, 1);
  }
  std::vector<at::Tensor> heads;
  for (const Card& c : cards) heads.push_back(c.model.head.cpu());
  m.head = at::cat(heads, 0);
  return m;
}

}  // namespace spyre::tools::llm
