#include "compiler/attention.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>

#include "compiler/arena.h"
#include "compiler/dma.h"
#include "compiler/does_not_fit.h"
#include "spyre/isa/program.h"

namespace spyre::compiler {
namespace {

constexpr std::uint64_t kT = kCausalBand;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr isa::DType f32 = isa::DType::fp32;

// Tokens: key and value blocks and their mask / band tiles by slot, the query rows,
// the stores of the output and of the logsumexp.
constexpr std::uint8_t kTokK = 0, kTokV = 2, kTokTile = 4, kTokOut = 7, kTokLse = 8, kTokPos = 9, kTokRing = 10, kTokQ = 11,
                       kTokSlots = 12;

// The scratchpad buffers of a plan, laid out once: the footprint the planner checks and
// the addresses the code generator uses come from the same function.
struct Layout {
  struct Sub {
    std::uint32_t q = 0, o = 0, out = 0, lse = 0, m[2] = {0, 0}, mu = 0, l = 0;
    std::uint32_t mask[2] = {0, 0};
  };
  std::vector<Sub> sub;
  std::uint32_t k[2] = {0, 0}, v[2] = {0, 0};
  std::uint32_t slots = 0;  // (paged) a key block's pool rows, int32
  // Scores, two buffers: one block's scores are computed on the array while the vector
  // unit turns the previous block's into probabilities (in place in fp32; in one
  // shared buffer otherwise, whose conversion waits for the previous P V multiply).
  std::uint32_t s[2] = {0, 0}, p[2] = {0, 0};
  std::uint32_t mask32 = 0;
  // Causal: key and row positions (0, 1, ...; a grouped block's rows repeat their
  // positions per head), a block's band tile and its comparison; with aligned blocks
  // (below) the full diagonal tile, made once per core.
  std::uint32_t pos_c = 0, pos_r = 0, band = 0, band_flag = 0, diag = 0;
  std::uint32_t rowmax = 0, rowsum = 0, alpha = 0, tmp = 0, zero = 0, one = 0, flag = 0;
  std::uint64_t bytes = 0;
};

// Causal blocks are aligned when query and key blocks have one size and each query
// block starts where a key block does: every full diagonal block then needs the same
// band tile.
bool aligned_band(const AttentionShape& a, bool grouped, std::uint64_t bq, std::uint64_t bk) {
  return a.causal && !grouped && bq == bk;
}

Layout layout(const AttentionShape& a, bool grouped, std::uint64_t bq, std::uint64_t bk, std::uint32_t subs) {
  const bool aligned = aligned_band(a, grouped, bq, bk);
  const std::uint64_t size = isa::dtype_size(a.dtype);
  const std::uint64_t mask_size = a.mask ? isa::dtype_size(*a.mask) : 0;
  Layout l;
  Arena take;
  for (int slot = 0; slot < 2; ++slot) {
    l.k[slot] = take(bk * a.head_dim * size);
    l.v[slot] = take(bk * a.value_dim * size);
  }
  if (a.paged) l.slots = take(bk * 4);
  l.sub.resize(subs);
  for (auto& s : l.sub) {
    s.q = take(bq * a.head_dim * size);
    s.o = take(bq * a.value_dim * 4);
    s.out = size == 4 ? s.o : take(bq * a.value_dim * size);
    s.lse = take(bq * 4);
    s.m[0] = take(bq * 4);
    s.m[1] = take(bq * 4);
    s.mu = take(bq * 4);
    s.l = take(bq * 4);
    for (int slot = 0; slot < 2; ++slot) {
      if (a.mask) s.mask[slot] = take(bq * bk * mask_size);
    }
  }
  // Scores; also the fp32 copy of the query rows while they are scaled.
  if (a.causal) {
    l.pos_c = take(bk * 4);
    l.pos_r = take(bq * 4);
    l.band = take(bq * bk * 4);
    l.band_flag = take(bq * bk);
  }
  if (aligned) l.diag = take(bq * bk * 4);
  for (int buf = 0; buf < 2; ++buf) l.s[buf] = take(bq * std::max(bk, a.head_dim) * 4);
  const std::uint32_t p_half = size == 4 ? 0 : take(bq * bk * size);
  for (int buf = 0; buf < 2; ++buf) l.p[buf] = size == 4 ? l.s[buf] : p_half;
  l.mask32 = a.mask && *a.mask != f32 ? take(bq * bk * 4) : 0;
  l.rowmax = take(bq * 4);
  l.rowsum = take(bq * 4);
  l.alpha = take(bq * 4);
  l.tmp = take(bq * 4);
  l.zero = take(bq * 4);
  l.one = take(bq * 4);
  l.flag = take(bq);
  l.bytes = take.next;
  return l;
}

// A run of query rows of one head (or of a group's heads, when grouped): `heads` heads
// from `head` on, positions [i0, i0 + positions) of each; the block's rows are
// (head, position), position innermost.
struct Rows {
  std::uint64_t batch = 0, head = 0, i0 = 0, positions = 0, heads = 1;
  std::uint32_t count() const { return static_cast<std::uint32_t>(positions * heads); }
  std::uint64_t last_position() const { return i0 + positions - 1; }
};

// A core's piece of work: query blocks of one head (or group) sharing each key block.
struct Item {
  std::uint64_t batch = 0, kv_head = 0, q_head = 0;
  std::vector<std::uint64_t> starts;  // the blocks' first rows
  double cost = 0;                    // scores computed (rows x visible keys)
};

}  // namespace

AttentionPlan plan_attention(const AttentionShape& a, const Target& target) {
  if (a.dtype != f32 && a.dtype != isa::DType::fp16 && a.dtype != isa::DType::bf16) {
    throw std::invalid_argument("attention takes fp32, fp16 or bf16, found " + std::string(isa::to_string(a.dtype)));
  }
  if (a.batch == 0 || a.q_heads == 0 || a.kv_heads == 0 || a.q_len == 0 || a.kv_len == 0 || a.head_dim == 0 ||
      a.value_dim == 0) {
    throw std::invalid_argument("attention: every dimension must be positive");
  }
  if (a.paged && (a.pool_slots == 0 || a.k_stride[2] <= 0 || a.v_stride[2] <= 0 || a.k_stride[1] < 0 ||
                  a.v_stride[1] < 0)) {
    throw std::invalid_argument("paged attention needs a pool of at least one row and positive row strides, found " +
                                std::to_string(a.pool_slots) + " rows");
  }
  if (a.q_heads % a.kv_heads != 0) {
    throw std::invalid_argument("attention: " + std::to_string(a.q_heads) + " query heads do not divide into groups of " +
                                std::to_string(a.kv_heads) + " key/value heads");
  }
  const std::uint64_t group = a.q_heads / a.kv_heads;
  AttentionPlan p;
  p.grouped = group > 1 && group * a.q_len <= kT;
  const std::uint64_t rows = p.grouped ? group * a.q_len : a.q_len;  // rows of one head (or group)
  const std::uint64_t units = a.batch * (p.grouped ? a.kv_heads : a.q_heads);
  const std::uint64_t kv_cap = std::min<std::uint64_t>(a.causal ? kT : 512, a.kv_len);
  const auto cores = std::max<std::uint32_t>(1, target.cores);
  // The biggest query block (fewer passes over the keys), then the biggest key block
  // (a longer K for the P V multiply), then as many query blocks per core as fit, up
  // to the core's even share of the rows (at most 4 blocks).
  std::uint64_t tried_q = 0;
  for (const std::uint64_t q : {256ull, 128ull, 64ull, 32ull, 16ull, 8ull, 4ull, 2ull, 1ull}) {
    const std::uint64_t bq = p.grouped ? rows : std::min(q, rows);
    if (bq == tried_q) continue;
    tried_q = bq;
    std::uint64_t tried_k = 0;
    for (const std::uint64_t k : {512ull, 256ull, 128ull, 64ull, 32ull, 16ull, 8ull}) {
      const std::uint64_t bk = std::min(k, kv_cap);
      if (bk == tried_k) continue;
      tried_k = bk;
      const std::uint64_t share = (units * rows + cores - 1) / cores;
      const std::uint64_t blocks_per_head = (rows + bq - 1) / bq;
      const auto want = static_cast<std::uint32_t>(
          p.grouped ? 1 : std::clamp<std::uint64_t>((share + bq - 1) / bq, 1, std::min<std::uint64_t>(4, blocks_per_head)));
      for (std::uint32_t subs = want; subs >= 1; --subs) {
        if (layout(a, p.grouped, bq, bk, subs).bytes > target.scratchpad_bytes) continue;
        p.block_q = bq;
        p.block_k = bk;
        p.sub_blocks = subs;
        const std::uint64_t chunk = bq * subs;
        p.items = units * ((rows + chunk - 1) / chunk);
        p.cores = static_cast<std::uint32_t>(std::min<std::uint64_t>(cores, p.items));
        return p;
      }
    }
  }
  throw DoesNotFit("attention with head dims " + std::to_string(a.head_dim) + "/" + std::to_string(a.value_dim) +
                   ": one query row and 8 keys need " + std::to_string(layout(a, false, 1, std::min<std::uint64_t>(8, a.kv_len), 1).bytes) +
                   " bytes of scratchpad, the device has " + std::to_string(target.scratchpad_bytes));
}

std::vector<std::uint8_t> compile_attention(const AttentionShape& a, const Target& target, const std::string& name) {
  const AttentionPlan p = plan_attention(a, target);
  const std::uint64_t group = a.q_heads / a.kv_heads;
  const std::uint64_t rows = p.grouped ? group * a.q_len : a.q_len;
  const std::uint64_t bq = p.block_q, bk = p.block_k;
  const Layout L = layout(a, p.grouped, bq, bk, p.sub_blocks);
  const bool aligned = aligned_band(a, p.grouped, bq, bk);
  const bool half = a.dtype != f32;
  const std::uint16_t mask_arg = 5, band_arg = a.mask ? 6 : 5;
  const auto slots_arg = static_cast<std::uint16_t>(5 + (a.mask ? 1 : 0) + (a.causal ? 1 : 0));
  const auto d = static_cast<std::uint32_t>(a.head_dim), dv = static_cast<std::uint32_t>(a.value_dim);

  // The work: runs of up to sub_blocks x bq rows of each head (or group), costed by the
  // keys they see, given to the least loaded core, longest first.
  std::vector<Item> items;
  for (std::uint64_t b = 0; b < a.batch; ++b) {
    for (std::uint64_t h = 0; h < (p.grouped ? a.kv_heads : a.q_heads); ++h) {
      // Causal blocks see more keys the later they start: an item takes blocks from
      // both ends (first and last, second and second to last, ...), so items cost alike.
      const std::uint64_t nb = (rows + bq - 1) / bq;
      std::vector<std::uint64_t> order;
      for (std::uint64_t x = 0; x < nb; ++x) order.push_back(!a.causal ? x : x % 2 == 0 ? x / 2 : nb - 1 - x / 2);
      for (std::uint64_t x = 0; x < nb; x += p.sub_blocks) {
        Item it{b, p.grouped ? h : h / group, p.grouped ? h * group : h, {}, 0};
        for (std::uint64_t y = x; y < std::min(nb, x + p.sub_blocks); ++y) {
          const std::uint64_t r0 = order[y] * bq, n = std::min(bq, rows - r0);
          it.starts.push_back(r0);
          const std::uint64_t keys = a.causal ? std::min(a.kv_len, p.grouped ? a.q_len : r0 + n) : a.kv_len;
          it.cost += static_cast<double>(n) * static_cast<double>(keys);
        }
        items.push_back(it);
      }
    }
  }
  std::vector<std::size_t> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return items[x].cost > items[y].cost; });
  std::vector<std::vector<std::size_t>> per_core(p.cores);
  std::vector<double> load(p.cores, 0);
  for (const std::size_t i : order) {
    const auto c = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    per_core[c].push_back(i);
    load[c] += items[i].cost + 1;
  }

  // An item's query blocks, and the keys they see (a prefix: [0, kv_end)).
  const auto blocks_of = [&](const Item& it) {
    std::vector<Rows> blocks;
    for (const std::uint64_t r : it.starts) {
      const std::uint64_t n = std::min(bq, rows - r);
      blocks.push_back(p.grouped ? Rows{it.batch, it.q_head, 0, a.q_len, group} : Rows{it.batch, it.q_head, r, n, 1});
    }
    return blocks;
  };
  const auto kv_end_of = [&](const std::vector<Rows>& blocks) {
    if (!a.causal) return a.kv_len;
    std::uint64_t last = 0;
    for (const Rows& r : blocks) last = std::max(last, r.last_position());
    return std::min(a.kv_len, last + 1);
  };
  // Cores with one item each whose items read the same key/value head share its blocks
  // over the ring. Key block j is shared by the members that need the most of it (all
  // of it, unless every member's keys end inside it): one of them, taking
  // turns by j, reads it from DRAM and sends it to the others when it lands (the ring
  // carries it; DRAM reads it once). A causal head's later query blocks need more key
  // blocks than its first: those the fewer members share among themselves.
  struct Sharing {
    std::vector<std::uint16_t> members;  // cores, in order
    std::vector<std::uint64_t> ends;     // each member's keys: [0, end)
  };
  std::vector<const Sharing*> sharing(p.cores, nullptr);
  std::map<std::pair<std::uint64_t, std::uint64_t>, Sharing> by_head;
  {
    bool one_each = true;
    for (const auto& list : per_core) one_each = one_each && list.size() == 1;
    if (one_each && !p.grouped) {
      for (std::uint32_t c = 0; c < p.cores; ++c) {
        const Item& it = items[per_core[c][0]];
        Sharing& g = by_head[{it.batch, it.kv_head}];
        g.members.push_back(static_cast<std::uint16_t>(c));
        g.ends.push_back(kv_end_of(blocks_of(it)));
      }
      for (std::uint32_t c = 0; c < p.cores; ++c) {
        const Item& it = items[per_core[c][0]];
        const Sharing& g = by_head.at({it.batch, it.kv_head});
        if (g.members.size() > 1) sharing[c] = &g;
      }
    }
  }
  // The members sharing key block j with `core` (empty: it reads the block itself).
  const auto sharers = [&](std::uint32_t core, std::uint64_t j) {
    std::vector<std::uint16_t> out;
    const Sharing* g = sharing[core];
    if (g == nullptr) return out;
    const std::uint64_t k0 = j * bk;
    std::uint64_t longest = 0;  // the most keys of block j a member needs
    for (const std::uint64_t end : g->ends) longest = std::max(longest, end > k0 ? std::min(bk, end - k0) : 0);
    bool mine = false;
    for (std::size_t x = 0; x < g->members.size(); ++x) {
      const std::uint64_t end = g->ends[x];
      if (end > k0 && std::min(bk, end - k0) == longest) {
        out.push_back(g->members[x]);
        mine = mine || g->members[x] == core;
      }
    }
    if (!mine || out.size() < 2) out.clear();
    return out;
  };

  const std::uint64_t out_row = a.q_heads * a.value_dim, out_batch = a.q_len * out_row;
  isa::ProgramBuilder b(name, p.cores);
  for (std::uint32_t core = 0; core < p.cores; ++core) {
    auto& list = per_core[core];
    std::sort(list.begin(), list.end());
    const auto add = [&](const isa::Instruction& inst) { b.add(core, inst); };
    add(isa::VFill{.dtype = f32, .dst = L.zero, .count = static_cast<std::uint32_t>(bq), .value = 0});
    add(isa::VFill{.dtype = f32, .dst = L.one, .count = static_cast<std::uint32_t>(bq), .value = 1});
    // The band tile of `rows` x `cols` scores whose rows start `shift` positions after
    // their keys: column c (key) visible to row r exactly when c - r <= shift; made on
    // the chip as log(c - r <= shift), 0 or -inf.
    const auto make_band = [&](std::uint32_t dst, std::uint32_t rows_n, std::uint32_t cols_n, double shift) {
      const std::uint32_t count = rows_n * cols_n;
      add(isa::VFill{.dtype = f32, .dst = dst, .count = count, .value = 0});
      add(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .bcast = isa::Broadcast::row, .a = dst, .b = L.pos_c,
                       .dst = dst, .rows = rows_n, .cols = cols_n});
      add(isa::VBinary{.op = isa::BinaryOp::sub, .dtype = f32, .bcast = isa::Broadcast::col, .a = dst, .b = L.pos_r,
                       .dst = dst, .rows = rows_n, .cols = cols_n});
      add(isa::VCompare{.op = isa::CompareOp::le, .dtype = f32, .bcast = isa::Broadcast::immediate, .a = dst,
                        .dst = L.band_flag, .rows = rows_n, .cols = cols_n, .imm = shift});
      add(isa::VConvert{.from = isa::DType::boolean, .to = f32, .src = L.band_flag, .dst = dst, .count = count});
      add(isa::VUnary{.op = isa::UnaryOp::log, .dtype = f32, .src = dst, .dst = dst, .count = count});
    };
    if (a.causal) {
      add(make_dma<isa::DmaLoad>(kTokPos, f32, band_arg, 0, L.pos_c, {static_cast<std::uint32_t>(bk), 1, 1}, {1, 0, 0}));
      if (p.grouped) {  // rows (head, position): the positions once per head
        add(make_dma<isa::DmaLoad>(kTokPos, f32, band_arg, 0, L.pos_r,
                                   {static_cast<std::uint32_t>(a.q_len), static_cast<std::uint32_t>(group), 1}, {1, 0, 0}));
      } else {
        add(make_dma<isa::DmaLoad>(kTokPos, f32, band_arg, 0, L.pos_r, {static_cast<std::uint32_t>(bq), 1, 1}, {1, 0, 0}));
      }
      add(wait_on(kTokPos));
      if (aligned) make_band(L.diag, static_cast<std::uint32_t>(bq), static_cast<std::uint32_t>(bk), 0);
    }
    // v := (v == imm) ? c : v over n values.
    const auto fix = [&](std::uint32_t v, double imm, std::uint32_t c, std::uint32_t n) {
      add(isa::VCompare{.op = isa::CompareOp::eq, .dtype = f32, .bcast = isa::Broadcast::immediate, .a = v,
                        .dst = L.flag, .rows = 1, .cols = n, .imm = imm});
      add(isa::VSelect{.dtype = f32, .cond = L.flag, .a = c, .b = v, .dst = v, .count = n});
    };
    for (const std::size_t index : list) {
      const Item& it = items[index];
      const std::vector<Rows> blocks = blocks_of(it);
      const std::uint64_t kv_end = kv_end_of(blocks);
      const std::uint64_t kv_blocks = (kv_end + bk - 1) / bk;
      // Who reads block j from DRAM, given its sharers: this core, or (shared) the
      // member whose turn it is.
      const auto loader = [&](std::uint64_t j, const std::vector<std::uint16_t>& with) {
        return with.empty() ? static_cast<std::uint16_t>(core) : with[j % with.size()];
      };
      // A shared block's one ring message: its keys and values side by side in the slot.
      const auto kv_message_bytes = [&](std::uint32_t slot, std::uint64_t n) {
        return L.v[slot] - L.k[slot] + static_cast<std::uint32_t>(n * dv * isa::dtype_size(a.dtype));
      };
      // 0: the block sees none of the keys [k0, k0 + n); 1: all; 2: some (the band).
      const auto visibility = [&](const Rows& r, std::uint64_t k0, std::uint64_t n) {
        if (!a.causal) return 1;
        if (k0 > r.last_position()) return 0;
        return k0 + n - 1 <= r.i0 ? 1 : 2;
      };
      const auto tile_dma = [&](const Rows& r, std::uint16_t arg, isa::DType t, std::uint64_t offset,
                                std::int64_t row_stride, std::int64_t head_stride, std::uint32_t sp, std::uint64_t n,
                                std::uint8_t token) {
        add(make_dma<isa::DmaLoad>(token, t, arg, offset * isa::dtype_size(t), sp,
                                   {static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(r.positions),
                                    static_cast<std::uint32_t>(r.heads)},
                                   {1, row_stride, head_stride}));
      };
      const auto load_kv = [&](std::uint64_t j) {
        const auto slot = static_cast<std::uint32_t>(j % 2);
        const std::uint64_t k0 = j * bk, n = std::min(bk, kv_end - k0);
        const auto rows_n = static_cast<std::uint32_t>(n);
        const std::uint64_t k_off = it.batch * a.k_stride[0] + it.kv_head * a.k_stride[1] + k0 * a.k_stride[2];
        const std::uint64_t v_off = it.batch * a.v_stride[0] + it.kv_head * a.v_stride[1] + k0 * a.v_stride[2];
        const std::vector<std::uint16_t> with = sharers(core, j);
        const bool loads = loader(j, with) == core;
        if (loads && a.paged) {
          // The block's pool rows, then each head's rows gathered by them. (The slots
          // buffer is reused at once: the gathers read their indices when issued.)
          const std::uint64_t esize = isa::dtype_size(a.dtype);
          add(make_dma<isa::DmaLoad>(kTokSlots, isa::DType::int32, slots_arg, (it.batch * (a.slots_stride != 0 ? a.slots_stride : a.kv_len) + k0) * 4, L.slots,
                                     {rows_n, 1, 1}, {1, 0, 0}));
          add(wait_on(kTokSlots));
          add(isa::DmaGather{.token = static_cast<std::uint8_t>(kTokK + slot), .arg = 1, .index_sp = L.slots,
                             .count = rows_n, .sp_addr = L.k[slot], .row_bytes = static_cast<std::uint32_t>(d * esize),
                             .offset = it.kv_head * static_cast<std::uint64_t>(a.k_stride[1]) * esize, .rows = a.pool_slots,
                             .row_stride = static_cast<std::uint64_t>(a.k_stride[2]) * esize});
          add(isa::DmaGather{.token = static_cast<std::uint8_t>(kTokV + slot), .arg = 2, .index_sp = L.slots,
                             .count = rows_n, .sp_addr = L.v[slot], .row_bytes = static_cast<std::uint32_t>(dv * esize),
                             .offset = it.kv_head * static_cast<std::uint64_t>(a.v_stride[1]) * esize, .rows = a.pool_slots,
                             .row_stride = static_cast<std::uint64_t>(a.v_stride[2]) * esize});
        } else if (loads) {
          add(make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(kTokK + slot), a.dtype, 1,
                                     k_off * isa::dtype_size(a.dtype), L.k[slot], {d, rows_n, 1}, {1, a.k_stride[2], 0}));
          add(make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(kTokV + slot), a.dtype, 2,
                                     v_off * isa::dtype_size(a.dtype), L.v[slot], {dv, rows_n, 1}, {1, a.v_stride[2], 0}));
        }
        // A shared block goes to the others as soon as it lands (the send waits for the
        // loads' bytes in the scratchpad, not for this core's turn to use them).
        if (!with.empty() && loads) {
          for (const std::uint16_t other : with) {
            if (other != core) {
              add(isa::RingSend{.token = kTokRing, .dst_core = other, .tag = static_cast<std::uint16_t>(j),
                                .sp_addr = L.k[slot], .bytes = kv_message_bytes(slot, n)});
            }
          }
        }
        for (std::size_t s = 0; s < blocks.size(); ++s) {
          const Rows& r = blocks[s];
          const int vis = visibility(r, k0, n);
          if (vis == 0) continue;
          const auto token = static_cast<std::uint8_t>(kTokTile + slot);
          if (a.mask) {
            const std::uint64_t off = r.batch * a.mask_stride[0] + r.head * a.mask_stride[1] + r.i0 * a.mask_stride[2] + k0;
            tile_dma(r, mask_arg, *a.mask, off, a.mask_stride[2], a.mask_stride[1], L.sub[s].mask[slot], n, token);
          }
        }
      };
      // The previous item's stores read the output buffers.
      add(wait_on(kTokOut, kTokLse));
      for (std::size_t s = 0; s < blocks.size(); ++s) {
        const Rows& r = blocks[s];
        const std::uint64_t off = r.batch * a.q_stride[0] + r.head * a.q_stride[1] + r.i0 * a.q_stride[2];
        add(make_dma<isa::DmaLoad>(kTokQ, a.dtype, 0, off * isa::dtype_size(a.dtype), L.sub[s].q,
                                   {d, static_cast<std::uint32_t>(r.positions), static_cast<std::uint32_t>(r.heads)},
                                   {1, a.q_stride[2], a.q_stride[1]}));
      }
      if (kv_blocks > 0) load_kv(0);
      add(wait_on(kTokQ));
      // Fold the scale into the query rows (once per block, in fp32, one rounding).
      for (std::size_t s = 0; s < blocks.size(); ++s) {
        const std::uint32_t n = blocks[s].count() * d;
        const auto& q = L.sub[s].q;
        if (half) add(isa::VConvert{.from = a.dtype, .to = f32, .src = q, .dst = L.s[0], .count = n});
        add(isa::VBinary{.op = isa::BinaryOp::mul, .dtype = f32, .bcast = isa::Broadcast::immediate, .a = half ? L.s[0] : q,
                         .dst = half ? L.s[0] : q, .rows = 1, .cols = n, .imm = a.scale});
        if (half) add(isa::VConvert{.from = f32, .to = a.dtype, .src = L.s[0], .dst = q, .count = n});
        add(isa::VFill{.dtype = f32, .dst = L.sub[s].m[0], .count = blocks[s].count(), .value = -kInf});
      }
      // The (key block, query block) pairs with visible keys, key blocks in order. They
      // run as a pipeline two deep: pair i + 2's scores are issued to the array right
      // after pair i's P V multiply, so the vector unit's softmax of pair i + 1 runs
      // while the array computes (the core's units overlap; scratchpad dependencies
      // order them). Key block j + 2 loads into j's slot once j's last pair is issued.
      struct Pair {
        std::uint64_t j = 0;
        std::size_t s = 0;
        bool first = false, last = false;  // in its key block
      };
      std::vector<Pair> pairs;
      for (std::uint64_t j = 0; j < kv_blocks; ++j) {
        const std::size_t begin = pairs.size();
        for (std::size_t s = 0; s < blocks.size(); ++s) {
          if (visibility(blocks[s], j * bk, std::min(bk, kv_end - j * bk)) != 0) pairs.push_back({j, s});
        }
        if (pairs.size() > begin) {
          pairs[begin].first = true;
          pairs.back().last = true;
        }
      }
      if (kv_blocks > 1) {
        add(wait_on(kTokRing));
        load_kv(1);
      }
      const auto keys_of = [&](const Pair& pr) { return static_cast<std::uint32_t>(std::min(bk, kv_end - pr.j * bk)); };
      // Pair i's scores, once its key block is here.
      const auto scores = [&](std::size_t i) {
        const Pair& pr = pairs[i];
        const auto slot = static_cast<std::uint32_t>(pr.j % 2);
        const std::uint32_t n = keys_of(pr);
        if (pr.first) {
          // A shared block arrives from its loader.
          const std::vector<std::uint16_t> with = sharers(core, pr.j);
          if (!with.empty() && loader(pr.j, with) != core) {
            add(isa::RingRecv{.token = kTokRing, .src_core = loader(pr.j, with), .tag = static_cast<std::uint16_t>(pr.j),
                              .sp_addr = L.k[slot], .bytes = kv_message_bytes(slot, n)});
          }
          add(wait_on(kTokK + slot, kTokTile + slot));
        }
        add(isa::Matmul{.a = L.sub[pr.s].q, .b = L.k[slot], .c = L.s[i % 2], .m = blocks[pr.s].count(), .n = n, .k = d,
                        .lda = d, .ldb = d, .ldc = n, .in = a.dtype, .out = f32, .trans_b = true});
      };
      std::vector<bool> started(blocks.size(), false);
      std::vector<int> m_cur(blocks.size(), 0);
      for (std::size_t i = 0; i < std::min<std::size_t>(2, pairs.size()); ++i) scores(i);
      for (std::size_t i = 0; i < pairs.size(); ++i) {
        const Pair& pr = pairs[i];
        const auto slot = static_cast<std::uint32_t>(pr.j % 2);
        const std::uint64_t k0 = pr.j * bk;
        const std::uint32_t n = keys_of(pr);
        const std::uint32_t S = L.s[i % 2], P = L.p[i % 2];
        const std::size_t s = pr.s;
        const Rows& r = blocks[s];
        const int vis = visibility(r, k0, n);
        const auto& sb = L.sub[s];
        const std::uint32_t rn = r.count(), count = rn * n;
        if (a.mask) {
          std::uint32_t mf = sb.mask[slot];
          if (*a.mask != f32) {
            add(isa::VConvert{.from = *a.mask, .to = f32, .src = mf, .dst = L.mask32, .count = count});
            mf = L.mask32;
          }
          add(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .a = S, .b = mf, .dst = S, .rows = rn, .cols = n});
        }
        if (vis == 2) {
          std::uint32_t band = L.diag;
          if (!aligned || rn != bq || n != bk) {
            make_band(L.band, rn, n, static_cast<double>(r.i0) - static_cast<double>(k0));
            band = L.band;
          }
          add(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .a = S, .b = band, .dst = S, .rows = rn, .cols = n});
        }
        const std::uint32_t m_old = sb.m[m_cur[s]], m_new = sb.m[1 - m_cur[s]];
        add(isa::VReduce{.op = isa::ReduceOp::max, .in = f32, .out = f32, .axis = 1, .src = S, .dst = L.rowmax,
                         .rows = rn, .cols = n});
        add(isa::VBinary{.op = isa::BinaryOp::max, .dtype = f32, .a = m_old, .b = L.rowmax, .dst = m_new, .rows = 1, .cols = rn});
        // The shift: the new maximum, or 0 for rows that have seen only masked keys.
        add(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = f32, .src = m_new, .dst = sb.mu, .count = rn});
        fix(sb.mu, -kInf, L.zero, rn);
        add(isa::VBinary{.op = isa::BinaryOp::sub, .dtype = f32, .bcast = isa::Broadcast::col, .a = S, .b = sb.mu,
                         .dst = S, .rows = rn, .cols = n});
        add(isa::VUnary{.op = isa::UnaryOp::exp, .dtype = f32, .src = S, .dst = S, .count = count});
        if (!started[s]) {
          add(isa::VReduce{.op = isa::ReduceOp::sum, .in = f32, .out = f32, .axis = 1, .src = S, .dst = sb.l,
                           .rows = rn, .cols = n});
        } else {
          add(isa::VReduce{.op = isa::ReduceOp::sum, .in = f32, .out = f32, .axis = 1, .src = S, .dst = L.rowsum,
                           .rows = rn, .cols = n});
          // alpha = e^(m_old - shift): the old terms' correction.
          add(isa::VBinary{.op = isa::BinaryOp::sub, .dtype = f32, .a = m_old, .b = sb.mu, .dst = L.alpha, .rows = 1,
                           .cols = rn});
          add(isa::VUnary{.op = isa::UnaryOp::exp, .dtype = f32, .src = L.alpha, .dst = L.alpha, .count = rn});
          add(isa::VBinary{.op = isa::BinaryOp::mul, .dtype = f32, .a = sb.l, .b = L.alpha, .dst = sb.l, .rows = 1, .cols = rn});
          add(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .a = sb.l, .b = L.rowsum, .dst = sb.l, .rows = 1, .cols = rn});
          add(isa::VBinary{.op = isa::BinaryOp::mul, .dtype = f32, .bcast = isa::Broadcast::col, .a = sb.o, .b = L.alpha,
                           .dst = sb.o, .rows = rn, .cols = dv});
        }
        if (half) add(isa::VConvert{.from = f32, .to = a.dtype, .src = S, .dst = P, .count = count});
        if (pr.first) add(wait_on(kTokV + slot));
        add(isa::Matmul{.a = P, .b = L.v[slot], .c = sb.o, .m = rn, .n = dv, .k = n, .lda = n, .ldb = dv, .ldc = dv,
                        .in = a.dtype, .out = f32, .accumulate = started[s]});
        started[s] = true;
        m_cur[s] = 1 - m_cur[s];
        if (pr.last && pr.j + 2 < kv_blocks) {
          add(wait_on(kTokRing));  // (the slot's last send has left)
          load_kv(pr.j + 2);
        }
        if (i + 2 < pairs.size()) scores(i + 2);
      }
      // out = O / l (0 for rows that saw no key), logsumexp = shift + log l.
      for (std::size_t s = 0; s < blocks.size(); ++s) {
        const Rows& r = blocks[s];
        const auto& sb = L.sub[s];
        const std::uint32_t rn = r.count();
        if (!started[s]) {  // (no visible key: only when causal and kv_len is 0, which is refused)
          add(isa::VFill{.dtype = f32, .dst = sb.o, .count = rn * dv, .value = 0});
          add(isa::VFill{.dtype = f32, .dst = sb.l, .count = rn, .value = 0});
          add(isa::VFill{.dtype = f32, .dst = sb.mu, .count = rn, .value = 0});
        }
        add(isa::VUnary{.op = isa::UnaryOp::log, .dtype = f32, .src = sb.l, .dst = L.tmp, .count = rn});
        add(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .a = sb.mu, .b = L.tmp, .dst = sb.lse, .rows = 1, .cols = rn});
        fix(sb.l, 0, L.one, rn);
        add(isa::VBinary{.op = isa::BinaryOp::div, .dtype = f32, .bcast = isa::Broadcast::col, .a = sb.o, .b = sb.l,
                         .dst = sb.o, .rows = rn, .cols = dv});
        if (half) add(isa::VConvert{.from = f32, .to = a.dtype, .src = sb.o, .dst = sb.out, .count = rn * dv});
        const std::uint64_t out_off = r.batch * out_batch + r.i0 * out_row + r.head * a.value_dim;
        add(make_dma<isa::DmaStore>(kTokOut, a.dtype, 3, out_off * isa::dtype_size(a.dtype), sb.out,
                                    {dv, static_cast<std::uint32_t>(r.positions), static_cast<std::uint32_t>(r.heads)},
                                    {1, static_cast<std::int64_t>(out_row), static_cast<std::int64_t>(a.value_dim)}));
        const std::uint64_t lse_off = (r.batch * a.q_heads + r.head) * a.q_len + r.i0;
        add(make_dma<isa::DmaStore>(kTokLse, f32, 4, lse_off * 4, sb.lse,
                                    {static_cast<std::uint32_t>(r.positions), static_cast<std::uint32_t>(r.heads), 1},
                                    {1, static_cast<std::int64_t>(a.q_len), 0}));
      }
    }
    add(isa::Wait{.token_mask = 0xfff});
  }
  return b.build();
}

}  // namespace spyre::compiler
