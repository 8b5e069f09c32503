// The llm workload (llm_workload.h): a Llama-architecture decoder (RMSNorm, rotary
// embeddings, grouped-query attention with a KV cache, SwiGLU) written with ATen ops, so
// it reaches the device through the same backend a PyTorch model does.
#include "spyre_sim/llm_workload.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
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
#include <ATen/ops/gather.h>
#include <ATen/ops/lt.h>
#include <ATen/ops/max.h>
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

#include "compiler/pointwise_ir.h"
#include "report/run_report.h"
#include "spyre/cost/roofline.h"
#include "spyre_sim/device_session.h"
#include "spyre_sim/llm_model.h"
#include "spyre_torch/spyre_torch.h"

namespace spyre::tools {

using nlohmann::json;

namespace {

using namespace llm;


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
// The RMSNorm of x's rows (weight `norm`, eps as rms_norm rounds it to x's dtype) in the
// kernel's prologue, then x @ cat(weights)^T (linear_concat: Q, K and V in one kernel).
double rms_eps(const at::Tensor& x) {
  if (x.scalar_type() == c10::kHalf) return static_cast<float>(c10::Half(static_cast<float>(kNormEps)));
  if (x.scalar_type() == c10::kBFloat16) return static_cast<float>(c10::BFloat16(static_cast<float>(kNormEps)));
  return static_cast<float>(kNormEps);
}
at::Tensor norm_linear_concat(const at::Tensor& x, const at::Tensor& norm, const std::vector<at::Tensor>& weights) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("spyre::linear_concat", "")
                             .typed<at::Tensor(const at::Tensor&, at::TensorList, c10::string_view,
                                               const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                                               double)>();
  return op.call(x, weights, "rms_norm", norm, std::nullopt, rms_eps(x));
}
// The RMSNorm of x's rows in the prologue, then silu(x @ gate^T) * (x @ up^T).
at::Tensor norm_linear_gated(const at::Tensor& x, const at::Tensor& norm, const at::Tensor& gate, const at::Tensor& up) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("spyre::linear_gated", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, c10::string_view,
                                               c10::string_view, const std::optional<at::Tensor>&,
                                               const std::optional<at::Tensor>&, double)>();
  return op.call(x, gate, up, "silu", "rms_norm", norm, std::nullopt, rms_eps(x));
}
// residual + x @ w^T (the residual added in the matmul's epilogue; none: x @ w^T by the
// same kernel, the output projections of cards 1..tp-1, whose partial sums the
// all-reduce adds to card 0's, which has the residual).
at::Tensor linear_residual(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& residual) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("spyre::matmul_epilogue", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, c10::string_view,
                            const std::optional<at::Tensor>&, c10::string_view, c10::string_view,
                            const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, double)>();
  return op.call(x, w.t(), std::nullopt, "", residual, "add", "", std::nullopt, std::nullopt, 0.0);
}

// x [B, L, heads, hd] (the projections' layout; so is the result, which K's cache
// update then reads by whole rows) rotated by the angles of positions pos..pos+L-1 in
// one spyre::fused_pointwise kernel (the program the compile backend writes for it): the
// last dim split in halves, x = select(first half, x0, x1), rotate_half(x) =
// select(first half, -x1, x0), then x cos + rotate_half(x) sin in fp32, rounded once.
at::Tensor rotary_fused(const at::Tensor& x, const Model& m, std::int64_t pos) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("spyre::fused_pointwise", "")
          .typed<at::Tensor(c10::string_view, c10::IntArrayRef, c10::ArrayRef<double>, at::TensorList, c10::ScalarType,
                            std::int64_t, c10::IntArrayRef)>();
  using compiler::Step;
  using compiler::Value;
  constexpr isa::DType fp32 = isa::DType::fp32;
  // Inputs: 0 cos, 1 the halves' mask, 2 x's first half, 3 its second half, 4 sin.
  static const compiler::EncodedSteps program = compiler::encode_steps({
      Step::select(fp32, Value::input(1), Value::input(2), Value::input(3)),       // 0: x
      Step::binary(isa::BinaryOp::mul, fp32, Value::step(0), Value::input(0)),    // 1: x cos
      Step::unary(isa::UnaryOp::neg, fp32, Value::input(3)),                      // 2: -x1
      Step::select(fp32, Value::input(1), Value::step(2), Value::input(2)),       // 3: rotate_half(x)
      Step::binary(isa::BinaryOp::mul, fp32, Value::step(3), Value::input(4)),    // 4: rotate_half(x) sin
      Step::binary(isa::BinaryOp::add, fp32, Value::step(1), Value::step(4)),     // 5: the sum
  });
  const std::int64_t len = x.size(1), hd = x.size(3);
  const auto table = [&](const at::Tensor& t) { return t.narrow(0, pos, len).view({len, 1, hd}); };
  const std::vector<at::Tensor> inputs{table(m.cos), m.first_half, x, x, table(m.sin)};
  return op.call("spyre::fused[rotary]", program.words, program.constants, inputs, x.scalar_type(), hd / 2, {-1, 2, 0, 1, -1});
}

// x [B, heads, L, hd] rotated by the angles of positions pos..pos+L-1:
// x cos + rotate_half(x) sin, rotate_half(x) = (-x2, x1).
at::Tensor rotary(const at::Tensor& x, const Model& m, std::int64_t pos) {
  const std::int64_t len = x.size(2), half = x.size(3) / 2;
  const at::Tensor rotated = at::cat({at::neg(x.narrow(3, half, half)), x.narrow(3, 0, half)}, 3);
  return at::add(at::mul(x, m.cos.narrow(0, pos, len)), at::mul(rotated, m.sin.narrow(0, pos, len)));
}

// Collectives between the cards of one process, by peer copies over the modelled
// links (the in-process counterparts of the spyre process group's ring):
//  - all_reduce (sum, in place): the flat tensor in N chunks; N - 1 reduce-scatter
//    steps, in each of which every card sends a chunk to the next card, which adds it
//    to its own; then N - 1 all-gather steps passing the summed chunks on. Each card
//    sends 2 (N - 1) / N of the tensor's bytes.
//  - all_gather: every card's part to every card, N - 1 steps passing them on.
//
// One host thread drives every card, and each driver call costs its host
// host.call_overhead_ns, so a ring is built from few calls: copies on a send queue per
// card (spyreMemcpyAsync), ordered against the cards' compute streams by reused events
// (a wait takes the event's latest record): about 3 calls per card and step besides
// the adds. Copies into memory a compute stream allocated wait for that stream first
// (the caching allocator hands a block on once its stream has queued its last use).
class CardRing {
 public:
  explicit CardRing(const std::vector<Card>& cards) {
    for (const Card& c : cards) {
      Side side;
      side.send = backend::queue_of(backend::stream_from_pool(c.device.index(), false));
      check(spyreEventCreate(device_handle(c.device.index()), &side.sent), "an event");
      check(spyreEventCreate(device_handle(c.device.index()), &side.computed), "an event");
      sides_.push_back(side);
    }
  }
  ~CardRing() {
    for (const Side& side : sides_) {
      spyreEventDestroy(side.sent);
      spyreEventDestroy(side.computed);
    }
  }
  CardRing(const CardRing&) = delete;
  CardRing& operator=(const CardRing&) = delete;

  void all_reduce(std::vector<at::Tensor>& x) const {
    const std::size_t n = x.size();
    if (n < 2) return;
    std::vector<at::Tensor> flat;
    for (const at::Tensor& t : x) flat.push_back(t.view({-1}));
    const std::int64_t numel = flat[0].numel();
    const auto begin = [&](std::size_t c) { return std::int64_t(c) * numel / std::int64_t(n); };
    const auto chunk = [&](std::size_t r, std::size_t c) { return flat[r].narrow(0, begin(c), begin(c + 1) - begin(c)); };
    // Received chunks land in buffers made on the compute streams.
    std::vector<std::vector<at::Tensor>> buffers(n);
    for (std::size_t r = 0; r < n; ++r) {
      const c10::DeviceGuard guard(x[r].device());
      for (std::size_t k = 0; k + 1 < n; ++k) buffers[r].push_back(at::empty({begin(1) + 1}, flat[r].options()));
    }
    const std::vector<spyre_queue_t> compute = start(x);
    // Reduce-scatter: at step k card r sends chunk (r - k) mod N; after N - 1 steps card
    // r holds the sum of chunk (r + 1) mod N. A step's copies are all queued, and then
    // recorded, before anything waits for them, so they run at once (a record after a
    // wait would chain the cards' steps together).
    for (std::size_t k = 0; k + 1 < n; ++k) {
      for (std::size_t r = 0; r < n; ++r) {
        const at::Tensor from = chunk(r, (r + n - k) % n);
        copy(r, buffers[next(r, n)][k].narrow(0, 0, from.numel()), from);
      }
      for (std::size_t r = 0; r < n; ++r) check(spyreEventRecord(sides_[r].sent, sides_[r].send), "an event record");
      for (std::size_t r = 0; r < n; ++r) {
        const std::size_t from = (r + n - 1) % n, c = (from + n - k) % n;
        check(spyreQueueWaitEvent(compute[r], sides_[from].sent), "an event wait");
        const c10::DeviceGuard guard(x[r].device());
        at::Tensor mine = chunk(r, c);
        mine.add_(buffers[r][k].narrow(0, 0, mine.numel()));
        backend::flush_deferred();
        after(sides_[r].send, sides_[r].computed, compute[r]);  // the sum goes on next
      }
    }
    // All-gather: at step k card r passes chunk (r + 1 - k) mod N on, into the next
    // card's tensor, once that card's compute stream is done with its adds.
    for (std::size_t r = 0; r < n; ++r) {
      check(spyreQueueWaitEvent(sides_[r].send, sides_[next(r, n)].computed), "an event wait");
    }
    pass_on(n, [&](std::size_t r, std::size_t k) {
      const std::size_t c = (r + 1 + n - k) % n;
      copy(r, chunk(next(r, n), c), chunk(r, c));
    });
    finish(compute);
  }

  // Card r's result [N, numel]: row j is card j's part (each part contiguous, all of
  // one size).
  std::vector<at::Tensor> all_gather(const std::vector<at::Tensor>& parts) const {
    const std::size_t n = parts.size();
    std::vector<at::Tensor> out;
    for (std::size_t r = 0; r < n; ++r) {
      const c10::DeviceGuard guard(parts[r].device());
      out.push_back(at::empty({std::int64_t(n), parts[r].numel()}, parts[r].options()));
      out.back().select(0, std::int64_t(r)).copy_(parts[r].reshape({-1}));
    }
    if (n < 2) return out;
    const std::vector<spyre_queue_t> compute = start(out);
    // At step k card r passes row (r - k) mod N on: its own at first, then the one it
    // received at the step before.
    pass_on(n, [&](std::size_t r, std::size_t k) {
      const auto c = std::int64_t((r + n - k) % n);
      copy(r, out[next(r, n)].select(0, c), out[r].select(0, c));
    });
    finish(compute);
    return out;
  }

 private:
  struct Side {
    spyre_queue_t send = nullptr;  // this card's copies out
    spyre_event_t sent = nullptr, computed = nullptr;  // recorded on the send queue / compute stream
  };

  static std::size_t next(std::size_t r, std::size_t n) { return (r + 1) % n; }

  // The cards' compute streams (current streams) after each card's send queue has been
  // made to wait for its own compute stream and the next card's (what they have queued
  // so far wrote the tensors sent, or used the memory copied into).
  std::vector<spyre_queue_t> start(const std::vector<at::Tensor>& on) const {
    backend::flush_deferred();  // launches this thread holds back go before the copies
    std::vector<spyre_queue_t> compute;
    for (const at::Tensor& t : on) compute.push_back(backend::queue_of(backend::current_stream(t.device().index())));
    const std::size_t n = on.size();
    for (std::size_t r = 0; r < n; ++r) check(spyreEventRecord(sides_[r].computed, compute[r]), "an event record");
    for (std::size_t r = 0; r < n; ++r) {
      check(spyreQueueWaitEvent(sides_[r].send, sides_[r].computed), "an event wait");
      check(spyreQueueWaitEvent(sides_[r].send, sides_[next(r, n)].computed), "an event wait");
    }
    return compute;
  }

  // N - 1 steps of `step(r, k)` (card r's copy at step k); after each but the last,
  // every card's next copies wait for what it received.
  template <class Step>
  void pass_on(std::size_t n, Step step) const {
    for (std::size_t k = 0; k + 1 < n; ++k) {
      for (std::size_t r = 0; r < n; ++r) step(r, k);
      if (k + 2 < n) {
        for (std::size_t r = 0; r < n; ++r) check(spyreEventRecord(sides_[r].sent, sides_[r].send), "an event record");
        for (std::size_t r = 0; r < n; ++r) {
          check(spyreQueueWaitEvent(sides_[next(r, n)].send, sides_[r].sent), "an event wait");
        }
      }
    }
  }

  // Each compute stream waits for the copies into its tensors and for its own sends
  // (they read its tensors and buffers).
  void finish(const std::vector<spyre_queue_t>& compute) const {
    const std::size_t n = compute.size();
    for (std::size_t r = 0; r < n; ++r) check(spyreEventRecord(sides_[r].sent, sides_[r].send), "an event record");
    for (std::size_t r = 0; r < n; ++r) {
      check(spyreQueueWaitEvent(compute[r], sides_[r].sent), "an event wait");
      check(spyreQueueWaitEvent(compute[next(r, n)], sides_[r].sent), "an event wait");
    }
  }

  void copy(std::size_t r, const at::Tensor& to, const at::Tensor& from) const {
    backend::derived::note_write(to.data_ptr());
    check(spyreMemcpyAsync(sides_[r].send, to.data_ptr(), from.data_ptr(), std::size_t(from.nbytes())), "a copy");
  }

  // `queue` runs what it is given next after what `on` has so far, through `event`.
  static void after(spyre_queue_t queue, spyre_event_t event, spyre_queue_t on) {
    check(spyreEventRecord(event, on), "an event record");
    check(spyreQueueWaitEvent(queue, event), "an event wait");
  }

  static void check(spyre_result_t r, const char* what) {
    if (r != SPYRE_SUCCESS) throw DeviceFault(fmt::format("llm tp ring: {}: {}", what, spyreGetLastErrorMessage()));
  }

  std::vector<Side> sides_;
};

// One forward over tokens [B, L] at positions pos..pos+L-1 on every card (each with
// its own copy of the tokens and the mask); returns each card's greedy next token
// [B, 1] (int64). `mask`: [B, 1, L, pos+L] boolean, or undefined (causal, one length for
// the whole batch). With several cards, card 0's output projections add the residual,
// the others' only their partial sums, and `ring` adds them up across the cards.
std::vector<at::Tensor> forward(const LlmSpec& s, std::vector<Card>& cards, const std::vector<at::Tensor>& tokens,
                                std::int64_t pos, const std::vector<at::Tensor>& masks, const CardRing* ring) {
  const std::size_t n = cards.size();
  const std::int64_t b = tokens[0].size(0), len = tokens[0].size(1), hd = s.head_dim();
  const std::int64_t heads = s.local_heads(), kv_heads = s.local_kv_heads();
  const bool fused = cards[0].device.type() == c10::DeviceType::PrivateUse1;
  std::vector<at::Tensor> h(n), part(n);
  const auto reduce = [&] {
    if (ring != nullptr) ring->all_reduce(part);
    for (std::size_t r = 0; r < n; ++r) h[r] = part[r].view({b, len, s.dim});
  };
  for (std::size_t r = 0; r < n; ++r) {
    const c10::DeviceGuard guard(cards[r].device);
    h[r] = at::embedding(cards[r].model.embed, tokens[r]);
  }
  for (std::size_t i = 0; i < cards[0].model.layers.size(); ++i) {
    for (std::size_t r = 0; r < n; ++r) {
      const c10::DeviceGuard guard(cards[r].device);
      const Model& m = cards[r].model;
      Cache& cache = cards[r].cache;
      const Layer& l = m.layers[i];
      const at::Tensor& mask = masks[r];
      // Q, K (rotated) and V as [B, heads, L, hd]. On the device: one kernel for the norm
      // (in its prologue) and the three projections, and one rotating Q's and K's heads
      // together (adjacent in its result).
      at::Tensor q, k_new, v_new;
      if (fused) {
        const at::Tensor qkv = norm_linear_concat(h[r].reshape({b * len, s.dim}), l.attn_norm, {l.wq, l.wk, l.wv});
        const auto heads_at = [&](std::int64_t first, std::int64_t count) {  // [B, L, count, hd]
          return qkv.narrow(1, first * hd, count * hd).view({b, len, count, hd});
        };
        const at::Tensor qk = rotary_fused(heads_at(0, heads + kv_heads), m, pos);
        q = qk.narrow(2, 0, heads).transpose(1, 2);
        k_new = qk.narrow(2, heads, kv_heads).transpose(1, 2);
        v_new = heads_at(heads + kv_heads, kv_heads).transpose(1, 2);
      } else {
        const at::Tensor a = at::rms_norm(h[r], {s.dim}, l.attn_norm, kNormEps);
        const auto heads_of = [&](const at::Tensor& w, std::int64_t count) {
          return at::linear(a, w).view({b, len, count, hd}).transpose(1, 2);
        };
        q = rotary(heads_of(l.wq, heads), m, pos);
        k_new = rotary(heads_of(l.wk, kv_heads), m, pos);
        v_new = heads_of(l.wv, kv_heads);
      }
      const std::optional<at::Tensor> opt_mask = mask.defined() ? std::optional(mask) : std::nullopt;
      at::Tensor att;
      if (s.page > 0) {
        // The new rows written at their slots; the prompt attends over its own keys, a
        // decode step through the slot table.
        // (Rows in (sequence, position) order: a decode step has one position.)
        const at::Tensor where = pos == 0 ? cache.prompt_rows : cache.step_rows.narrow(0, pos, len).reshape({-1});
        const auto rows = [&](const at::Tensor& x) { return x.transpose(1, 2).reshape({b * len, kv_heads, hd}); };
        cache.k[i].view({-1, kv_heads, hd}).index_copy_(0, where, rows(k_new));
        cache.v[i].view({-1, kv_heads, hd}).index_copy_(0, where, rows(v_new));
        if (pos == 0) {
          att = at::scaled_dot_product_attention(q, k_new, v_new, opt_mask, 0.0,
                                                 /*is_causal=*/!mask.defined() && len > 1, std::nullopt,
                                                 /*enable_gqa=*/kv_heads != heads);
        } else {
          att = paged_attention(q, cache.k[i], cache.v[i], cache.slots.narrow(1, 0, pos + len), opt_mask);
        }
      } else {
        cache.k[i].narrow(2, pos, len).copy_(k_new);
        cache.v[i].narrow(2, pos, len).copy_(v_new);
        const at::Tensor k = cache.k[i].narrow(2, 0, pos + len), v = cache.v[i].narrow(2, 0, pos + len);
        att = at::scaled_dot_product_attention(q, k, v, opt_mask, 0.0, /*is_causal=*/!mask.defined() && len > 1,
                                               std::nullopt, /*enable_gqa=*/kv_heads != heads);
      }
      if (fused) {  // the residual added in the projection's epilogue (card 0)
        const at::Tensor rows = att.transpose(1, 2).reshape({b * len, heads * hd});
        part[r] = linear_residual(rows, l.wo, r == 0 ? std::optional(h[r].reshape({b * len, s.dim})) : std::nullopt);
      } else {
        part[r] = at::add(h[r], at::linear(att.transpose(1, 2).reshape({b, len, heads * hd}), l.wo));
      }
    }
    reduce();
    for (std::size_t r = 0; r < n; ++r) {
      const c10::DeviceGuard guard(cards[r].device);
      const Layer& l = cards[r].model.layers[i];
      if (fused) {  // the norm and SwiGLU's two linears as one kernel; the residual as above
        const at::Tensor g = norm_linear_gated(h[r].reshape({b * len, s.dim}), l.ffn_norm, l.w1, l.w3);
        part[r] = linear_residual(g, l.w2, r == 0 ? std::optional(h[r].reshape({b * len, s.dim})) : std::nullopt);
      } else {
        const at::Tensor f = at::rms_norm(h[r], {s.dim}, l.ffn_norm, kNormEps);
        part[r] = at::add(h[r], at::linear(at::mul(at::silu(at::linear(f, l.w1)), at::linear(f, l.w3)), l.w2));
      }
    }
    reduce();
  }
  std::vector<at::Tensor> next(n);
  if (ring == nullptr) {
    for (std::size_t r = 0; r < n; ++r) {
      const c10::DeviceGuard guard(cards[r].device);
      const at::Tensor last = at::rms_norm(h[r].narrow(1, len - 1, 1), {s.dim}, cards[r].model.norm, kNormEps);
      next[r] = at::argmax(at::linear(last, cards[r].model.head), -1);
    }
    return next;
  }
  // The output projection is vocab-parallel: card r has the logits of tokens
  // [r V/N, (r + 1) V/N). Each card's best (its largest logit and that token, in fp32:
  // token numbers up to 2^24 are exact) goes to every card, which takes the first card's
  // with the largest logit: the whole vocabulary's first argmax, as on one card.
  std::vector<at::Tensor> best(n);
  const std::int64_t shard = s.vocab / s.tp;
  for (std::size_t r = 0; r < n; ++r) {
    const c10::DeviceGuard guard(cards[r].device);
    const at::Tensor last = at::rms_norm(h[r].narrow(1, len - 1, 1), {s.dim}, cards[r].model.norm, kNormEps);
    const auto [value, index] = at::max(at::linear(last, cards[r].model.head), -1);  // [B, 1]
    best[r] = at::cat({value.to(c10::kFloat).unsqueeze(-1), index.to(c10::kFloat).add(double(std::int64_t(r) * shard)).unsqueeze(-1)},
                      -1);  // [B, 1, 2]
  }
  const std::vector<at::Tensor> all = ring->all_gather(best);  // [N, B x 2] per card
  for (std::size_t r = 0; r < n; ++r) {
    const c10::DeviceGuard guard(cards[r].device);
    const at::Tensor pairs = all[r].view({std::int64_t(n), b, 1, 2});
    const at::Tensor card = pairs.select(-1, 0).argmax(0, /*keepdim=*/true);  // [1, B, 1]
    next[r] = pairs.select(-1, 1).gather(0, card).squeeze(0).to(c10::kLong);
  }
  return next;
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
  std::vector<at::Tensor> tokens;  // gen tensors [B, 1] (card 0's)
};

// Prefill, then gen - 1 decode steps, on every card. `between` runs after the
// prefill's token is enqueued (the phase boundary).
template <class F>
Generated generate(const LlmSpec& s, std::vector<Card>& cards, const CardRing* ring, const Prompts& p, F between) {
  Generated g;
  std::vector<at::Tensor> valid, pmask, tokens;
  for (const Card& c : cards) {
    valid.push_back(p.key_valid.defined() ? p.key_valid.to(c.device) : at::Tensor());
    pmask.push_back(p.key_valid.defined() ? prefill_mask(s, p.key_valid).to(c.device) : at::Tensor());
    tokens.push_back(p.tokens.to(c.device));
  }
  tokens = forward(s, cards, tokens, 0, pmask, ring);
  g.tokens.push_back(tokens[0]);
  between();
  for (std::int64_t i = 1; i < s.gen; ++i) {
    const std::int64_t pos = s.prompt + i - 1;
    std::vector<at::Tensor> masks;
    for (const at::Tensor& v : valid) masks.push_back(v.defined() ? v.narrow(3, 0, pos + 1) : at::Tensor());
    tokens = forward(s, cards, tokens, pos, masks, ring);
    g.tokens.push_back(tokens[0]);
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
      {"vocab", &s.vocab},   {"prompt", &s.prompt}, {"gen", &s.gen},       {"batch", &s.batch},
      {"tp", &s.tp}};
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
  for (const auto& [what, count] : {std::pair<const char*, std::int64_t>{"heads", s.heads},
                                    {"kv_heads", s.kv_heads},
                                    {"ffn", s.ffn},
                                    {"vocab", s.vocab}}) {
    if (count % s.tp != 0) {
      throw UsageError(fmt::format("llm: tp={} cards must split {} {} evenly (each card holds an equal share)", s.tp,
                                   what, count));
    }
  }
  if (block > 0 && !paged) throw UsageError("llm: block= sizes the pages of a paged cache; add kv=paged");
  if (paged) s.page = block > 0 ? block : 16;
  return s;
}

std::string LlmSpec::describe() const {
  return fmt::format("llm:layers={},dim={},heads={},kv_heads={},ffn={},vocab={},prompt={},gen={},batch={},dtype={}{}{}",
                     layers, dim, heads, kv_heads, ffn, vocab, prompt, gen, batch,
                     dtype == c10::kFloat ? "fp32" : dtype == c10::kBFloat16 ? "bf16" : "fp16",
                     page > 0 ? fmt::format(",kv=paged,block={}", page) : "", tp > 1 ? fmt::format(",tp={}", tp) : "");
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
  // Parameters a token passes through on one card: per layer its share of the four
  // attention projections and the three FFN matrices, and two norms; then the final norm
  // and the output projection (whole on every card).
  const double t = double(s.tp);
  const double sharded = dim * q_width + 2 * dim * kv_width + q_width * dim + 3 * dim * double(s.ffn);
  const double layer_params = sharded / t + 2 * dim;
  const double matmul_params = double(s.layers) * layer_params;
  const double head_params = dim * double(s.vocab) / t + dim;  // vocab-parallel with tp > 1
  LlmBounds r;
  r.weight_bytes = (matmul_params + head_params) * e;
  const double kv_per_position = double(s.layers) * 2 * b * kv_width * e / t;  // K and V bytes, all layers, one card
  const std::string dt = s.dtype == c10::kFloat ? "fp32" : s.dtype == c10::kBFloat16 ? "bf16" : "fp16";
  const json ops = derived.value("peak_ops_per_s", json::object());
  const double peak = ops.value(dt, ops.value("fp16", 0.0));
  const double bw = num(derived, "dram_deliverable_bytes_per_s"), turn = num(derived, "dram_turnaround_s_per_byte");
  const double p = double(s.prompt);
  // Prefill: every prompt token through the layers (the output projection for the last
  // one only); attention 4 x hd FLOPs per (query, key) pair per head, p(p+1)/2 pairs.
  r.prefill_flops = 2 * b * p * matmul_params + 2 * b * head_params +
                    double(s.layers) * 4 * b * double(s.local_heads()) * hd * p * (p + 1) / 2;
  const double prefill_read = r.weight_bytes + b * p * dim * e;  // weights + embedding rows
  r.prefill_s = cost::roofline_s(r.prefill_flops, peak, prefill_read, p * kv_per_position, bw, turn);
  for (std::int64_t i = 1; i < s.gen; ++i) {
    const double keys = p + double(i);  // positions attended, the new one included
    const double flops =
        2 * b * (matmul_params + head_params) + double(s.layers) * 4 * b * double(s.local_heads()) * hd * keys;
    r.decode_flops += flops;
    const double read = r.weight_bytes + b * dim * e + (keys - 1) * kv_per_position;
    r.decode_s += cost::roofline_s(flops, peak, read, kv_per_position, bw, turn);
  }
  return r;
}

namespace {

// Card r's trace path: `trace` itself for card 0, else ".card<r>" before its extension.
std::string card_trace(const std::string& trace, std::int64_t r) {
  if (r == 0) return trace;
  const auto slash = trace.find_last_of('/'), dot = trace.find_last_of('.');
  const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
  const std::string stem = has_ext ? trace.substr(0, dot) : trace, ext = has_ext ? trace.substr(dot) : "";
  return fmt::format("{}.card{}{}", stem, r, ext);
}

// The cards' launches from the first start to the last end, in microseconds.
double span_us(const std::vector<json>& reports) {
  double first = 0, last = 0;
  bool any = false;
  for (const json& d : reports) {
    if (num(d, "launches") == 0) continue;
    const json span = d.value("launch_span_ps", json::array({0, 0}));
    first = any ? std::min(first, span[0].get<double>()) : span[0].get<double>();
    last = any ? std::max(last, span[1].get<double>()) : span[1].get<double>();
    any = true;
  }
  return (last - first) * 1e-6;
}

}  // namespace

json run_llm(const LlmSpec& s, const std::string& workload, const std::string& trace) {
  const c10::Device device(c10::DeviceType::PrivateUse1, 0);
  const at::TensorOptions o = at::TensorOptions().device(device).dtype(s.dtype);
  // The weights come from the devices' generators, seeded: every run is the same. With
  // tp > 1 each card makes its own share.
  std::vector<Card> cards;
  for (std::int64_t r = 0; r < s.tp; ++r) {
    const c10::Device d(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(r));
    (void)device_handle(static_cast<int>(r));  // a clear error when the driver has fewer cards
    cards.push_back({s.tp == 1 ? make_model(s, o) : make_shard(s, r, o.device(d)), make_cache(s, o.device(d)), d});
  }
  const Model reference = !s.check_cpu ? Model{} : s.tp == 1 ? copy_model(cards[0].model, c10::kCPU) : gather_model(cards);
  const std::unique_ptr<CardRing> ring = s.tp > 1 ? std::make_unique<CardRing>(cards) : nullptr;
  const Prompts prompts = make_prompts(s);
  const auto synchronize = [&] {
    for (std::int64_t r = 0; r < s.tp; ++r) {
      if (spyreDeviceSynchronize(device_handle(static_cast<int>(r))) != SPYRE_SUCCESS) return false;
    }
    return true;
  };
  if (s.warmup) generate(s, cards, ring.get(), prompts, [] {});  // compiles and loads every kernel
  (void)synchronize();
  for (std::int64_t r = 0; r < s.tp; ++r) spyreDeviceResetStats(device_handle(static_cast<int>(r)));
  backend::reset_fallback_counts();
  if (!trace.empty()) {
    for (std::int64_t r = 0; r < s.tp; ++r) spyreTraceStart(device_handle(static_cast<int>(r)));
  }
  const auto stop_traces = [&] {
    bool ok = true;
    for (std::int64_t r = 0; r < s.tp && !trace.empty(); ++r) {
      ok = spyreTraceStop(device_handle(static_cast<int>(r)), card_trace(trace, r).c_str()) == SPYRE_SUCCESS && ok;
    }
    return ok;
  };
  const auto reports = [&] {
    std::vector<json> all;
    for (std::int64_t r = 0; r < s.tp; ++r) all.push_back(device_report(static_cast<int>(r)));
    return all;
  };
  json prefill;
  double ttft_us = 0;
  std::int64_t prefill_kernels = 0;
  const auto fault = [&](bool ok) {
    if (ok) return;
    const std::string what = spyreGetLastErrorMessage();
    if (!trace.empty()) stop_traces();
    throw DeviceFault(what);
  };
  const Generated g = generate(s, cards, ring.get(), prompts, [&] {
    fault(synchronize());
    const std::vector<json> at_prefill = reports();
    prefill = report::make_report(workload, 0, at_prefill[0], backend::fallback_counts());
    ttft_us = s.tp > 1 ? span_us(at_prefill) : prefill["metrics"].value("time_us", 0.0);
    for (const json& d : at_prefill) prefill_kernels += static_cast<std::int64_t>(num(d, "launches"));
  });
  fault(synchronize());
  if (!trace.empty() && !stop_traces()) throw UsageError(fmt::format("--trace: {}", spyreGetLastErrorMessage()));
  const std::vector<json> devs = reports();
  const LlmBounds bounds = llm_bounds(s, devs[0].value("derived", json::object()));
  json result =
      report::make_report(workload, bounds.prefill_flops + bounds.decode_flops, devs[0], backend::fallback_counts());
  double total_us = result["metrics"].value("time_us", 0.0);
  json tensor_parallel = nullptr;
  if (s.tp > 1) {
    // The system's figures: the cards' span, and the sums of their work and traffic.
    json& m = result["metrics"];
    total_us = span_us(devs);
    const double clock_hz = num(devs[0].value("derived", json::object()), "clock_hz");
    double kernels = 0, read = 0, write = 0, share = 0;
    json per_card = json::array();
    for (std::size_t r = 0; r < devs.size(); ++r) {
      const json& d = devs[r];
      const json busy = d.value("card_busy_ps", json::object()), peer = d.value("peer", json::object());
      const json dram = d.value("dram", json::object());
      const double comm_us = num(busy, "communication") * 1e-6, compute_us = num(busy, "compute") * 1e-6;
      const double overlap_us = num(busy, "overlap") * 1e-6;
      kernels += num(d, "launches");
      read += num(dram, "read_bytes");
      write += num(dram, "write_bytes");
      share += total_us > 0 ? comm_us / total_us : 0.0;
      per_card.push_back({{"card", r},
                          {"kernels", num(d, "launches")},
                          {"compute_us", compute_us},
                          {"communication_us", comm_us},
                          {"overlap_us", overlap_us},
                          // Neither computing nor communicating over the span: waiting for
                          // the other cards, or for its host.
                          {"idle_us", std::max(0.0, total_us - (compute_us + comm_us - overlap_us))},
                          {"peer_sent_bytes", num(peer, "sent_bytes")},
                          {"peer_received_bytes", num(peer, "received_bytes")},
                          {"dram_bytes", num(dram, "read_bytes") + num(dram, "write_bytes")}});
    }
    m["time_us"] = total_us;
    m["cycles"] = std::llround(total_us * 1e-6 * clock_hz);
    m["kernels"] = kernels;
    m["dram_read_bytes"] = read;
    m["dram_write_bytes"] = write;
    m["dram_bytes_per_s"] = total_us > 0 ? (read + write) / (total_us * 1e-6) : 0.0;
    // (Per card: one card's FLOPs over the span.)
    m["achieved_flops_per_s"] = total_us > 0 ? (bounds.prefill_flops + bounds.decode_flops) / (total_us * 1e-6) : 0.0;
    m["communication_share"] = share / double(devs.size());
    tensor_parallel = {{"cards", s.tp}, {"communication_share", share / double(devs.size())}, {"per_card", per_card}};
  }
  const double steps = double(s.gen - 1);
  const double decode_us = total_us - ttft_us;
  json llm = {{"spec", s.describe()},
              {"prompt_lengths", llm_prompt_lengths(s)},
              {"weight_bytes", bounds.weight_bytes},
              {"ttft_us", ttft_us},
              {"prefill_bound_us", bounds.prefill_s * 1e6},
              {"prefill_kernels", prefill_kernels},
              {"decode_steps", s.gen - 1},
              {"decode_us_per_token", steps > 0 ? decode_us / steps : 0.0},
              {"decode_bound_us_per_token", steps > 0 ? bounds.decode_s * 1e6 / steps : 0.0},
              {"decode_tokens_per_s", decode_us > 0 ? double(s.batch) * steps / (decode_us * 1e-6) : 0.0},
              {"tokens_per_s", total_us > 0 ? double(s.batch * s.gen) / (total_us * 1e-6) : 0.0}};
  if (!tensor_parallel.is_null()) llm["tensor_parallel"] = tensor_parallel;
  for (const char* k : {"ttft_us", "prefill_bound_us", "decode_us_per_token", "decode_bound_us_per_token",
                        "decode_tokens_per_s", "tokens_per_s"}) {
    result["metrics"][k] = llm[k];
  }
  if (s.check_cpu) {
    const at::Tensor ours = on_host(g);
    LlmSpec whole = s;
    whole.tp = 1;
    std::vector<Card> cpu{{reference, make_cache(whole, at::TensorOptions().dtype(s.dtype)), c10::Device(c10::kCPU)}};
    const at::Tensor theirs = on_host(generate(whole, cpu, nullptr, prompts, [] {}));
    const at::Tensor same = ours.eq(theirs);
    llm["cpu_check"] = {{"tokens", ours.numel()}, {"equal", same.sum().item<std::int64_t>()}};
  }
  result["llm"] = llm;
  return result;
}

}  // namespace spyre::tools
