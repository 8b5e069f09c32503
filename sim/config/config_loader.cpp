#include "config/config_loader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "config/config_validate.h"
#include "config/yaml_prechecks.h"

namespace spyre::config {

ConfigError::ConfigError(std::string where, std::string key, std::string message)
    : std::runtime_error(fmt::format("{}: {}: {}", where, key.empty() ? "<top>" : key, message)),
      where_(std::move(where)),
      key_(std::move(key)),
      message_(std::move(message)) {}

namespace {

std::string join_path(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : fmt::format("{}.{}", parent, key);
}

// Levenshtein distance, for "did you mean" on misspelled keys.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// Where each value came from: the file position of its YAML node, or the override.
class Origins {
 public:
  Origins(std::string file, std::map<std::string, std::string> overridden)
      : file_(std::move(file)), overridden_(std::move(overridden)) {}

  std::string where(const std::string& path, const YAML::Node& node) const {
    // An override of a section covers every key below it.
    for (std::string p = path;;) {
      if (auto it = overridden_.find(p); it != overridden_.end()) return it->second;
      const auto dot = p.rfind('.');
      if (dot == std::string::npos) break;
      p.resize(dot);
    }
    const YAML::Mark mark = node.Mark();
    if (mark.is_null()) {
      // A node with no position was made by an override: one that named a key or
      // section below this path (--set foo.bar=1 creates the section foo).
      for (const auto& [p, origin] : overridden_) {
        if (p.size() > path.size() && p.compare(0, path.size(), path) == 0 && p[path.size()] == '.') return origin;
      }
      return file_;
    }
    return fmt::format("{}:{}:{}", file_, mark.line + 1, mark.column + 1);
  }

 private:
  std::string file_;
  std::map<std::string, std::string> overridden_;
};

std::string describe_found(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return fmt::format("'{}'", node.Scalar());
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a section";
    case YAML::NodeType::Null:
      return "nothing";
    default:
      return "an undefined value";
  }
}

std::string format_range(const Range& r) {
  const char* lo = r.min_exclusive ? ">" : ">=";
  if (r.max >= 1e300) return fmt::format("{} {}", lo, r.min);
  return fmt::format("{} {} and <= {}", lo, r.min, r.max);
}

// 1 MiB, 1 TiB, 4096 B: the largest binary unit that divides the bound.
std::string format_bytes(double bound) {
  const auto v = static_cast<std::uint64_t>(bound);
  static const std::pair<std::uint64_t, const char*> units[] = {
      {1ull << 40, "TiB"}, {1ull << 30, "GiB"}, {1ull << 20, "MiB"}, {1ull << 10, "KiB"}};
  for (const auto& [size, name] : units) {
    if (v >= size && v % size == 0) return fmt::format("{} {}", v / size, name);
  }
  return fmt::format("{} B", v);
}

bool in_range(double x, const Range& r) {
  return (r.min_exclusive ? x > r.min : x >= r.min) && x <= r.max;
}

// Parses "2 MiB", "128GiB", "4096", "64 KB" into bytes.
std::optional<std::uint64_t> parse_bytes(std::string_view text) {
  std::uint64_t value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || ptr == first) return std::nullopt;
  std::string_view unit(ptr, static_cast<std::size_t>(last - ptr));
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  static const std::map<std::string_view, std::uint64_t> units = {
      {"", 1},           {"B", 1},           {"KiB", 1ull << 10}, {"MiB", 1ull << 20},
      {"GiB", 1ull << 30}, {"TiB", 1ull << 40}, {"KB", 1000ull},    {"MB", 1000000ull},
      {"GB", 1000000000ull}, {"TB", 1000000000000ull}};
  const auto it = units.find(unit);
  if (it == units.end()) return std::nullopt;
  if (value != 0 && it->second > UINT64_MAX / value) return std::nullopt;
  return value * it->second;
}

std::optional<double> parse_real(std::string_view text) {
  double value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

// Collects the key names a struct's describe() declares.
struct KeyNames {
  std::vector<std::string> keys;

  template <class... Rest>
  void integer(std::string_view key, Rest&&...) { keys.emplace_back(key); }
  template <class... Rest>
  void real(std::string_view key, Rest&&...) { keys.emplace_back(key); }
  template <class... Rest>
  void bytes(std::string_view key, Rest&&...) { keys.emplace_back(key); }
  template <class... Rest>
  void text(std::string_view key, Rest&&...) { keys.emplace_back(key); }
  template <class... Rest>
  void choice(std::string_view key, Rest&&...) { keys.emplace_back(key); }
  template <class... Rest>
  void section(std::string_view key, Rest&&...) { keys.emplace_back(key); }
  template <class... Rest>
  void optional_section(std::string_view key, Rest&&...) { keys.emplace_back(key); }
};

// Reads one mapping of the YAML tree into a struct through its describe().
class YamlReader {
 public:
  YamlReader(const Origins& origins, std::map<std::string, std::string>& located,
             YAML::Node node, std::string path)
      : origins_(origins), located_(located), node_(std::move(node)), path_(std::move(path)) {}

  template <class T>
  void read(T& target) {
    if (!node_.IsMap()) {
      fail(path_, node_, fmt::format("expected a section, found {}", describe_found(node_)));
    }
    // Unknown keys first: a misspelled key would otherwise show up as a missing one.
    KeyNames names;
    target.describe(names);
    reject_unknown_keys(names.keys);
    target.describe(*this);
  }

  void integer(std::string_view key, std::uint64_t& out, const Range& range,
               std::optional<std::uint64_t> fallback = std::nullopt) {
    if (fallback && !node_[std::string(key)].IsDefined()) {
      out = *fallback;
      return;
    }
    const YAML::Node n = scalar(key);
    const std::string& s = n.Scalar();
    std::uint64_t v = 0;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    const bool ok = ec == std::errc() && ptr == s.data() + s.size() && !s.empty();
    if (!ok || !in_range(static_cast<double>(v), range)) {
      fail(join_path(path_, key), n,
           fmt::format("expected an integer {}, found '{}'", format_range(range), s));
    }
    out = v;
  }

  // `fallback`: the key may be absent (keys added after configs were written); the
  // value then is the documented default, and the resolved config shows it.
  void real(std::string_view key, double& out, const Range& range, std::optional<double> fallback = std::nullopt) {
    if (fallback && !node_[std::string(key)].IsDefined()) {
      out = *fallback;
      return;
    }
    const YAML::Node n = scalar(key);
    const auto v = parse_real(n.Scalar());
    if (!v || !in_range(*v, range)) {
      fail(join_path(path_, key), n,
           fmt::format("expected a number {}, found '{}'", format_range(range), n.Scalar()));
    }
    out = *v;
  }

  void bytes(std::string_view key, std::uint64_t& out, const Range& range,
             std::optional<std::uint64_t> fallback = std::nullopt) {
    if (fallback && !node_[std::string(key)].IsDefined()) {
      out = *fallback;
      return;
    }
    const YAML::Node n = scalar(key);
    const auto v = parse_bytes(n.Scalar());
    if (!v || *v == 0) {
      fail(join_path(path_, key), n,
           fmt::format("expected a positive size in bytes (e.g. 4096, '64 KiB', '2 MiB', "
                       "'128 GiB'), found '{}'",
                       n.Scalar()));
    }
    if (!in_range(static_cast<double>(*v), range)) {
      fail(join_path(path_, key), n,
           fmt::format("expected a size from {} to {}, found '{}'", format_bytes(range.min),
                       format_bytes(range.max), n.Scalar()));
    }
    out = *v;
  }

  void text(std::string_view key, std::string& out) {
    const YAML::Node n = scalar(key);
    if (n.Scalar().empty()) fail(join_path(path_, key), n, "expected a non-empty string");
    out = n.Scalar();
  }

  template <class E>
  void choice(std::string_view key, E& out, const Choices<E>& choices, std::optional<E> fallback = std::nullopt) {
    if (fallback && !node_[std::string(key)].IsDefined()) {
      out = *fallback;
      return;
    }
    const YAML::Node n = scalar(key);
    for (const auto& [name, value] : choices) {
      if (n.Scalar() == name) {
        out = value;
        return;
      }
    }
    std::string names;
    for (const auto& [name, value] : choices) names += fmt::format("{}'{}'", names.empty() ? "" : ", ", name);
    fail(join_path(path_, key), n, fmt::format("expected one of {}, found '{}'", names, n.Scalar()));
  }

  template <class T>
  void section(std::string_view key, T& out) {
    const YAML::Node n = child(key);
    YamlReader(origins_, located_, n, join_path(path_, key)).read(out);
  }

  template <class T>
  void optional_section(std::string_view key, std::optional<T>& out) {
    const YAML::Node n = node_[std::string(key)];
    if (!n.IsDefined() || n.IsNull()) {
      out.reset();
      return;
    }
    out.emplace();
    YamlReader(origins_, located_, n, join_path(path_, key)).read(*out);
  }

 private:
  [[noreturn]] void fail(const std::string& path, const YAML::Node& node, std::string message) const {
    throw ConfigError(origins_.where(path, node), path, std::move(message));
  }

  YAML::Node child(std::string_view key) {
    const YAML::Node n = node_[std::string(key)];
    if (!n.IsDefined()) {
      fail(join_path(path_, key), node_, fmt::format("missing required key '{}'", key));
    }
    located_[join_path(path_, key)] = origins_.where(join_path(path_, key), n);
    return n;
  }

  YAML::Node scalar(std::string_view key) {
    const YAML::Node n = child(key);
    if (!n.IsScalar()) {
      fail(join_path(path_, key), n, fmt::format("expected a value, found {}", describe_found(n)));
    }
    return n;
  }

  void reject_unknown_keys(const std::vector<std::string>& known_keys) const {
    for (const auto& kv : node_) {
      const std::string key = kv.first.Scalar();
      if (std::find(known_keys.begin(), known_keys.end(), key) != known_keys.end()) continue;
      std::string best;
      std::size_t best_distance = 3;  // suggest only close spellings
      for (const auto& known : known_keys) {
        const std::size_t d = edit_distance(key, known);
        if (d < best_distance) {
          best_distance = d;
          best = known;
        }
      }
      std::string known_list;
      for (const auto& k : known_keys) known_list += fmt::format("{}{}", known_list.empty() ? "" : ", ", k);
      fail(join_path(path_, key), kv.first,
           best.empty() ? fmt::format("unknown key (known keys here: {})", known_list)
                        : fmt::format("unknown key; did you mean '{}'?", best));
    }
  }

  const Origins& origins_;
  std::map<std::string, std::string>& located_;
  YAML::Node node_;
  std::string path_;
};

// Writes a struct's fields as JSON through its describe().
class JsonWriter {
 public:
  explicit JsonWriter(nlohmann::json& out) : out_(out) {}

  void integer(std::string_view key, const std::uint64_t& v, const Range&, std::optional<std::uint64_t> = std::nullopt) {
    out_[std::string(key)] = v;
  }
  void real(std::string_view key, const double& v, const Range&, std::optional<double> = std::nullopt) {
    out_[std::string(key)] = v;
  }
  void bytes(std::string_view key, const std::uint64_t& v, const Range&, std::optional<std::uint64_t> = std::nullopt) {
    out_[std::string(key)] = v;
  }
  void text(std::string_view key, const std::string& v) { out_[std::string(key)] = v; }

  template <class E>
  void choice(std::string_view key, const E& v, const Choices<E>& choices, std::optional<E> = std::nullopt) {
    for (const auto& [name, value] : choices) {
      if (value == v) out_[std::string(key)] = name;
    }
  }

  template <class T>
  void section(std::string_view key, T& v) {
    nlohmann::json child = nlohmann::json::object();
    JsonWriter w(child);
    v.describe(w);
    out_[std::string(key)] = std::move(child);
  }

  template <class T>
  void optional_section(std::string_view key, std::optional<T>& v) {
    if (v) section(key, *v);
  }

 private:
  nlohmann::json& out_;
};

// Applies "a.b.c=value" to the tree; returns the override's key path.
std::string apply_override(YAML::Node& root, const std::string& item) {
  const std::string where = fmt::format("--set {}", item);
  const auto eq = item.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError(where, "", "expected key.path=value");
  }
  const std::string path = item.substr(0, eq);
  const std::string value = item.substr(eq + 1);
  std::vector<std::string> keys;
  std::stringstream ss(path);
  for (std::string k; std::getline(ss, k, '.');) {
    if (k.empty()) throw ConfigError(where, path, "empty component in key path");
    keys.push_back(k);
  }
  require_utf8(item, where);
  require_shallow(value, where);
  YAML::Node value_node;
  try {
    value_node = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    throw ConfigError(where, path, fmt::format("value is not valid YAML: {}", e.msg));
  }
  reject_duplicate_keys(value_node, path, where);
  YAML::Node cur = root;
  std::string walked;
  for (std::size_t i = 0; i + 1 < keys.size(); ++i) {
    walked = join_path(walked, keys[i]);
    YAML::Node next = cur[keys[i]];
    if (!next.IsDefined() || next.IsNull()) {
      cur[keys[i]] = YAML::Node(YAML::NodeType::Map);
      next = cur[keys[i]];
    } else if (!next.IsMap()) {
      throw ConfigError(where, path, fmt::format("'{}' is a value, not a section", walked));
    }
    cur.reset(next);
  }
  cur[keys.back()] = value_node;
  return path;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path, "", "cannot open the config file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

LoadedConfig load_config_text(std::string_view yaml, const std::string& source_name,
                              const std::vector<std::string>& overrides) {
  require_utf8(yaml, source_name);
  require_shallow(yaml, source_name);
  require_one_document(yaml, source_name);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("{}:{}:{}", source_name, e.mark.line + 1, e.mark.column + 1), "",
                      fmt::format("not valid YAML: {}", e.msg));
  }
  reject_duplicate_keys(root, "", source_name);
  if (!root.IsMap()) {
    throw ConfigError(source_name, "", "expected a YAML mapping at the top of the config");
  }
  std::map<std::string, std::string> overridden;
  for (const auto& item : overrides) {
    const std::string path = apply_override(root, item);
    overridden[path] = fmt::format("--set {}", item);
  }
  LoadedConfig loaded;
  loaded.source = source_name;
  loaded.overrides = overrides;
  const Origins origins(source_name, std::move(overridden));
  std::map<std::string, std::string> located;
  YamlReader(origins, located, root, "").read(loaded.chip);
  validate(loaded.chip, [&](const std::string& key) {
    const auto it = located.find(key);
    return it != located.end() ? it->second : source_name;
  });
  loaded.hash = config_hash(loaded.chip);
  return loaded;
}

LoadedConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  if (path.empty()) {
    return load_config_text(embedded_default_config(), std::string(kEmbeddedSourceName), overrides);
  }
  return load_config_text(read_file(path), path, overrides);
}

std::vector<std::string> split_overrides(std::string_view list) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t end = list.find(';', start);
    if (end == std::string_view::npos) end = list.size();
    std::string item(list.substr(start, end - start));
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) out.push_back(std::move(item));
    start = end + 1;
  }
  return out;
}

nlohmann::json to_json(const ChipConfig& chip) {
  nlohmann::json out = nlohmann::json::object();
  JsonWriter w(out);
  ChipConfig copy = chip;  // describe() is shared with the reader, so it is non-const
  copy.describe(w);
  return out;
}

std::string config_hash(const ChipConfig& chip) {
  const std::string text = to_json(chip).dump();
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64 offset basis
  for (const unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;  // FNV-1a 64 prime
  }
  return fmt::format("{:016x}", h);
}

}  // namespace spyre::config
