// Instruction <-> 64-byte word. Field offsets are listed once per instruction in a
// `fields` function that both directions walk, so encoder and decoder cannot disagree.
#include <bit>
#include <cstring>
#include <string>
#include <type_traits>

#include "spyre/isa/program.h"

namespace spyre::isa {
namespace {

static_assert(std::endian::native == std::endian::little, "the encoding is little-endian");

// Writes fields into a word.
class Put {
 public:
  explicit Put(Word& w) : w_(w) {}
  template <class T>
  void operator()(std::size_t offset, const T& v) {
    if constexpr (std::is_enum_v<T>) {
      const auto u = static_cast<std::underlying_type_t<T>>(v);
      std::memcpy(w_.data() + offset, &u, sizeof u);
    } else if constexpr (std::is_same_v<T, bool>) {
      w_[offset] = v ? 1 : 0;
    } else {
      std::memcpy(w_.data() + offset, &v, sizeof v);
    }
  }
  void flag(std::size_t offset, int bit, bool v) {
    if (v) w_[offset] = static_cast<std::uint8_t>(w_[offset] | (1u << bit));
  }
  bool ok() const { return true; }

 private:
  Word& w_;
};

// Reads fields from a word; enum values out of range make the decode fail.
class Get {
 public:
  explicit Get(std::span<const std::uint8_t, kInstructionBytes> w) : w_(w) {}
  template <class T>
  void operator()(std::size_t offset, T& v) {
    if constexpr (std::is_enum_v<T>) {
      std::underlying_type_t<T> u{};
      std::memcpy(&u, w_.data() + offset, sizeof u);
      if (u >= enum_count(v)) {
        error_ = "invalid " + std::string(enum_name(v)) + " value " + std::to_string(u);
      }
      v = static_cast<T>(u);
    } else if constexpr (std::is_same_v<T, bool>) {
      v = w_[offset] != 0;
    } else {
      std::memcpy(&v, w_.data() + offset, sizeof v);
    }
  }
  void flag(std::size_t offset, int bit, bool& v) { v = (w_[offset] >> bit) & 1u; }
  const std::string& error() const { return error_; }

 private:
  static std::uint8_t enum_count(DType) { return kNumDTypes; }
  static std::uint8_t enum_count(UnaryOp) { return kNumUnaryOps; }
  static std::uint8_t enum_count(BinaryOp) { return kNumBinaryOps; }
  static std::uint8_t enum_count(CompareOp) { return kNumCompareOps; }
  static std::uint8_t enum_count(ReduceOp) { return kNumReduceOps; }
  static std::uint8_t enum_count(Broadcast) { return kNumBroadcasts; }
  static std::uint8_t enum_count(RandomDist) { return kNumRandomDists; }
  static const char* enum_name(DType) { return "dtype"; }
  static const char* enum_name(UnaryOp) { return "unary op"; }
  static const char* enum_name(BinaryOp) { return "binary op"; }
  static const char* enum_name(CompareOp) { return "compare op"; }
  static const char* enum_name(ReduceOp) { return "reduce op"; }
  static const char* enum_name(Broadcast) { return "broadcast mode"; }
  static const char* enum_name(RandomDist) { return "random distribution"; }

  std::span<const std::uint8_t, kInstructionBytes> w_;
  std::string error_;
};

// Field layouts. Byte 0 is always the opcode.
template <class F, class D>
void fields(F& f, D& d) requires std::is_base_of_v<Dma, std::remove_const_t<D>> {
  f(1, d.token);
  f(2, d.dtype);
  f(4, d.arg);
  f(8, d.offset);
  f(16, d.sp_addr);
  for (int i = 0; i < 3; ++i) f(20 + 4 * i, d.shape[i]);
  for (int i = 0; i < 3; ++i) f(32 + 8 * i, d.mem_stride[i]);
  for (int i = 0; i < 2; ++i) f(56 + 4 * i, d.sp_stride[i]);
}
template <class F, class D>
void fields(F& f, D& d) requires std::is_same_v<std::remove_const_t<D>, Wait> {
  f(2, d.token_mask);
}
template <class F, class D>
void fields(F& f, D& d) requires std::is_same_v<std::remove_const_t<D>, Matmul> {
  f(1, d.in);
  f(2, d.out);
  f.flag(3, 0, d.trans_a);
  f.flag(3, 1, d.trans_b);
  f.flag(3, 2, d.accumulate);
  f(4, d.a);
  f(8, d.b);
  f(12, d.c);
  f(16, d.m);
  f(20, d.n);
  f(24, d.k);
  f(28, d.lda);
  f(32, d.ldb);
  f(36, d.ldc);
}
template <class F, class D>
void fields(F& f, D& d) requires std::is_same_v<std::remove_const_t<D>, VUnary> {
  f(1, d.op);
  f(2, d.dtype);
  f(4, d.src);
  f(8, d.dst);
  f(12, d.count);
}
template <class F, class D>
void fields(F& f, D& d)
  requires(std::is_same_v<std::remove_const_t<D>, VBinary> || std::is_same_v<std::remove_const_t<D>, VCompare>)
{
  f(1, d.op);
  f(2, d.dtype);
  f(3, d.bcast);
  f(4, d.a);
  f(8, d.b);
  f(12, d.dst);
  f(16, d.rows);
  f(20, d.cols);
  f(24, d.imm);
}
template <class F, class D>
void fields(F& f, D& d) requires std::is_same_v<std::remove_const_t<D>, VSelect> {
  f(2, d.dtype);
  f(4, d.cond);
  f(8, d.a);
  f(12, d.b);
  f(16, d.dst);
  f(20, d.count);
}
template <class F, class D>
void fields(F& f, D& d) requires std::is_same_v<std::remove_const_t<D>, VReduce> {
  f(1, d.op);
  f(2, d.in);
  f(3, d.out);
  f(4, d.axis);
  f(8, d.src);
  f(12, d.dst);
  f(16, d.rows);
  f(20, d.cols);
}
template <class F, class D>
void fields(F& f, D& d) requires std::is_same_v<std::remove_const_t<D>, VConvert> {
  f(1, d.from);
  f(2, d.to);
  f(4, d.src);
  f(8, d.dst);
  f(12, d.count);
}
template <class F, class D>
void fields(F& f, D& d) requires std::is_same_v<std::remove_const_t<D>, VFill> {
  f(2, d.dtype);
  f(4, d.dst);
  f(8, d.count);
  f(16, d.value);
}
template <class F, class D>
void fields(F& f, D& d) requires std::is_same_v<std::remove_const_t<D>, VTranspose> {
  f(2, d.dtype);
  f(4, d.src);
  f(8, d.dst);
  f(12, d.rows);
  f(16, d.cols);
}
template <class F, class D>
void fields(F& f, D& d) requires std::is_same_v<std::remove_const_t<D>, VRandom> {
  f(2, d.dist);
  f(4, d.dst);
  f(8, d.cols);
  f(12, d.rows);
  f(16, d.planes);
  f(20, d.state);
  f(24, d.start);
  f(32, d.row_step);
  f(40, d.plane_step);
}
template <class F, class D>
void fields(F& f, D& d) requires std::is_same_v<std::remove_const_t<D>, RingSend> {
  f(1, d.token);
  f(2, d.dst_core);
  f(4, d.tag);
  f(8, d.sp_addr);
  f(12, d.bytes);
}
template <class F, class D>
void fields(F& f, D& d) requires std::is_same_v<std::remove_const_t<D>, RingRecv> {
  f(1, d.token);
  f(2, d.src_core);
  f(4, d.tag);
  f(6, d.forward_to);
  f(8, d.sp_addr);
  f(12, d.bytes);
}
template <class F, class D>
void fields(F& f, D& d) requires std::is_same_v<std::remove_const_t<D>, DmaGather> {
  f(1, d.token);
  f.flag(2, 0, d.wide_index);
  f.flag(2, 1, d.scatter);
  f.flag(2, 2, d.wrap);
  f(4, d.arg);
  f(8, d.index_sp);
  f(12, d.count);
  f(16, d.sp_addr);
  f(20, d.row_bytes);
  f(24, d.offset);
  f(32, d.rows);
  f(40, d.row_stride);
}
template <class F, class D>
void fields(F& f, D& d) requires std::is_same_v<std::remove_const_t<D>, Barrier> {
  f(2, d.id);
  f(4, d.count);
}
template <class F, class D>
void fields(F&, D&) requires(std::is_same_v<std::remove_const_t<D>, End> || std::is_same_v<std::remove_const_t<D>, Nop>)
{}

template <std::size_t I = 0>
Decoded decode_as(std::uint8_t opcode, std::span<const std::uint8_t, kInstructionBytes> word) {
  if constexpr (I < std::variant_size_v<Instruction>) {
    if (opcode != I) return decode_as<I + 1>(opcode, word);
    std::variant_alternative_t<I, Instruction> value{};
    Get get(word);
    fields(get, value);
    if (!get.error().empty()) return {std::nullopt, get.error()};
    return {Instruction(std::in_place_index<I>, value), {}};
  } else {
    return {std::nullopt, "unknown opcode " + std::to_string(opcode)};
  }
}

}  // namespace

Word encode(const Instruction& inst) {
  Word w{};
  w[0] = static_cast<std::uint8_t>(inst.index());
  Put put(w);
  std::visit([&](const auto& value) { fields(put, value); }, inst);
  return w;
}

Decoded decode(std::span<const std::uint8_t, kInstructionBytes> word) {
  Decoded d = decode_as(word[0], word);
  if (!d.inst) return d;
  // Reserved bytes and unknown flag bits must be zero: the word must re-encode to itself.
  const Word canonical = encode(*d.inst);
  if (std::memcmp(canonical.data(), word.data(), kInstructionBytes) != 0) {
    return {std::nullopt, "reserved bits set in a " + std::string(to_string(static_cast<Opcode>(word[0]))) +
                              " instruction"};
  }
  return d;
}

}  // namespace spyre::isa
