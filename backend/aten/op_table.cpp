#include "aten/op_table.h"

#include <string_view>

namespace spyre::backend {

namespace {

// The aten overloads a row registers and torch.compile sees.
std::vector<std::string> overloads(const UnaryRow& r) { return {std::string(r.aten) + ".default"}; }
std::vector<std::string> overloads(const BinaryRow& r) {
  if (!r.overload) return {std::string(r.aten) + ".default"};
  return {std::string(r.aten) + ".Tensor", std::string(r.aten) + ".Scalar"};
}
std::vector<std::string> overloads(const CompareRow& r) {
  return {std::string(r.aten) + ".Tensor", std::string(r.aten) + ".Scalar"};
}

template <class Rows>
void add_rows(std::vector<std::string>& out, const char* family, const Rows& rows) {
  for (const auto& r : rows) {
    for (const std::string& name : overloads(r)) out.push_back(family + (" " + name) + " " + std::string(isa::to_string(r.op)));
  }
}

}  // namespace

std::vector<std::string> fusible_ops() {
  std::vector<std::string> out;
  add_rows(out, "unary", kUnaryOps);
  add_rows(out, "binary", kBinaryOps);
  add_rows(out, "compare", kCompareOps);
  for (const auto& r : kCompositeFusibleOps) out.push_back(std::string("composite ") + r.aten);
  return out;
}

std::vector<std::string> analytic_ops() {
  std::vector<std::string> out;
  const auto add = [&](const auto& rows) {
    for (const auto& r : rows) {
      if (!analytic(r.op)) continue;
      for (const std::string& name : overloads(r)) out.push_back(name);
    }
  };
  add(kUnaryOps);
  add(kBinaryOps);
  for (const auto& r : kCompositeFusibleOps) {
    if (r.analytic) out.emplace_back(r.aten);
  }
  return out;
}

std::string epilogue_activation_names(bool gate) {
  std::string out;
  for (const auto& row : kEpilogueActivations) {
    if (gate && !row.gate) continue;
    out += std::string(row.name) + ", ";
  }
  return out.empty() ? "none" : out.substr(0, out.size() - 2) + " or none";
}

std::vector<std::string> epilogue_activation_rows() {
  std::vector<std::string> out;
  for (const auto& row : kEpilogueActivations) {
    out.push_back(std::string(row.name) + " " + std::string(row.aten) + (row.gate ? " 1" : " 0"));
  }
  return out;
}

}  // namespace spyre::backend
