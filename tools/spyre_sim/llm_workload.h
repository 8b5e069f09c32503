// spyre-sim run --workload llm:...: a Llama-architecture decoder with random weights
// generating tokens on the simulated device (prefill, then greedy decode with a KV cache
// on the device), reported per phase: time to first token, per-token decode latency,
// tokens/s, and each phase's roofline bound.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>
#include <nlohmann/json.hpp>

namespace spyre::tools {

struct LlmSpec {
  std::int64_t layers = 2;
  std::int64_t dim = 256;
  std::int64_t heads = 8;
  std::int64_t kv_heads = 2;
  std::int64_t ffn = 688;
  std::int64_t vocab = 1024;
  std::int64_t prompt = 64;
  std::int64_t gen = 16;
  std::int64_t batch = 1;
  c10::ScalarType dtype = c10::kHalf;
  std::uint64_t seed = 0;  // of the weights (the device's generator) and the prompts (a CPU generator)
  bool warmup = true;     // run the generation once before the measured one (kernels compiled and loaded)
  bool check_cpu = false;  // generate on the CPU too, with the same weights, and compare the tokens
  // kv=paged,block=N: the KV cache as pools of N-token pages (0: one contiguous cache
  // per layer). Each sequence's pages are handed out interleaved with the other
  // sequences' (page p of sequence b is pool page p x batch + b), the cache update
  // writes each new token's row at its slot, and decode steps attend through the slot
  // table (spyre::paged_attention).
  std::int64_t page = 0;
  // tp=N: tensor parallelism over cards spyre:0..N-1 (Megatron-style: each card holds
  // heads/N query heads, kv_heads/N KV heads, ffn/N of the FFN's width and vocab/N of
  // the output projection; norms and embeddings whole on every card), the partial sums
  // of the attention's and the FFN's output projections added across the cards by a
  // ring all-reduce of peer copies, two per layer, and each card's best token passed to
  // every card by a ring all-gather.
  std::int64_t tp = 1;

  std::int64_t head_dim() const { return dim / heads; }
  // What one card of tp holds.
  std::int64_t local_heads() const { return heads / tp; }
  std::int64_t local_kv_heads() const { return kv_heads / tp; }
  std::int64_t local_ffn() const { return ffn / tp; }
  // Parses "layers=2,dim=256,..." items (UsageError on a bad key or value).
  static LlmSpec parse(const std::vector<std::string>& items);
  std::string describe() const;
};

inline constexpr const char* kLlmHelp =
    "llm[:layers=,dim=,heads=,kv_heads=,ffn=,vocab=,prompt=,gen=,batch=,dtype=,seed=,warmup=0|1,check=cpu,"
    "kv=contiguous|paged,block=,tp=]";

// Prompt lengths when batch > 1: sequence b keeps prompt - b x prompt / (2 x batch)
// tokens, left-padded to `prompt`, so a batch mixes lengths (masks keep the padding out).
std::vector<std::int64_t> llm_prompt_lengths(const LlmSpec& spec);

// The phases' analytic least times (include/spyre/cost/roofline.h) on the chip whose
// derived figures are given (spyreDeviceGetReport's "derived"): prefill reads the
// weights and writes the prompt's K/V; each decode step reads the weights and the
// cache so far and writes one position's K/V. With tp > 1, one card's: its share of
// the weights, the cache and the FLOPs (communication is not in the bound).
struct LlmBounds {
  double prefill_s = 0;
  double decode_s = 0;  // all decode steps
  double weight_bytes = 0;  // one card's
  double prefill_flops = 0;
  double decode_flops = 0;
};
LlmBounds llm_bounds(const LlmSpec& spec, const nlohmann::json& derived);

// Runs the generation on devices 0..tp-1 (configured by the caller) and returns the
// run report (report/run_report.h) of the measured generation with an "llm" section
// and the phase metrics; with tp > 1 the time is the cards' span and the "llm" section
// has each card's compute, communication and their overlap. `trace`: a Perfetto trace
// of the measured generation ("" none; with tp > 1 card r > 0 writes its own, the
// path with ".card<r>" before its extension).
nlohmann::json run_llm(const LlmSpec& spec, const std::string& workload, const std::string& trace);

}  // namespace spyre::tools
