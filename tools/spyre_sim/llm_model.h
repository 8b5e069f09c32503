// The llm workload's model (llm_workload.h): a Llama-architecture decoder's weights,
// made with random values on the device they live on, whole or as one card's
// tensor-parallel share, its KV cache, and the whole model the cards' shares make.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "spyre_sim/llm_workload.h"

namespace spyre::tools::llm {

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

// One card of a generation: its share of the model (all of it without tensor
// parallelism), its KV cache, and its device.
struct Card {
  Model model;
  Cache cache;
  c10::Device device;
};

constexpr double kRopeTheta = 10000.0;
constexpr double kNormEps = 1e-5;

inline std::int64_t max_positions(const LlmSpec& s) { return s.prompt + s.gen; }

// Random weights made where they live (the device's generator on spyre, seeded with
// the spec's seed): linear weights ~ N(0, 0.02), embeddings ~ N(0, 1), norms 1; rotary
// tables from the positions.
Model make_model(const LlmSpec& s, const at::TensorOptions& o);
// Card r's share of the model under tensor parallelism (LlmSpec::tp), made on the card
// it lives on (see llm_model.cpp).
Model make_shard(const LlmSpec& s, std::int64_t r, const at::TensorOptions& o);
Model copy_model(const Model& m, const at::Device& d);
Cache make_cache(const LlmSpec& s, const at::TensorOptions& o);
// The whole model the cards' shares make, on the CPU (the reference of check=cpu).
Model gather_model(const std::vector<Card>& cards);

}  // namespace spyre::tools::llm
