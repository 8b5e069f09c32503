#include <algorithm>
#include <fstream>
#include <string>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <nlohmann/json.hpp>

#include "config/config_loader.h"

using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::StartsWith;
using spyre::config::ConfigError;
using spyre::config::embedded_default_config;
using spyre::config::load_config;
using spyre::config::load_config_text;

namespace {

// The default config text with the first `from` replaced by `to`.
std::string edited(const std::string& from, const std::string& to) {
  std::string text(embedded_default_config());
  const auto pos = text.find(from);
  REQUIRE(pos != std::string::npos);
  text.replace(pos, from.size(), to);
  return text;
}

// 1-based line of the first `needle` in `text`.
int line_of(const std::string& text, const std::string& needle) {
  const auto pos = text.find(needle);
  REQUIRE(pos != std::string::npos);
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(pos), '\n'));
}

ConfigError load_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    load_config_text(text, "test.yaml", overrides);
  } catch (const ConfigError& e) {
    return e;
  }
  FAIL("expected a ConfigError");
  throw;  // unreachable
}

}  // namespace

TEST_CASE("given no file, the embedded default is configs/spyre.yaml") {
  const auto embedded = load_config("");
  const auto from_disk = load_config(SPYRE_SOURCE_DIR "/configs/spyre.yaml");
  CHECK(embedded.source == "<embedded spyre.yaml>");
  CHECK(embedded.chip.name == "spyre");
  CHECK(embedded.hash == from_disk.hash);
  CHECK(embedded.chip.cores.count == 32);
  CHECK(embedded.chip.cores.scratchpad.bytes == 2ull << 20);
  // "1638 KiB" = 1638 x 1024 bytes.
  CHECK(embedded.chip.cores.scratchpad.usable_bytes == 1638ull * 1024);
  CHECK(embedded.chip.memory.capacity_bytes == 128ull << 30);
  CHECK(embedded.chip.cores.compute_array.dataflow == spyre::config::Dataflow::output_stationary);
  REQUIRE(embedded.chip.energy.has_value());
  CHECK(embedded.chip.energy->pj_per_byte.dram == 40.0);
}

TEST_CASE("given the CI config, it loads as a small chip") {
  const auto ci = load_config(SPYRE_SOURCE_DIR "/configs/spyre-ci.yaml");
  CHECK(ci.chip.name == "spyre-ci");
  CHECK(ci.chip.cores.count == 4);
  CHECK(ci.chip.memory.capacity_bytes == 1ull << 30);
  CHECK(ci.chip.memory.channels == 4);
}

TEST_CASE("given the same config twice, the hash is the same; a change moves it") {
  const auto a = load_config("");
  const auto b = load_config("");
  const auto c = load_config("", {"cores.count=31"});
  CHECK(a.hash == b.hash);
  CHECK(a.hash.size() == 16);
  CHECK(a.hash != c.hash);
}

TEST_CASE("given the resolved config as JSON, loading it back gives the same config") {
  // JSON is YAML: this proves the reader and writer agree on every field.
  const auto a = load_config("");
  const auto b = load_config_text(spyre::config::to_json(a.chip).dump(), "roundtrip.json");
  CHECK(a.hash == b.hash);
}

TEST_CASE("given a misspelled key, the error names file, line, key and the likely spelling") {
  const std::string text = edited("  corelets: 2", "  corlets: 2");
  const auto e = load_error(text);
  CHECK(e.where() == "test.yaml:" + std::to_string(line_of(text, "corlets")) + ":3");
  CHECK(e.key() == "cores.corlets");
  CHECK_THAT(e.message(), ContainsSubstring("did you mean 'corelets'"));
  CHECK_THAT(std::string(e.what()), StartsWith("test.yaml:"));
}

TEST_CASE("given an unknown key far from any known one, the error lists the known keys") {
  const std::string text = edited("  corelets: 2", "  corelets: 2\n  turbo_mode: true");
  const auto e = load_error(text);
  CHECK(e.key() == "cores.turbo_mode");
  CHECK_THAT(e.message(), ContainsSubstring("known keys here:"));
  CHECK_THAT(e.message(), ContainsSubstring("corelets"));
}

TEST_CASE("given a negative size, the error names the key and what was expected") {
  const std::string text = edited("bytes: 2 MiB", "bytes: -2 MiB");
  const auto e = load_error(text);
  CHECK(e.key() == "cores.scratchpad.bytes");
  CHECK(e.where() == "test.yaml:" + std::to_string(line_of(text, "-2 MiB")) + ":12");
  CHECK_THAT(e.message(), ContainsSubstring("positive size"));
  CHECK_THAT(e.message(), ContainsSubstring("'-2 MiB'"));
}

TEST_CASE("given values of the wrong type, each error says what was found") {
  SECTION("a word for an integer") {
    const auto e = load_error(edited("  count: 32", "  count: many"));
    CHECK(e.key() == "cores.count");
    CHECK_THAT(e.message(), ContainsSubstring("expected an integer >= 1"));
    CHECK_THAT(e.message(), ContainsSubstring("'many'"));
  }
  SECTION("a list for a number") {
    const auto e = load_error(edited("clock_ghz: 1.5", "clock_ghz: [1, 2]"));
    CHECK(e.key() == "clock_ghz");
    CHECK_THAT(e.message(), ContainsSubstring("found a list"));
  }
  SECTION("a value for a section") {
    const auto e = load_error(std::string(embedded_default_config()), {"ring=3"});
    CHECK(e.key() == "ring");
    CHECK(e.where() == "--set ring=3");
    CHECK_THAT(e.message(), ContainsSubstring("expected a section"));
  }
  SECTION("a fraction above 1") {
    const auto e = load_error(edited("efficiency: 0.73", "efficiency: 1.73"));
    CHECK(e.key() == "memory.efficiency");
    CHECK_THAT(e.message(), ContainsSubstring("<= 1"));
  }
  SECTION("an unknown dataflow") {
    const auto e = load_error(edited("dataflow: os", "dataflow: diagonal"));
    CHECK(e.key() == "cores.compute_array.dataflow");
    CHECK_THAT(e.message(), ContainsSubstring("'os', 'ws', 'is'"));
  }
  SECTION("a size with an unknown unit") {
    const auto e = load_error(edited("stick_bytes: 128", "stick_bytes: 128 parsecs"));
    CHECK(e.key() == "dma.stick_bytes");
  }
}

TEST_CASE("given a config written before the sin and cos costs existed, their defaults apply") {
  // The cost keys added later are optional (6 cycles each, like tanh); the resolved
  // config reports the value used. Any other key stays required.
  std::string text = edited("      sin: 6", "");
  const auto pos = text.find("      cos: 6");
  REQUIRE(pos != std::string::npos);
  text.replace(pos, std::string("      cos: 6").size(), "");
  const auto loaded = load_config_text(text, "old.yaml");
  CHECK(loaded.chip.cores.vector.op_cycles[spyre::isa::VectorCost::sin] == 6);
  CHECK(loaded.chip.cores.vector.op_cycles[spyre::isa::VectorCost::cos] == 6);
  const auto custom = load_config_text(edited("      sin: 6", "      sin: 9"), "new.yaml");
  CHECK(custom.chip.cores.vector.op_cycles[spyre::isa::VectorCost::sin] == 9);
  const auto e = load_error(edited("      tanh: 6\n", "\n"));
  CHECK(e.key() == "cores.vector.op_cycles.tanh");
}

TEST_CASE("given a missing key, the error names it") {
  const auto e = load_error(edited("  lanes: 16\n", "\n"));
  CHECK(e.key() == "host_link.lanes");
  CHECK_THAT(e.message(), ContainsSubstring("missing required key 'lanes'"));
}

TEST_CASE("given impossible combinations, validation names the offending key") {
  SECTION("usable scratchpad larger than the scratchpad") {
    const std::string text = edited("usable_bytes: 1638 KiB", "usable_bytes: 3 MiB");
    const auto e = load_error(text);
    CHECK(e.key() == "cores.scratchpad.usable_bytes");
    CHECK(e.where() == "test.yaml:" + std::to_string(line_of(text, "3 MiB")) + ":19");
  }
  SECTION("memory stops that do not divide the channels") {
    const auto e = load_error(edited("memory_stops: 4", "memory_stops: 3"));
    CHECK(e.key() == "ring.memory_stops");
    CHECK_THAT(e.message(), ContainsSubstring("divisor of memory.channels (16)"));
  }
  SECTION("a stick that is not a power of two") {
    const auto e = load_error(edited("stick_bytes: 128", "stick_bytes: 96"));
    CHECK(e.key() == "dma.stick_bytes");
  }
  SECTION("a chip without fp16") {
    const auto e = load_error(edited("fp16: 8", "fp16: 0"));
    CHECK(e.key() == "cores.compute_array.simd_depth.fp16");
  }
}

TEST_CASE("given sizes and rates the model cannot represent, they are refused with the accepted range") {
  SECTION("a capacity whose page rounding wrapped to 0") {
    const auto e = load_error(edited("capacity_bytes: 128 GiB", "capacity_bytes: 18446744073709551615"));
    CHECK(e.key() == "memory.capacity_bytes");
    CHECK_THAT(e.message(), ContainsSubstring("expected a size from 1 MiB to 1 TiB"));
  }
  SECTION("a clock that makes cycles last forever") {
    const auto e = load_error(edited("clock_ghz: 1.5", "clock_ghz: 1e-300"));
    CHECK(e.key() == "clock_ghz");
    CHECK_THAT(e.message(), ContainsSubstring(">= 0.001 and <= 100"));
  }
  SECTION("more cores than a launch's core mask holds") {
    const auto e = load_error(std::string(embedded_default_config()), {"cores.count=4096"});
    CHECK(e.key() == "cores.count");
    CHECK_THAT(e.message(), ContainsSubstring("<= 1024"));
  }
  SECTION("scratchpads of all cores beyond the host memory the model commits") {
    const auto e = load_error(std::string(embedded_default_config()),
                              {"cores.count=1024", "cores.scratchpad.bytes=1 GiB"});
    CHECK(e.key() == "cores.scratchpad.bytes");
    CHECK_THAT(e.message(), ContainsSubstring("at most 16 GiB"));
  }
  SECTION("a scratchpad beyond the ISA's 32-bit addresses") {
    const auto e = load_error(std::string(embedded_default_config()), {"cores.scratchpad.bytes=8 GiB"});
    CHECK_THAT(e.message(), ContainsSubstring("expected a size from 64 B to 1 GiB"));
  }
  SECTION("a tiny efficiency (a transfer would take longer than time can count)") {
    const auto e = load_error(std::string(embedded_default_config()), {"memory.efficiency=1e-300"});
    CHECK(e.key() == "memory.efficiency");
  }
  SECTION("a watchdog whose picoseconds pass 2^63") {
    const auto e = load_error(std::string(embedded_default_config()),
                              {"clock_ghz=0.001", "firmware.watchdog_cycles=1000000000000000000"});
    CHECK(e.key() == "firmware.watchdog_cycles");
  }
}

TEST_CASE("given what YAML parsers accept silently, the config is refused with the place") {
  SECTION("a key given twice in a section") {
    const std::string text = edited("  count: 32 ", "  count: 16\n  count: 32 ");
    const auto e = load_error(text);
    CHECK(e.key() == "cores.count");
    CHECK(e.where() == "test.yaml:" + std::to_string(line_of(text, "count: 32")) + ":3");
    CHECK_THAT(e.message(), ContainsSubstring("duplicate key: already given at test.yaml:" +
                                              std::to_string(line_of(text, "count: 16"))));
  }
  SECTION("a section given twice") {
    const std::string text = std::string(embedded_default_config()) + "\ncores:\n  count: 4\n";
    const auto e = load_error(text);
    CHECK(e.key() == "cores");
    CHECK_THAT(e.message(), ContainsSubstring("duplicate key"));
  }
  SECTION("a second YAML document") {
    const std::string text = std::string(embedded_default_config()) + "\n---\nname: other\n";
    const auto e = load_error(text);
    CHECK_THAT(e.message(), ContainsSubstring("expected one YAML document, found a second"));
    CHECK(e.where() == "test.yaml:" + std::to_string(line_of(text, "---\nname: other")) + ":1");
  }
  SECTION("a stray ',' before the first key (yaml-cpp's LoadAll looped forever: found by fuzz_config)") {
    const auto e = load_error(", GiB, TiB,\n" + std::string(embedded_default_config()));
    CHECK_THAT(e.message(), ContainsSubstring("expected a YAML mapping at the top"));
  }
  SECTION("bytes that are not UTF-8") {
    const std::string text = edited("name: ", "name: caf\xe9 ");
    const auto e = load_error(text);
    CHECK(e.where() == "test.yaml:" + std::to_string(line_of(text, "caf")) + ":10");
    CHECK_THAT(e.message(), ContainsSubstring("expected UTF-8 text, found the byte 0xe9"));
    const auto o = load_error(std::string(embedded_default_config()), {"name=x\xff"});
    CHECK_THAT(o.where(), StartsWith("--set name="));
  }
  SECTION("nesting 100000 deep") {
    const std::string text = "name: [" + std::string(100000, '[') + std::string(100001, ']') + "\n";
    const auto e = load_error(text);
    CHECK_THAT(e.where(), StartsWith("test.yaml:1:"));
    CHECK_THAT(e.message(), ContainsSubstring("expected at most 64 nested"));
  }
  SECTION("nesting after an apostrophe in a plain value is still counted") {
    const std::string text = "name: Bob's chip\nx: " + std::string(100, '[') + std::string(100, ']') + "\n";
    CHECK_THAT(load_error(text).message(), ContainsSubstring("expected at most 64 nested"));
  }
  SECTION("a second document after a first that starts on its '---' line") {
    const auto e = load_error("--- {name: x}\n---\nname: y\n");
    CHECK_THAT(e.message(), ContainsSubstring("found a second"));
  }
  SECTION("an unknown section made by an override is blamed on the override") {
    const auto e = load_error(std::string(embedded_default_config()), {"bogus.key=1"});
    CHECK(e.where() == "--set bogus.key=1");
    CHECK(e.key() == "bogus");
  }
}

TEST_CASE("given malformed YAML, the error gives the line") {
  const std::string text = edited("  count: 32", "  count: [32");
  const auto e = load_error(text);
  CHECK_THAT(e.where(), StartsWith("test.yaml:"));
  CHECK_THAT(e.message(), ContainsSubstring("not valid YAML"));
}

TEST_CASE("given overrides, they replace values in order and errors name the override") {
  const std::string text(embedded_default_config());
  SECTION("values are typed and later ones win") {
    const auto c = load_config_text(text, "t.yaml", {"cores.count=16", "cores.count=8", "memory.peak_gbps=100"});
    CHECK(c.chip.cores.count == 8);
    CHECK(c.chip.memory.peak_gbps == 100.0);
  }
  SECTION("a whole optional section can be removed") {
    const auto c = load_config_text(text, "t.yaml", {"energy=~"});
    CHECK_FALSE(c.chip.energy.has_value());
  }
  SECTION("a misspelled override key") {
    const auto e = load_error(text, {"cores.cuont=16"});
    CHECK(e.where() == "--set cores.cuont=16");
    CHECK(e.key() == "cores.cuont");
    CHECK_THAT(e.message(), ContainsSubstring("did you mean 'count'"));
  }
  SECTION("a bad override value") {
    const auto e = load_error(text, {"cores.count=0"});
    CHECK(e.where() == "--set cores.count=0");
    CHECK(e.key() == "cores.count");
  }
  SECTION("an override without '='") {
    const auto e = load_error(text, {"cores.count"});
    CHECK_THAT(e.message(), ContainsSubstring("key.path=value"));
  }
  SECTION("an override below a value") {
    const auto e = load_error(text, {"cores.count.x=1"});
    CHECK_THAT(e.message(), ContainsSubstring("'cores.count' is a value, not a section"));
  }
  SECTION("a cross-field error caused by an override names the override") {
    const auto e = load_error(text, {"ring.memory_stops=5"});
    CHECK(e.where() == "--set ring.memory_stops=5");
  }
}

TEST_CASE("given a missing file, the error names it") {
  try {
    load_config("/nonexistent/chip.yaml");
    FAIL("expected a ConfigError");
  } catch (const ConfigError& e) {
    CHECK(e.where() == "/nonexistent/chip.yaml");
    CHECK_THAT(e.message(), ContainsSubstring("cannot open"));
  }
}

TEST_CASE("given a SPYRE_SIM_SET list, it splits into overrides") {
  CHECK(spyre::config::split_overrides("a=1; b.c=2;;") == std::vector<std::string>{"a=1", "b.c=2"});
  CHECK(spyre::config::split_overrides("").empty());
}
