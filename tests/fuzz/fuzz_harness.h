// A deterministic, seeded mutational fuzzer (g++ only; no libFuzzer needed).
//
// A target defines `int fuzz_one(std::span<const std::uint8_t>)` (0 = handled, any
// other value = a finding) and optionally `fuzz_dictionary()` and `fuzz_write_seeds()`.
// The harness runs every seed in the corpus folder, then mutates them (bit flips,
// interesting integers, dictionary tokens, inserts, deletions, splices) with a PRNG
// seeded by --seed, until --seconds or --runs is reached. Same seed and corpus, same
// inputs, every run.
//
// A crash, abort, sanitizer report or hang (--timeout per input) writes the input to
// `fuzz-<target>-crash.bin` (or the --artifact path) before the process dies, so it
// can be replayed: `<fuzzer> --replay FILE`.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

// Implemented by each target.
int fuzz_one(std::span<const std::uint8_t> input);
// Tokens worth inserting (keys, numbers at the edges); may be empty.
std::vector<std::string> fuzz_dictionary();
// Writes the target's seed inputs (the committed corpus is this output).
std::vector<std::vector<std::uint8_t>> fuzz_seeds();
// The target's name, for messages and artifacts.
const char* fuzz_target_name();
