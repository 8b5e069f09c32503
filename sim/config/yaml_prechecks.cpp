#include "config/yaml_prechecks.h"

#include <map>
#include <optional>

#include <fmt/format.h>

#include "config/config_loader.h"

namespace spyre::config {
namespace {

std::string join_path(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : fmt::format("{}.{}", parent, key);
}

// Where byte `offset` of `text` is, as "source:line:column".
std::string position(std::string_view text, std::size_t offset, const std::string& source) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return fmt::format("{}:{}:{}", source, line, column);
}

// The offset of the first byte that is not part of well-formed UTF-8, if any.
std::optional<std::size_t> first_non_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1, cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2, cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3, cp = c & 0x07;
    } else {
      return i;
    }
    if (i + n >= text.size()) return i;  // truncated sequence
    for (std::size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(text[i + k]);
      if ((d & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (d & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    static constexpr std::uint32_t kMinimum[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMinimum[n] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return i;
    i += n + 1;
  }
  return std::nullopt;
}

}  // namespace

void require_utf8(std::string_view text, const std::string& source) {
  if (const auto bad = first_non_utf8(text)) {
    throw ConfigError(position(text, *bad, source), "",
                      fmt::format("expected UTF-8 text, found the byte 0x{:02x}",
                                  static_cast<unsigned char>(text[*bad])));
  }
}

// Deepest nesting of flow collections ([...], {...}) outside quotes and comments: the
// parser recurses once per level, so a hostile file must not reach it.
void require_shallow(std::string_view text, const std::string& source) {
  std::size_t depth = 0;
  char quote = 0;
  bool comment = false;
  char before = '\n';  // the last non-blank character (a quote only opens a scalar after one of ":,[{-?\n")
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (comment) {
      comment = c != '\n';
      if (!comment) before = '\n';
      continue;
    }
    if (quote) {
      if (quote == '"' && c == '\\') {
        ++i;  // an escaped character
      } else if (c == quote) {
        quote = 0;
        before = c;
      }
      continue;
    }
    if ((c == '"' || c == '\'') && std::string_view(":,[{-?\n").find(before) != std::string_view::npos) {
      quote = c;
    } else if (c == '#' && (before == '\n' || i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t')) {
      comment = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxNesting) {
        throw ConfigError(position(text, i, source), "",
                          fmt::format("expected at most {} nested [ ] or {{ }} levels, found more", kMaxNesting));
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
    if (c == '\n') {
      before = '\n';
    } else if (c != ' ' && c != '\t' && c != '\r') {
      before = c;
    }
  }
}

// yaml-cpp's Load reads the first document and ignores the rest (and LoadAll loops
// forever on a stray ',' at the top: found by the config fuzzer), so a second
// document is found here: a '---' line after content, or content after a '...' line.
void require_one_document(std::string_view text, const std::string& source) {
  bool content = false, ended = false;
  std::size_t line_start = 0;
  while (line_start < text.size()) {
    std::size_t end = text.find('\n', line_start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(line_start, end - line_start);
    const auto marker = [&](std::string_view m) {
      return line.substr(0, 3) == m && (line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r');
    };
    const std::size_t first = line.find_first_not_of(" \t\r");
    const bool blank = first == std::string_view::npos || line[first] == '#';
    if (marker("---") || (!blank && ended)) {
      if (content || ended) {
        throw ConfigError(position(text, line_start, source), "",
                          "expected one YAML document, found a second (a '---' or '...' line splits the file)");
      }
      // "--- {name: x}": the first document starts on the marker's line.
      const std::size_t after = line.find_first_not_of(" \t\r", 3);
      if (marker("---") && after != std::string_view::npos && line[after] != '#') content = true;
    } else if (marker("...")) {
      ended = content;
    } else if (!blank && line[0] != '%') {
      content = true;
    }
    line_start = end + 1;
  }
}

// yaml-cpp keeps the first of two equal keys and drops the second without a word; a
// config with a key twice (or a section twice) is refused, naming both places.
void reject_duplicate_keys(const YAML::Node& node, const std::string& path, const std::string& source,
                           std::size_t depth) {
  if (depth > kMaxNesting) {
    throw ConfigError(source, path, fmt::format("expected at most {} nested levels", kMaxNesting));
  }
  const auto where = [&](const YAML::Node& n) {
    const YAML::Mark m = n.Mark();
    return m.is_null() ? source : fmt::format("{}:{}:{}", source, m.line + 1, m.column + 1);
  };
  if (node.IsMap()) {
    std::map<std::string, YAML::Node> seen;
    for (const auto& kv : node) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string();
      const std::string child = join_path(path, key);
      if (const auto it = seen.find(key); it != seen.end()) {
        throw ConfigError(where(kv.first), child,
                          fmt::format("duplicate key: already given at {} (a key may appear once per section)",
                                      where(it->second)));
      }
      seen.emplace(key, kv.first);
      reject_duplicate_keys(kv.second, child, source, depth + 1);
    }
  } else if (node.IsSequence()) {
    for (const auto& item : node) reject_duplicate_keys(item, path, source, depth + 1);
  }
}

}  // namespace spyre::config
