#include "compiler/attention.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>

#include "compiler/arena.h"
#include "compiler/dma.h"
#include "compiler/emit.h"
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

namespace {

// The rows of one head (or group) and the blocks they fall into.
struct Geometry {
  const AttentionShape& a;
  const AttentionPlan& p;
  std::uint64_t group, rows, bq, bk;
  Geometry(const AttentionShape& shape, const AttentionPlan& plan)
      : a(shape), p(plan), group(shape.q_heads / shape.kv_heads),
        rows(plan.grouped ? group * shape.q_len : shape.q_len), bq(plan.block_q), bk(plan.block_k) {}

  // An item's query blocks.
  std::vector<Rows> blocks_of(const Item& it) const {
    std::vector<Rows> blocks;
    for (const std::uint64_t r : it.starts) {
      const std::uint64_t n = std::min(bq, rows - r);
      blocks.push_back(p.grouped ? Rows{it.batch, it.q_head, 0, a.q_len, group} : Rows{it.batch, it.q_head, r, n, 1});
    }
    return blocks;
  }
  // The keys the blocks see: a prefix, [0, kv_end).
  std::uint64_t kv_end_of(const std::vector<Rows>& blocks) const {
    if (!a.causal) return a.kv_len;
    std::uint64_t last = 0;
    for (const Rows& r : blocks) last = std::max(last, r.last_position());
    return std::min(a.kv_len, last + 1);
  }
};

// The work: runs of up to sub_blocks x bq rows of each head (or group), costed by the keys
// they see, given to the least loaded core, longest first.
struct Work {
  std::vector<Item> items;
  std::vector<std::vector<std::size_t>> per_core;  // items by core, in order
};

Work spread_work(const Geometry& g) {
  const AttentionShape& a = g.a;
  const AttentionPlan& p = g.p;
  Work w;
  for (std::uint64_t b = 0; b < a.batch; ++b) {
    for (std::uint64_t h = 0; h < (p.grouped ? a.kv_heads : a.q_heads); ++h) {
      // Causal blocks see more keys the later they start: an item takes blocks from both
      // ends (first and last, second and second to last, ...), so items cost alike.
      const std::uint64_t nb = (g.rows + g.bq - 1) / g.bq;
      std::vector<std::uint64_t> order;
      for (std::uint64_t x = 0; x < nb; ++x) order.push_back(!a.causal ? x : x % 2 == 0 ? x / 2 : nb - 1 - x / 2);
      for (std::uint64_t x = 0; x < nb; x += p.sub_blocks) {
        Item it{b, p.grouped ? h : h / g.group, p.grouped ? h * g.group : h, {}, 0};
        for (std::uint64_t y = x; y < std::min(nb, x + p.sub_blocks); ++y) {
          const std::uint64_t r0 = order[y] * g.bq, n = std::min(g.bq, g.rows - r0);
          it.starts.push_back(r0);
          const std::uint64_t keys = a.causal ? std::min(a.kv_len, p.grouped ? a.q_len : r0 + n) : a.kv_len;
          it.cost += static_cast<double>(n) * static_cast<double>(keys);
        }
        w.items.push_back(it);
      }
    }
  }
  std::vector<std::size_t> order(w.items.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return w.items[x].cost > w.items[y].cost; });
  w.per_core.resize(p.cores);
  std::vector<double> load(p.cores, 0);
  for (const std::size_t i : order) {
    const auto c = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    w.per_core[c].push_back(i);
    load[c] += w.items[i].cost + 1;
  }
  for (auto& list : w.per_core) std::sort(list.begin(), list.end());
  return w;
}

// Cores with one item each whose items read the same key/value head share its blocks over
// the ring. Key block j is shared by the members that need the most of it (all of it,
// unless every member's keys end inside it): one of them, taking turns by j, reads it
// from DRAM and sends it to the others when it lands (the ring carries it; DRAM reads it
// once). A causal head's later query blocks need more key blocks than its first: those
// the fewer members share among themselves.
class KvSharing {
 public:
  KvSharing(const Geometry& g, const Work& w) : bk_(g.bk), group_of_(g.p.cores, -1) {
    bool one_each = true;
    for (const auto& list : w.per_core) one_each = one_each && list.size() == 1;
    if (!one_each || g.p.grouped) return;
    std::map<std::pair<std::uint64_t, std::uint64_t>, std::size_t> by_head;
    std::vector<int> candidate(g.p.cores);
    for (std::uint32_t c = 0; c < g.p.cores; ++c) {
      const Item& it = w.items[w.per_core[c][0]];
      const auto [at, added] = by_head.try_emplace({it.batch, it.kv_head}, groups_.size());
      if (added) groups_.emplace_back();
      groups_[at->second].members.push_back(static_cast<std::uint16_t>(c));
      groups_[at->second].ends.push_back(g.kv_end_of(g.blocks_of(it)));
      candidate[c] = static_cast<int>(at->second);
    }
    for (std::uint32_t c = 0; c < g.p.cores; ++c) {
      if (groups_[static_cast<std::size_t>(candidate[c])].members.size() > 1) group_of_[c] = candidate[c];
    }
  }

  // The members sharing key block j with `core` (empty: it reads the block itself).
  std::vector<std::uint16_t> sharers(std::uint32_t core, std::uint64_t j) const {
    std::vector<std::uint16_t> out;
    if (group_of_[core] < 0) return out;
    const Group& g = groups_[static_cast<std::size_t>(group_of_[core])];
    const std::uint64_t k0 = j * bk_;
    std::uint64_t longest = 0;  // the most keys of block j a member needs
    for (const std::uint64_t end : g.ends) longest = std::max(longest, end > k0 ? std::min(bk_, end - k0) : 0);
    bool mine = false;
    for (std::size_t x = 0; x < g.members.size(); ++x) {
      const std::uint64_t end = g.ends[x];
      if (end > k0 && std::min(bk_, end - k0) == longest) {
        out.push_back(g.members[x]);
        mine = mine || g.members[x] == core;
      }
    }
    if (!mine || out.size() < 2) out.clear();
    return out;
  }

  // Who reads block j from DRAM, given its sharers: this core, or (shared) the member
  // whose turn it is.
  static std::uint16_t loader(std::uint32_t core, std::uint64_t j, const std::vector<std::uint16_t>& with) {
    return with.empty() ? static_cast<std::uint16_t>(core) : with[j % with.size()];
  }

 private:
  struct Group {
    std::vector<std::uint16_t> members;  // cores, in order
    std::vector<std::uint64_t> ends;     // each member's keys: [0, end)
  };
  std::uint64_t bk_;
  std::vector<Group> groups_;
  std::vector<int> group_of_;  // by core: its sharing group, or -1
};

// A (key block, query block) pair with visible keys.
struct Pair {
  std::uint64_t j = 0;
  std::size_t s = 0;
  bool first = false, last = false;  // in its key block
};

// One core's code: its items, each a flash-attention pass of its query blocks over the
// key blocks they see.
class AttentionCore {
 public:
  AttentionCore(const Geometry& g, const Layout& l, const Work& w, const KvSharing& sharing, isa::ProgramBuilder& b,
                std::uint32_t core)
      : a_(g.a), p_(g.p), g_(g), L_(l), w_(w), sharing_(sharing), core_(core), add_{b, core},
        aligned_(aligned_band(g.a, g.p.grouped, g.bq, g.bk)), half_(g.a.dtype != f32),
        d_(static_cast<std::uint32_t>(g.a.head_dim)), dv_(static_cast<std::uint32_t>(g.a.value_dim)) {}

  void emit() {
    prologue();
    for (const std::size_t index : w_.per_core[core_]) item(w_.items[index]);
    add_(isa::Wait{.token_mask = 0xfff});
  }

 private:
  std::uint16_t mask_arg() const { return 5; }
  std::uint16_t band_arg() const { return a_.mask ? 6 : 5; }
  std::uint16_t slots_arg() const { return static_cast<std::uint16_t>(5 + (a_.mask ? 1 : 0) + (a_.causal ? 1 : 0)); }
  // 0: the block sees none of the keys [k0, k0 + n); 1: all; 2: some (the band).
  int visibility(const Rows& r, std::uint64_t k0, std::uint64_t n) const {
    if (!a_.causal) return 1;
    if (k0 > r.last_position()) return 0;
    return k0 + n - 1 <= r.i0 ? 1 : 2;
  }
  // A shared block's one ring message: its keys and values side by side in the slot.
  std::uint32_t kv_message_bytes(std::uint32_t slot, std::uint64_t n) const {
    return L_.v[slot] - L_.k[slot] + static_cast<std::uint32_t>(n * dv_ * isa::dtype_size(a_.dtype));
  }
  std::uint32_t keys_of(const Pair& pr) const { return static_cast<std::uint32_t>(std::min(g_.bk, kv_end_ - pr.j * g_.bk)); }

  void prologue();
  void make_band(std::uint32_t dst, std::uint32_t rows_n, std::uint32_t cols_n, double shift);
  void fix(std::uint32_t v, double imm, std::uint32_t c, std::uint32_t n);
  void item(const Item& it);
  void load_q();
  void load_kv(std::uint64_t j);
  void load_kv_block(std::uint32_t slot, std::uint64_t k0, std::uint32_t rows_n);
  void pairs_of();
  void scores(std::size_t i);
  void softmax_pv(std::size_t i);
  void finish_blocks();

  const AttentionShape& a_;
  const AttentionPlan& p_;
  const Geometry& g_;
  const Layout& L_;
  const Work& w_;
  const KvSharing& sharing_;
  std::uint32_t core_;
  CoreStream add_;
  bool aligned_, half_;
  std::uint32_t d_, dv_;
  // The item being written: its query blocks, the keys they see, its pairs, and per block
  // whether a product has started and which maximum buffer is current.
  const Item* it_ = nullptr;
  std::vector<Rows> blocks_;
  std::uint64_t kv_end_ = 0, kv_blocks_ = 0;
  std::vector<Pair> pairs_;
  std::vector<bool> started_;
  std::vector<int> m_cur_;
};

// Constants (zeros, ones) and, causal, the positions and the full diagonal tile.
void AttentionCore::prologue() {
  add_(isa::VFill{.dtype = f32, .dst = L_.zero, .count = static_cast<std::uint32_t>(g_.bq), .value = 0});
  add_(isa::VFill{.dtype = f32, .dst = L_.one, .count = static_cast<std::uint32_t>(g_.bq), .value = 1});
  if (!a_.causal) return;
  add_(make_dma<isa::DmaLoad>(kTokPos, f32, band_arg(), 0, L_.pos_c, {static_cast<std::uint32_t>(g_.bk), 1, 1}, {1, 0, 0}));
  if (p_.grouped) {  // rows (head, position): the positions once per head
    add_(make_dma<isa::DmaLoad>(kTokPos, f32, band_arg(), 0, L_.pos_r,
                                {static_cast<std::uint32_t>(a_.q_len), static_cast<std::uint32_t>(g_.group), 1},
                                {1, 0, 0}));
  } else {
    add_(make_dma<isa::DmaLoad>(kTokPos, f32, band_arg(), 0, L_.pos_r, {static_cast<std::uint32_t>(g_.bq), 1, 1},
                                {1, 0, 0}));
  }
  add_(wait_on(kTokPos));
  if (aligned_) make_band(L_.diag, static_cast<std::uint32_t>(g_.bq), static_cast<std::uint32_t>(g_.bk), 0);
}

// The band tile of `rows` x `cols` scores whose rows start `shift` positions after their
// keys: column c (key) visible to row r exactly when c - r <= shift; made on the chip as
// log(c - r <= shift), 0 or -inf.
void AttentionCore::make_band(std::uint32_t dst, std::uint32_t rows_n, std::uint32_t cols_n, double shift) {
  const std::uint32_t count = rows_n * cols_n;
  add_(isa::VFill{.dtype = f32, .dst = dst, .count = count, .value = 0});
  add_(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .bcast = isa::Broadcast::row, .a = dst, .b = L_.pos_c,
                    .dst = dst, .rows = rows_n, .cols = cols_n});
  add_(isa::VBinary{.op = isa::BinaryOp::sub, .dtype = f32, .bcast = isa::Broadcast::col, .a = dst, .b = L_.pos_r,
                    .dst = dst, .rows = rows_n, .cols = cols_n});
  add_(isa::VCompare{.op = isa::CompareOp::le, .dtype = f32, .bcast = isa::Broadcast::immediate, .a = dst,
                     .dst = L_.band_flag, .rows = rows_n, .cols = cols_n, .imm = shift});
  add_(isa::VConvert{.from = isa::DType::boolean, .to = f32, .src = L_.band_flag, .dst = dst, .count = count});
  add_(isa::VUnary{.op = isa::UnaryOp::log, .dtype = f32, .src = dst, .dst = dst, .count = count});
}

// v := (v == imm) ? c : v over n values.
void AttentionCore::fix(std::uint32_t v, double imm, std::uint32_t c, std::uint32_t n) {
  add_(isa::VCompare{.op = isa::CompareOp::eq, .dtype = f32, .bcast = isa::Broadcast::immediate, .a = v, .dst = L_.flag,
                     .rows = 1, .cols = n, .imm = imm});
  add_(isa::VSelect{.dtype = f32, .cond = L_.flag, .a = c, .b = v, .dst = v, .count = n});
}

// Key block j into its slot (read from DRAM by its loader, which sends it to the other
// sharers as soon as it lands), and the mask tiles of the blocks that see it.
void AttentionCore::load_kv(std::uint64_t j) {
  const auto slot = static_cast<std::uint32_t>(j % 2);
  const std::uint64_t k0 = j * g_.bk, n = std::min(g_.bk, kv_end_ - k0);
  const std::vector<std::uint16_t> with = sharing_.sharers(core_, j);
  const bool loads = KvSharing::loader(core_, j, with) == core_;
  if (loads) load_kv_block(slot, k0, static_cast<std::uint32_t>(n));
  // A shared block goes to the others as soon as it lands (the send waits for the loads'
  // bytes in the scratchpad, not for this core's turn to use them).
  if (!with.empty() && loads) {
    for (const std::uint16_t other : with) {
      if (other != core_) {
        add_(isa::RingSend{.token = kTokRing, .dst_core = other, .tag = static_cast<std::uint16_t>(j),
                           .sp_addr = L_.k[slot], .bytes = kv_message_bytes(slot, n)});
      }
    }
  }
  if (!a_.mask) return;
  for (std::size_t s = 0; s < blocks_.size(); ++s) {
    const Rows& r = blocks_[s];
    if (visibility(r, k0, n) == 0) continue;
    const std::uint64_t off = r.batch * a_.mask_stride[0] + r.head * a_.mask_stride[1] + r.i0 * a_.mask_stride[2] + k0;
    add_(make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(kTokTile + slot), *a_.mask, mask_arg(),
                                off * isa::dtype_size(*a_.mask), L_.sub[s].mask[slot],
                                {static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(r.positions),
                                 static_cast<std::uint32_t>(r.heads)},
                                {1, a_.mask_stride[2], a_.mask_stride[1]}));
  }
}

// The DMAs of a key block's keys and values: rows of the tensors, or (paged) the block's
// pool rows, then each head's rows gathered by them. (The slots buffer is reused at once:
// the gathers read their indices when issued.)
void AttentionCore::load_kv_block(std::uint32_t slot, std::uint64_t k0, std::uint32_t rows_n) {
  const Item& it = *it_;
  const std::uint64_t esize = isa::dtype_size(a_.dtype);
  if (a_.paged) {
    const std::uint64_t pitch = a_.slots_stride != 0 ? a_.slots_stride : a_.kv_len;
    add_(make_dma<isa::DmaLoad>(kTokSlots, isa::DType::int32, slots_arg(), (it.batch * pitch + k0) * 4, L_.slots,
                                {rows_n, 1, 1}, {1, 0, 0}));
    add_(wait_on(kTokSlots));
    add_(isa::DmaGather{.token = static_cast<std::uint8_t>(kTokK + slot), .arg = 1, .index_sp = L_.slots,
                        .count = rows_n, .sp_addr = L_.k[slot], .row_bytes = static_cast<std::uint32_t>(d_ * esize),
                        .offset = it.kv_head * static_cast<std::uint64_t>(a_.k_stride[1]) * esize, .rows = a_.pool_slots,
                        .row_stride = static_cast<std::uint64_t>(a_.k_stride[2]) * esize});
    add_(isa::DmaGather{.token = static_cast<std::uint8_t>(kTokV + slot), .arg = 2, .index_sp = L_.slots,
                        .count = rows_n, .sp_addr = L_.v[slot], .row_bytes = static_cast<std::uint32_t>(dv_ * esize),
                        .offset = it.kv_head * static_cast<std::uint64_t>(a_.v_stride[1]) * esize, .rows = a_.pool_slots,
                        .row_stride = static_cast<std::uint64_t>(a_.v_stride[2]) * esize});
    return;
  }
  const std::uint64_t k_off = it.batch * a_.k_stride[0] + it.kv_head * a_.k_stride[1] + k0 * a_.k_stride[2];
  const std::uint64_t v_off = it.batch * a_.v_stride[0] + it.kv_head * a_.v_stride[1] + k0 * a_.v_stride[2];
  add_(make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(kTokK + slot), a_.dtype, 1, k_off * esize, L_.k[slot],
                              {d_, rows_n, 1}, {1, a_.k_stride[2], 0}));
  add_(make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(kTokV + slot), a_.dtype, 2, v_off * esize, L_.v[slot],
                              {dv_, rows_n, 1}, {1, a_.v_stride[2], 0}));
}

// The query rows of the item's blocks (once the previous item's stores, which read the
// output buffers, are done).
void AttentionCore::load_q() {
  add_(wait_on(kTokOut, kTokLse));
  for (std::size_t s = 0; s < blocks_.size(); ++s) {
    const Rows& r = blocks_[s];
    const std::uint64_t off = r.batch * a_.q_stride[0] + r.head * a_.q_stride[1] + r.i0 * a_.q_stride[2];
    add_(make_dma<isa::DmaLoad>(kTokQ, a_.dtype, 0, off * isa::dtype_size(a_.dtype), L_.sub[s].q,
                                {d_, static_cast<std::uint32_t>(r.positions), static_cast<std::uint32_t>(r.heads)},
                                {1, a_.q_stride[2], a_.q_stride[1]}));
  }
}

// The (key block, query block) pairs with visible keys, key blocks in order.
void AttentionCore::pairs_of() {
  pairs_.clear();
  for (std::uint64_t j = 0; j < kv_blocks_; ++j) {
    const std::size_t begin = pairs_.size();
    for (std::size_t s = 0; s < blocks_.size(); ++s) {
      if (visibility(blocks_[s], j * g_.bk, std::min(g_.bk, kv_end_ - j * g_.bk)) != 0) pairs_.push_back({j, s});
    }
    if (pairs_.size() > begin) {
      pairs_[begin].first = true;
      pairs_.back().last = true;
    }
  }
}

// Pair i's scores, once its key block is here (a shared block arrives from its loader).
void AttentionCore::scores(std::size_t i) {
  const Pair& pr = pairs_[i];
  const auto slot = static_cast<std::uint32_t>(pr.j % 2);
  const std::uint32_t n = keys_of(pr);
  if (pr.first) {
    const std::vector<std::uint16_t> with = sharing_.sharers(core_, pr.j);
    const std::uint16_t loader = KvSharing::loader(core_, pr.j, with);
    if (!with.empty() && loader != core_) {
      add_(isa::RingRecv{.token = kTokRing, .src_core = loader, .tag = static_cast<std::uint16_t>(pr.j),
                         .sp_addr = L_.k[slot], .bytes = kv_message_bytes(slot, n)});
    }
    add_(wait_on(kTokK + slot, kTokTile + slot));
  }
  add_(isa::Matmul{.a = L_.sub[pr.s].q, .b = L_.k[slot], .c = L_.s[i % 2], .m = blocks_[pr.s].count(), .n = n, .k = d_,
                   .lda = d_, .ldb = d_, .ldc = n, .in = a_.dtype, .out = f32, .trans_b = true});
}

// Pair i's scores masked, turned into probabilities against the running maximum (the old
// terms corrected), and multiplied by the values into the block's output.
void AttentionCore::softmax_pv(std::size_t i) {
  const Pair& pr = pairs_[i];
  const auto slot = static_cast<std::uint32_t>(pr.j % 2);
  const std::uint64_t k0 = pr.j * g_.bk;
  const std::uint32_t n = keys_of(pr);
  const std::uint32_t S = L_.s[i % 2], P = L_.p[i % 2];
  const std::size_t s = pr.s;
  const Rows& r = blocks_[s];
  const auto& sb = L_.sub[s];
  const std::uint32_t rn = r.count(), count = rn * n;
  if (a_.mask) {
    std::uint32_t mf = sb.mask[slot];
    if (*a_.mask != f32) {
      add_(isa::VConvert{.from = *a_.mask, .to = f32, .src = mf, .dst = L_.mask32, .count = count});
      mf = L_.mask32;
    }
    add_(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .a = S, .b = mf, .dst = S, .rows = rn, .cols = n});
  }
  if (visibility(r, k0, n) == 2) {
    std::uint32_t band = L_.diag;
    if (!aligned_ || rn != g_.bq || n != g_.bk) {
      make_band(L_.band, rn, n, static_cast<double>(r.i0) - static_cast<double>(k0));
      band = L_.band;
    }
    add_(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .a = S, .b = band, .dst = S, .rows = rn, .cols = n});
  }
  const std::uint32_t m_old = sb.m[m_cur_[s]], m_new = sb.m[1 - m_cur_[s]];
  add_(isa::VReduce{.op = isa::ReduceOp::max, .in = f32, .out = f32, .axis = 1, .src = S, .dst = L_.rowmax, .rows = rn,
                    .cols = n});
  add_(isa::VBinary{.op = isa::BinaryOp::max, .dtype = f32, .a = m_old, .b = L_.rowmax, .dst = m_new, .rows = 1, .cols = rn});
  // The shift: the new maximum, or 0 for rows that have seen only masked keys.
  add_(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = f32, .src = m_new, .dst = sb.mu, .count = rn});
  fix(sb.mu, -kInf, L_.zero, rn);
  add_(isa::VBinary{.op = isa::BinaryOp::sub, .dtype = f32, .bcast = isa::Broadcast::col, .a = S, .b = sb.mu, .dst = S,
                    .rows = rn, .cols = n});
  add_(isa::VUnary{.op = isa::UnaryOp::exp, .dtype = f32, .src = S, .dst = S, .count = count});
  add_(isa::VReduce{.op = isa::ReduceOp::sum, .in = f32, .out = f32, .axis = 1, .src = S,
                    .dst = started_[s] ? L_.rowsum : sb.l, .rows = rn, .cols = n});
  if (started_[s]) {
    // alpha = e^(m_old - shift): the old terms' correction.
    add_(isa::VBinary{.op = isa::BinaryOp::sub, .dtype = f32, .a = m_old, .b = sb.mu, .dst = L_.alpha, .rows = 1,
                      .cols = rn});
    add_(isa::VUnary{.op = isa::UnaryOp::exp, .dtype = f32, .src = L_.alpha, .dst = L_.alpha, .count = rn});
    add_(isa::VBinary{.op = isa::BinaryOp::mul, .dtype = f32, .a = sb.l, .b = L_.alpha, .dst = sb.l, .rows = 1, .cols = rn});
    add_(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .a = sb.l, .b = L_.rowsum, .dst = sb.l, .rows = 1, .cols = rn});
    add_(isa::VBinary{.op = isa::BinaryOp::mul, .dtype = f32, .bcast = isa::Broadcast::col, .a = sb.o, .b = L_.alpha,
                      .dst = sb.o, .rows = rn, .cols = dv_});
  }
  round_to(add_, f32, a_.dtype, S, P, count);  // (fp32: P is S)
  if (pr.first) add_(wait_on(kTokV + slot));
  add_(isa::Matmul{.a = P, .b = L_.v[slot], .c = sb.o, .m = rn, .n = dv_, .k = n, .lda = n, .ldb = dv_, .ldc = dv_,
                   .in = a_.dtype, .out = f32, .accumulate = started_[s]});
  started_[s] = true;
  m_cur_[s] = 1 - m_cur_[s];
}

// out = O / l (0 for rows that saw no key), logsumexp = shift + log l, both stored.
void AttentionCore::finish_blocks() {
  const std::uint64_t out_row = a_.q_heads * a_.value_dim, out_batch = a_.q_len * out_row;
  for (std::size_t s = 0; s < blocks_.size(); ++s) {
    const Rows& r = blocks_[s];
    const auto& sb = L_.sub[s];
    const std::uint32_t rn = r.count();
    if (!started_[s]) {  // (no visible key: only when causal and kv_len is 0, which is refused)
      add_(isa::VFill{.dtype = f32, .dst = sb.o, .count = rn * dv_, .value = 0});
      add_(isa::VFill{.dtype = f32, .dst = sb.l, .count = rn, .value = 0});
      add_(isa::VFill{.dtype = f32, .dst = sb.mu, .count = rn, .value = 0});
    }
    add_(isa::VUnary{.op = isa::UnaryOp::log, .dtype = f32, .src = sb.l, .dst = L_.tmp, .count = rn});
    add_(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .a = sb.mu, .b = L_.tmp, .dst = sb.lse, .rows = 1, .cols = rn});
    fix(sb.l, 0, L_.one, rn);
    add_(isa::VBinary{.op = isa::BinaryOp::div, .dtype = f32, .bcast = isa::Broadcast::col, .a = sb.o, .b = sb.l,
                      .dst = sb.o, .rows = rn, .cols = dv_});
    round_to(add_, f32, a_.dtype, sb.o, sb.out, rn * dv_);  // (fp32: out is o)
    const std::uint64_t out_off = r.batch * out_batch + r.i0 * out_row + r.head * a_.value_dim;
    add_(make_dma<isa::DmaStore>(kTokOut, a_.dtype, 3, out_off * isa::dtype_size(a_.dtype), sb.out,
                                 {dv_, static_cast<std::uint32_t>(r.positions), static_cast<std::uint32_t>(r.heads)},
                                 {1, static_cast<std::int64_t>(out_row), static_cast<std::int64_t>(a_.value_dim)}));
    const std::uint64_t lse_off = (r.batch * a_.q_heads + r.head) * a_.q_len + r.i0;
    add_(make_dma<isa::DmaStore>(kTokLse, f32, 4, lse_off * 4, sb.lse,
                                 {static_cast<std::uint32_t>(r.positions), static_cast<std::uint32_t>(r.heads), 1},
                                 {1, static_cast<std::int64_t>(a_.q_len), 0}));
  }
}

void AttentionCore::item(const Item& it) {
  it_ = &it;
  blocks_ = g_.blocks_of(it);
  kv_end_ = g_.kv_end_of(blocks_);
  kv_blocks_ = (kv_end_ + g_.bk - 1) / g_.bk;
  load_q();
  if (kv_blocks_ > 0) load_kv(0);
  add_(wait_on(kTokQ));
  // Fold the scale into the query rows (once per block, in fp32, one rounding).
  for (std::size_t s = 0; s < blocks_.size(); ++s) {
    const std::uint32_t n = blocks_[s].count() * d_;
    const auto& q = L_.sub[s].q;
    if (half_) add_(isa::VConvert{.from = a_.dtype, .to = f32, .src = q, .dst = L_.s[0], .count = n});
    add_(isa::VBinary{.op = isa::BinaryOp::mul, .dtype = f32, .bcast = isa::Broadcast::immediate,
                      .a = half_ ? L_.s[0] : q, .dst = half_ ? L_.s[0] : q, .rows = 1, .cols = n, .imm = a_.scale});
    if (half_) add_(isa::VConvert{.from = f32, .to = a_.dtype, .src = L_.s[0], .dst = q, .count = n});
    add_(isa::VFill{.dtype = f32, .dst = L_.sub[s].m[0], .count = blocks_[s].count(), .value = -kInf});
  }
  // The pairs run as a pipeline two deep: pair i + 2's scores are issued to the array
  // right after pair i's P V multiply, so the vector unit's softmax of pair i + 1 runs
  // while the array computes (the core's units overlap; scratchpad dependencies order
  // them). Key block j + 2 loads into j's slot once j's last pair is issued.
  pairs_of();
  if (kv_blocks_ > 1) {
    add_(wait_on(kTokRing));
    load_kv(1);
  }
  started_.assign(blocks_.size(), false);
  m_cur_.assign(blocks_.size(), 0);
  for (std::size_t i = 0; i < std::min<std::size_t>(2, pairs_.size()); ++i) scores(i);
  for (std::size_t i = 0; i < pairs_.size(); ++i) {
    softmax_pv(i);
    const Pair& pr = pairs_[i];
    if (pr.last && pr.j + 2 < kv_blocks_) {
      add_(wait_on(kTokRing));  // (the slot's last send has left)
      load_kv(pr.j + 2);
    }
    if (i + 2 < pairs_.size()) scores(i + 2);
  }
  finish_blocks();
}

}  // namespace

std::vector<std::uint8_t> compile_attention(const AttentionShape& a, const Target& target, const std::string& name) {
  const AttentionPlan p = plan_attention(a, target);
  const Geometry g(a, p);
  const Layout l = layout(a, p.grouped, g.bq, g.bk, p.sub_blocks);
  const Work w = spread_work(g);
  const KvSharing sharing(g, w);
  isa::ProgramBuilder b(name, p.cores);
  for (std::uint32_t core = 0; core < p.cores; ++core) AttentionCore(g, l, w, sharing, b, core).emit();
  return b.build();
}

}  // namespace spyre::compiler
