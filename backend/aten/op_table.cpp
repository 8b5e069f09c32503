#include "aten/op_table.h"

#include <string_view>

namespace spyre::backend {

std::vector<std::string> fusible_ops() {
  std::vector<std::string> out;
  for (const auto& r : kUnaryOps) out.push_back(std::string("unary ") + r.aten + ".default " + std::string(isa::to_string(r.op)));
  for (const auto& r : kBinaryOps) {
    const std::string op(isa::to_string(r.op));
    if (r.overload) {
      out.push_back(std::string("binary ") + r.aten + ".Tensor " + op);
      out.push_back(std::string("binary ") + r.aten + ".Scalar " + op);
    } else {
      out.push_back(std::string("binary ") + r.aten + ".default " + op);
    }
  }
  for (const auto& r : kCompareOps) {
    const std::string op(isa::to_string(r.op));
    out.push_back(std::string("compare ") + r.aten + ".Tensor " + op);
    out.push_back(std::string("compare ") + r.aten + ".Scalar " + op);
  }
  for (const char* name : kCompositeFusibleOps) out.push_back(std::string("composite ") + name);
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
