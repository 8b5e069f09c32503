#include <cstring>
#include <string>

#include "spyre/isa/program.h"

namespace spyre::isa {
namespace {

constexpr char kMagic[8] = {'S', 'P', 'Y', 'R', 'E', 'P', 'R', 'G'};
constexpr std::size_t kHeaderBytes = 32;
constexpr std::size_t kStreamEntryBytes = 8;

template <class T>
T load(const std::vector<std::uint8_t>& b, std::size_t offset) {
  T v;
  std::memcpy(&v, b.data() + offset, sizeof v);
  return v;
}

template <class T>
void store(std::vector<std::uint8_t>& b, std::size_t offset, T v) {
  std::memcpy(b.data() + offset, &v, sizeof v);
}

std::size_t round_up(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }

std::string location_prefix(std::optional<std::uint32_t> stream, std::optional<std::uint32_t> pc) {
  if (!stream) return {};
  if (!pc) return "stream " + std::to_string(*stream) + ": ";
  return "stream " + std::to_string(*stream) + " pc " + std::to_string(*pc) + ": ";
}

}  // namespace

ProgramError::ProgramError(std::string reason, std::optional<std::uint32_t> stream,
                           std::optional<std::uint32_t> pc)
    : std::runtime_error(location_prefix(stream, pc) + reason), reason_(std::move(reason)), stream_(stream), pc_(pc) {}

Program::Program(std::vector<std::uint8_t> bytes) : bytes_(std::move(bytes)) {
  if (bytes_.size() < kHeaderBytes) {
    throw ProgramError("program is " + std::to_string(bytes_.size()) + " bytes, shorter than its " +
                       std::to_string(kHeaderBytes) + "-byte header");
  }
  if (std::memcmp(bytes_.data(), kMagic, sizeof kMagic) != 0) {
    throw ProgramError("not a spyre program (bad magic)");
  }
  const auto version = load<std::uint32_t>(bytes_, 8);
  if (version != kIsaVersion) {
    throw ProgramError("ISA version " + std::to_string(version) + " is not the supported version " +
                       std::to_string(kIsaVersion));
  }
  const auto num_streams = load<std::uint32_t>(bytes_, 12);
  const auto name_len = load<std::uint32_t>(bytes_, 16);
  instr_offset_ = load<std::uint32_t>(bytes_, 20);
  const auto total = load<std::uint64_t>(bytes_, 24);
  if (total != bytes_.size()) {
    throw ProgramError("header says " + std::to_string(total) + " bytes, blob has " + std::to_string(bytes_.size()));
  }
  if (num_streams == 0 || num_streams > kMaxStreams) {
    throw ProgramError("stream count " + std::to_string(num_streams) + " is not in 1.." + std::to_string(kMaxStreams));
  }
  const std::uint64_t name_at = kHeaderBytes + std::uint64_t{num_streams} * kStreamEntryBytes;
  if (instr_offset_ % kInstructionBytes != 0 || instr_offset_ < name_at + name_len || instr_offset_ > total ||
      (total - instr_offset_) % kInstructionBytes != 0) {
    throw ProgramError("instruction area at byte " + std::to_string(instr_offset_) + " is misplaced or ragged");
  }
  name_.assign(reinterpret_cast<const char*>(bytes_.data() + name_at), name_len);
  const std::uint64_t instructions = (total - instr_offset_) / kInstructionBytes;
  streams_.resize(num_streams);
  for (std::uint32_t s = 0; s < num_streams; ++s) {
    const std::size_t at = kHeaderBytes + s * kStreamEntryBytes;
    streams_[s] = {load<std::uint32_t>(bytes_, at), load<std::uint32_t>(bytes_, at + 4)};
    if (streams_[s].count == 0 || std::uint64_t{streams_[s].first} + streams_[s].count > instructions) {
      throw ProgramError("stream table entry out of the instruction area", s);
    }
  }
}

std::span<const std::uint8_t, kInstructionBytes> Program::word(std::uint32_t stream, std::uint32_t pc) const {
  const Stream& s = streams_.at(stream);
  if (pc >= s.count) throw ProgramError("pc past the end of the stream", stream, pc);
  const std::size_t at = instr_offset_ + (std::size_t{s.first} + pc) * kInstructionBytes;
  return std::span<const std::uint8_t, kInstructionBytes>(bytes_.data() + at, kInstructionBytes);
}

void Program::validate(const Limits& limits) const {
  if (num_streams() > limits.num_streams) {
    throw ProgramError("program has " + std::to_string(num_streams()) + " streams, the launch has " +
                       std::to_string(limits.num_streams) + " cores");
  }
  for (std::uint32_t s = 0; s < num_streams(); ++s) {
    for (std::uint32_t pc = 0; pc < streams_[s].count; ++pc) {
      const Decoded d = decode_at(s, pc);
      if (!d.inst) throw ProgramError(d.error, s, pc);
      if (auto reason = check(*d.inst, limits)) {
        throw ProgramError(std::string(to_string(opcode_of(*d.inst))) + ": " + *reason, s, pc);
      }
    }
    const Decoded last = decode_at(s, streams_[s].count - 1);
    if (!std::holds_alternative<End>(*last.inst)) {
      throw ProgramError("stream does not end with END", s, streams_[s].count - 1);
    }
  }
}

ProgramBuilder::ProgramBuilder(std::string name, std::uint32_t num_streams)
    : name_(std::move(name)), streams_(num_streams) {
  if (num_streams == 0 || num_streams > kMaxStreams) {
    throw ProgramError("stream count " + std::to_string(num_streams) + " is not in 1.." + std::to_string(kMaxStreams));
  }
}

ProgramBuilder& ProgramBuilder::add(std::uint32_t stream, const Instruction& inst) {
  streams_.at(stream).push_back(encode(inst));
  return *this;
}

std::vector<std::uint8_t> ProgramBuilder::build() const {
  const Word end = encode(End{});
  std::vector<std::uint32_t> counts;
  std::size_t instructions = 0;
  for (const auto& s : streams_) {
    const bool ends = !s.empty() && s.back() == end;
    counts.push_back(static_cast<std::uint32_t>(s.size() + (ends ? 0 : 1)));
    instructions += counts.back();
  }
  const std::size_t name_at = kHeaderBytes + streams_.size() * kStreamEntryBytes;
  const std::size_t instr_at = round_up(name_at + name_.size(), kInstructionBytes);
  const std::size_t total = instr_at + instructions * kInstructionBytes;
  std::vector<std::uint8_t> b(total, 0);
  std::memcpy(b.data(), kMagic, sizeof kMagic);
  store<std::uint32_t>(b, 8, kIsaVersion);
  store<std::uint32_t>(b, 12, static_cast<std::uint32_t>(streams_.size()));
  store<std::uint32_t>(b, 16, static_cast<std::uint32_t>(name_.size()));
  store<std::uint32_t>(b, 20, static_cast<std::uint32_t>(instr_at));
  store<std::uint64_t>(b, 24, total);
  std::memcpy(b.data() + name_at, name_.data(), name_.size());
  std::uint32_t first = 0;
  std::size_t at = instr_at;
  for (std::size_t s = 0; s < streams_.size(); ++s) {
    store<std::uint32_t>(b, kHeaderBytes + s * kStreamEntryBytes, first);
    store<std::uint32_t>(b, kHeaderBytes + s * kStreamEntryBytes + 4, counts[s]);
    for (const Word& w : streams_[s]) {
      std::memcpy(b.data() + at, w.data(), kInstructionBytes);
      at += kInstructionBytes;
    }
    if (counts[s] != streams_[s].size()) {
      std::memcpy(b.data() + at, end.data(), kInstructionBytes);
      at += kInstructionBytes;
    }
    first += counts[s];
  }
  return b;
}

}  // namespace spyre::isa
