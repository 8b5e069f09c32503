// Binary encoding of instructions and programs; validation; building; disassembly.
//
// Program blob (little-endian, immutable once built):
//    0  char[8]   magic "SPYREPRG"
//    8  u32       ISA version (kIsaVersion)
//   12  u32       number of instruction streams S (stream i runs on the i-th core of a launch)
//   16  u32       name length L
//   20  u32       byte offset of the instruction area (a multiple of 64)
//   24  u64       total size in bytes
//   32  S x {u32 first, u32 count}   each stream's instructions (indices into the area)
//   ..  name (L bytes), zero padding to a multiple of 64
//   ..  instructions, kInstructionBytes each
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "spyre/isa/isa.h"

namespace spyre::isa {

using Word = std::array<std::uint8_t, kInstructionBytes>;

Word encode(const Instruction& inst);

// Decodes one word. Unknown opcodes or enum values, and any set reserved byte (the
// word is not the canonical encoding of what it decodes to), give an error.
struct Decoded {
  std::optional<Instruction> inst;
  std::string error;  // set when !inst
};
Decoded decode(std::span<const std::uint8_t, kInstructionBytes> word);

// What a program is checked against: the target core's resources and the launch shape.
struct Limits {
  std::uint32_t scratchpad_bytes = 0;
  std::uint32_t num_streams = 0;  // ring peers and barrier counts must fit
  std::uint32_t max_args = kMaxArgs;
};

// Checks one decoded instruction against the limits: operand ranges inside the
// scratchpad, element alignment, dtype combinations, token and core indices.
// Returns the reason it is invalid, or nothing.
std::optional<std::string> check(const Instruction& inst, const Limits& limits);

// The device bytes a DMA touches, relative to its argument + offset: [lo, lo + extent)
// (lo < 0 when a device stride is negative). Nothing when the strides reach past 64
// bits, which check() refuses.
struct DmaFootprint {
  std::int64_t lo = 0;
  std::uint64_t extent = 0;
};
std::optional<DmaFootprint> dma_footprint(const Dma& d);

// The scratchpad bytes an instruction reads and writes, [lo, hi) each (empty ranges
// have lo == hi): what a core's scoreboard orders its units' instructions by. For an
// instruction check() accepts; instructions that touch no scratchpad have none.
struct SpRange {
  std::uint64_t lo = 0, hi = 0;
  bool empty() const { return lo >= hi; }
  bool overlaps(const SpRange& o) const { return !empty() && !o.empty() && lo < o.hi && o.lo < hi; }
};
struct SpAccess {
  std::array<SpRange, 3> reads{};
  SpRange write{};
};
SpAccess scratchpad_access(const Instruction& inst);
// The elements a binary operand b spans under `bcast` for a rows x cols operation
// (0 for an immediate).
std::uint64_t broadcast_elements(Broadcast bcast, std::uint64_t rows, std::uint64_t cols);

// A malformed program: the reason, and where (stream and instruction index) when the
// fault is in an instruction.
class ProgramError : public std::runtime_error {
 public:
  ProgramError(std::string reason, std::optional<std::uint32_t> stream = std::nullopt,
               std::optional<std::uint32_t> pc = std::nullopt);
  const std::string& reason() const { return reason_; }
  std::optional<std::uint32_t> stream() const { return stream_; }
  std::optional<std::uint32_t> pc() const { return pc_; }

 private:
  std::string reason_;
  std::optional<std::uint32_t> stream_, pc_;
};

// A program blob whose header and stream table are well formed. Instructions are
// decoded on demand (cores decode as they execute).
class Program {
 public:
  // Checks the header and stream table; throws ProgramError.
  explicit Program(std::vector<std::uint8_t> bytes);

  // Also checks every instruction against `limits` and that each stream ends with
  // END; throws ProgramError naming stream and pc. This is what a load does.
  void validate(const Limits& limits) const;

  const std::string& name() const { return name_; }
  std::uint32_t num_streams() const { return static_cast<std::uint32_t>(streams_.size()); }
  std::uint32_t stream_length(std::uint32_t stream) const { return streams_.at(stream).count; }
  std::span<const std::uint8_t, kInstructionBytes> word(std::uint32_t stream, std::uint32_t pc) const;
  Decoded decode_at(std::uint32_t stream, std::uint32_t pc) const { return decode(word(stream, pc)); }
  const std::vector<std::uint8_t>& bytes() const { return bytes_; }

 private:
  struct Stream {
    std::uint32_t first, count;
  };
  std::vector<std::uint8_t> bytes_;
  std::string name_;
  std::uint32_t instr_offset_ = 0;
  std::vector<Stream> streams_;
};

class ProgramBuilder {
 public:
  ProgramBuilder(std::string name, std::uint32_t num_streams);
  ProgramBuilder& add(std::uint32_t stream, const Instruction& inst);
  std::uint32_t num_streams() const { return static_cast<std::uint32_t>(streams_.size()); }
  // Appends END to every stream that does not already end with one.
  std::vector<std::uint8_t> build() const;

 private:
  std::string name_;
  std::vector<std::vector<Word>> streams_;
};

std::string disassemble(const Instruction& inst);
// The whole program, one instruction per line, grouped by stream.
std::string disassemble(const Program& program);

}  // namespace spyre::isa
