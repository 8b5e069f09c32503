#include "fuzz_harness.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#if defined(__SANITIZE_ADDRESS__) && __has_include(<sanitizer/common_interface_defs.h>)
#include <sanitizer/common_interface_defs.h>
#define SPYRE_FUZZ_SANITIZER 1
#endif

namespace {

namespace fs = std::filesystem;

// The input being run, for the crash handlers (async-signal-safe: plain write(2)).
const std::uint8_t* g_current = nullptr;
std::size_t g_current_size = 0;
char g_artifact[4096] = "fuzz-crash.bin";

void dump_current() {
  const int fd = ::open(g_artifact, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  std::size_t done = 0;
  while (done < g_current_size) {
    const ssize_t n = ::write(fd, g_current + done, g_current_size - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  const char msg[] = "\nfuzz: the input that failed is in ";
  (void)!::write(2, msg, sizeof msg - 1);
  (void)!::write(2, g_artifact, std::strlen(g_artifact));
  (void)!::write(2, "\n", 1);
}

void on_fatal_signal(int sig) {
  if (sig == SIGALRM) {
    const char msg[] = "\nfuzz: an input ran past the --timeout (a hang)\n";
    (void)!::write(2, msg, sizeof msg - 1);
  }
  dump_current();
  ::signal(sig == SIGALRM ? SIGABRT : sig, SIG_DFL);
  ::raise(sig == SIGALRM ? SIGABRT : sig);
}

void install_handlers() {
  for (const int sig : {SIGSEGV, SIGABRT, SIGFPE, SIGBUS, SIGILL, SIGALRM}) ::signal(sig, on_fatal_signal);
#ifdef SPYRE_FUZZ_SANITIZER
  __sanitizer_set_death_callback(dump_current);
#endif
}

std::vector<std::uint8_t> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Integers at the edges of what fields hold: sizes, strides, counts and addresses.
constexpr std::uint64_t kInteresting[] = {0,
                                          1,
                                          2,
                                          3,
                                          7,
                                          8,
                                          63,
                                          64,
                                          255,
                                          256,
                                          4095,
                                          4096,
                                          65535,
                                          65536,
                                          0x7fffffffull,
                                          0x80000000ull,
                                          0xffffffffull,
                                          0x100000000ull,
                                          1ull << 40,
                                          1ull << 62,
                                          0x7fffffffffffffffull,
                                          0x8000000000000000ull,
                                          0xfffffffffffff000ull,
                                          0xffffffffffffffffull};

class Mutator {
 public:
  Mutator(std::uint64_t seed, std::vector<std::string> dictionary)
      : rng_(seed), dictionary_(std::move(dictionary)) {}

  std::vector<std::uint8_t> mutate(const std::vector<std::vector<std::uint8_t>>& corpus) {
    std::vector<std::uint8_t> x = corpus[pick(corpus.size())];
    const std::size_t rounds = 1 + pick(8);
    for (std::size_t r = 0; r < rounds; ++r) step(x, corpus);
    if (x.size() > kMaxInput) x.resize(kMaxInput);
    return x;
  }

 private:
  static constexpr std::size_t kMaxInput = 1 << 20;

  std::size_t pick(std::size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }

  void step(std::vector<std::uint8_t>& x, const std::vector<std::vector<std::uint8_t>>& corpus) {
    switch (pick(dictionary_.empty() ? 8 : 10)) {
      case 0:  // flip a bit
        if (!x.empty()) x[pick(x.size())] ^= static_cast<std::uint8_t>(1u << pick(8));
        break;
      case 1:  // a random byte
        if (!x.empty()) x[pick(x.size())] = static_cast<std::uint8_t>(rng_());
        break;
      case 2:
      case 3: {  // an interesting integer, 1/2/4/8 bytes, at an aligned or any offset
        const std::size_t width = std::size_t{1} << pick(4);
        if (x.size() < width) break;
        std::size_t at = pick(x.size() - width + 1);
        if (pick(2) == 0) at -= at % width;
        std::uint64_t v = kInteresting[pick(std::size(kInteresting))];
        if (pick(4) == 0) v = ~v + 1;  // negated
        std::memcpy(x.data() + at, &v, width);
        break;
      }
      case 4: {  // insert random bytes
        const std::size_t at = pick(x.size() + 1), n = 1 + pick(16);
        std::vector<std::uint8_t> bytes(n);
        for (auto& b : bytes) b = static_cast<std::uint8_t>(rng_());
        x.insert(x.begin() + static_cast<long>(at), bytes.begin(), bytes.end());
        break;
      }
      case 5: {  // delete a range
        if (x.empty()) break;
        const std::size_t at = pick(x.size()), n = 1 + pick(std::min<std::size_t>(64, x.size() - at));
        x.erase(x.begin() + static_cast<long>(at), x.begin() + static_cast<long>(at + n));
        break;
      }
      case 6: {  // duplicate a range
        if (x.empty()) break;
        const std::size_t at = pick(x.size()), n = 1 + pick(std::min<std::size_t>(256, x.size() - at));
        const std::vector<std::uint8_t> copy(x.begin() + static_cast<long>(at), x.begin() + static_cast<long>(at + n));
        x.insert(x.begin() + static_cast<long>(pick(x.size() + 1)), copy.begin(), copy.end());
        break;
      }
      case 7: {  // splice: our head with another input's tail
        const auto& other = corpus[pick(corpus.size())];
        const std::size_t cut = pick(x.size() + 1), from = pick(other.size() + 1);
        x.resize(cut);
        x.insert(x.end(), other.begin() + static_cast<long>(from), other.end());
        break;
      }
      default: {  // a dictionary token, inserted or overwriting
        const std::string& t = dictionary_[pick(dictionary_.size())];
        const std::size_t at = pick(x.size() + 1);
        if (pick(2) == 0 || at + t.size() > x.size()) {
          x.insert(x.begin() + static_cast<long>(at), t.begin(), t.end());
        } else {
          std::copy(t.begin(), t.end(), x.begin() + static_cast<long>(at));
        }
        break;
      }
    }
  }

  std::mt19937_64 rng_;
  std::vector<std::string> dictionary_;
};

int run_one(const std::vector<std::uint8_t>& input, unsigned timeout) {
  g_current = input.data();
  g_current_size = input.size();
  ::alarm(timeout);
  const int rc = fuzz_one(input);
  ::alarm(0);
  if (rc != 0) {
    std::fprintf(stderr, "fuzz: %s reported a finding (%d)\n", fuzz_target_name(), rc);
    dump_current();
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{fmt::format("{}: a seeded mutational fuzzer (tests/README.md)", fuzz_target_name())};
  std::string corpus_dir, replay, write_seeds, artifact;
  double seconds = 20;
  std::uint64_t runs = 0, seed = 1;
  unsigned timeout = 20;
  app.add_option("corpus", corpus_dir, "folder of seed inputs (every file is one)");
  app.add_option("--seconds", seconds, "stop after this long (default 20)");
  app.add_option("--runs", runs, "stop after this many mutated inputs (0: no limit)");
  app.add_option("--seed", seed, "PRNG seed (default 1): the same seed gives the same inputs");
  app.add_option("--timeout", timeout, "seconds one input may take before it counts as a hang (default 20)");
  app.add_option("--artifact", artifact, "where the failing input is written (default fuzz-<target>-crash.bin)");
  app.add_option("--replay", replay, "run this one input and exit");
  app.add_option("--write-seeds", write_seeds, "write the target's seed inputs into this folder and exit");
  CLI11_PARSE(app, argc, argv);

  std::snprintf(g_artifact, sizeof g_artifact, "%s",
                artifact.empty() ? fmt::format("fuzz-{}-crash.bin", fuzz_target_name()).c_str() : artifact.c_str());
  if (!write_seeds.empty()) {
    fs::create_directories(write_seeds);
    const auto seeds = fuzz_seeds();
    for (std::size_t i = 0; i < seeds.size(); ++i) {
      std::ofstream(fs::path(write_seeds) / fmt::format("seed-{:03}", i), std::ios::binary)
          .write(reinterpret_cast<const char*>(seeds[i].data()), static_cast<std::streamsize>(seeds[i].size()));
    }
    std::printf("%s: wrote %zu seeds to %s\n", fuzz_target_name(), seeds.size(), write_seeds.c_str());
    return 0;
  }
  install_handlers();
  if (!replay.empty()) return run_one(read_file(replay), timeout) == 0 ? 0 : 1;

  std::vector<std::vector<std::uint8_t>> corpus;
  if (!corpus_dir.empty()) {
    if (!fs::is_directory(corpus_dir)) {
      std::fprintf(stderr, "%s: corpus folder %s does not exist\n", fuzz_target_name(), corpus_dir.c_str());
      return 2;
    }
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(corpus_dir)) files.push_back(e.path());
    std::sort(files.begin(), files.end());  // a fixed order: the same inputs every run
    for (const auto& f : files) corpus.push_back(read_file(f));
  }
  if (corpus.empty()) corpus = fuzz_seeds();
  if (corpus.empty()) corpus.emplace_back();

  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  std::uint64_t executed = 0;
  for (const auto& input : corpus) {
    if (run_one(input, timeout) != 0) return 1;
    ++executed;
  }
  Mutator mutator(seed, fuzz_dictionary());
  double next_report = 60;
  for (std::uint64_t i = 0; (runs == 0 || i < runs) && elapsed() < seconds; ++i) {
    if (run_one(mutator.mutate(corpus), timeout) != 0) return 1;
    ++executed;
    if (elapsed() > next_report) {
      std::fprintf(stderr, "%s: %llu inputs, %.0f s\n", fuzz_target_name(), static_cast<unsigned long long>(executed),
                   elapsed());
      next_report += 60;
    }
  }
  std::printf("%s: %llu inputs (%zu seeds, seed %llu) in %.1f s, no findings\n", fuzz_target_name(),
              static_cast<unsigned long long>(executed), corpus.size(), static_cast<unsigned long long>(seed), elapsed());
  return 0;
}
