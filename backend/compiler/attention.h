// The kernel compiler's fused attention: out = softmax(scale * Q K^T + mask) V in one
// kernel, flash-attention style. Each core keeps a block of query rows, its running
// row maxima m, row sums l and an fp32 output accumulator O in its scratchpad and
// streams the key and value blocks past them (double-buffered DMA); a block's scores
// S = Q K^T never leave the scratchpad. Per key block: m' = max(m, rowmax S),
// P = exp(S - m'), l = l e^(m - m') + rowsum P, O = O e^(m - m') + P V; at the end
// out = O / l and logsumexp = m + log l. Rows whose keys are all masked (-inf) give 0
// and a logsumexp of -inf, as PyTorch's _safe_softmax does.
//
// Grouped-query attention (fewer key/value heads than query heads) reads each key and
// value block once for its group: when a group's query rows fit one block, the block
// holds all of them (rows = heads of the group x query length), as a decode step needs.
// When each core has one block of query rows, the cores whose blocks read one key/value
// head share its key blocks over the ring: each block is read from DRAM once, by one
// of the cores that need it whole, and sent to the others as soon as it lands.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/elementwise.h"
#include "spyre/isa/isa.h"

namespace spyre::compiler {

struct AttentionShape {
  std::uint64_t batch = 1, q_heads = 1, kv_heads = 1, q_len = 1, kv_len = 1;
  std::uint64_t head_dim = 1, value_dim = 1;
  isa::DType dtype = isa::DType::fp16;  // query, key, value and the output: fp32, fp16 or bf16
  // Element strides {batch, head, row} of query, key and value; within a row the
  // head_dim (value_dim) values are contiguous.
  std::array<std::int64_t, 3> q_stride{}, k_stride{}, v_stride{};
  double scale = 1;
  bool causal = false;  // query i sees keys j <= i (top-left aligned, as PyTorch's is_causal)
  // An additive mask, logically [batch, q_heads, q_len, kv_len], with element strides
  // {batch, head, row} (0 broadcasts) and contiguous along the keys.
  std::optional<isa::DType> mask = std::nullopt;
  std::array<std::int64_t, 3> mask_stride{};
  // A paged KV cache: key and value are pools of `pool_slots` token rows (pages of
  // tokens laid end to end), and key t of sequence b is pool row slots[b][t], given as
  // an int32 argument [batch, kv_len], slots_stride elements from one sequence's row
  // to the next (0: kv_len; the keys of a row are contiguous). Row r, head h starts at element
  // r x k_stride[2] + h x k_stride[1] (k_stride[0] is unused; likewise for value). Each
  // key block's rows are gathered by their slots (dma_gather); a slot outside the pool
  // is a device fault.
  bool paged = false;
  std::uint64_t pool_slots = 0;
  std::uint64_t slots_stride = 0;
};

// Causal blocks are at most this long (query rows and keys).
inline constexpr std::uint64_t kCausalBand = 256;

// The positions argument (after the mask, when causal): at least kCausalBand fp32
// values 0, 1, 2, ... The kernel makes each block's causal band on the chip from
// them: key k0 + c is visible to query i0 + r exactly when c - r <= i0 - k0, and
// log(that), 0 or -inf, is added to the scores.

// How compile_attention laid the work out (for tests and dumps).
struct AttentionPlan {
  std::uint64_t block_q = 0, block_k = 0;  // query rows and keys per block
  std::uint32_t sub_blocks = 1;            // query blocks a core keeps at once, sharing each key block
  bool grouped = false;                    // a block holds a whole group's query heads
  std::uint64_t items = 0;                 // pieces of work (runs of query rows of one head or group)
  std::uint32_t cores = 0;
};

// Throws DoesNotFit when not even the smallest blocks fit the scratchpad and
// std::invalid_argument for shapes it does not take (head counts that do not divide,
// dtypes other than fp32/fp16/bf16, empty tensors).
AttentionPlan plan_attention(const AttentionShape& shape, const Target& target);

// Arguments: 0 = query, 1 = key, 2 = value, 3 = output (contiguous [batch, q_len,
// q_heads, value_dim], i.e. [batch, q_heads, q_len, value_dim] with the heads
// interleaved, as flash attention lays it out), 4 = logsumexp ([batch, q_heads, q_len]
// fp32, contiguous), then the mask when given, then the positions when causal, then
// the slots when paged.
std::vector<std::uint8_t> compile_attention(const AttentionShape& shape, const Target& target,
                                            const std::string& name);

}  // namespace spyre::compiler
