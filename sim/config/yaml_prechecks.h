// Checks of config text that yaml-cpp would let through silently or choke on: bytes
// that are not UTF-8, nesting deep enough to exhaust the parser's recursion, a second
// document (Load keeps only the first), and keys given twice (the node keeps the
// first). Each refusal is a ConfigError naming source:line:column.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>

namespace spyre::config {

// Refuses the first byte that is not part of well-formed UTF-8.
void require_utf8(std::string_view text, const std::string& source);

// Refuses more than kMaxNesting nested flow collections ([...], {...}).
inline constexpr std::size_t kMaxNesting = 64;
void require_shallow(std::string_view text, const std::string& source);

// Refuses a second YAML document (a '---' after content, or content after '...').
void require_one_document(std::string_view text, const std::string& source);

// Refuses a key given twice in one mapping, anywhere below `node` (path: its key path).
void reject_duplicate_keys(const YAML::Node& node, const std::string& path, const std::string& source,
                           std::size_t depth = 0);

}  // namespace spyre::config
