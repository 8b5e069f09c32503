// The pointwise kernel compiler. One file, about 640 lines, on purpose: the Walker
// (which plans a tile's scratchpad registers and emits its instructions in one pass, so
// the two cannot drift apart) and the tiling that drives it share the Form/Extent
// helpers; split, those would become a header of internals used by exactly these two.
#include "compiler/pointwise.h"
#include "compiler/does_not_fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>

#include "compiler/dma.h"
#include "compiler/group.h"
#include "compiler/transpose.h"
#include "spyre/isa/program.h"

namespace spyre::compiler {
namespace {

// What part of a tile a register holds. A tile is e0 x e1 x e2 elements; vector
// instructions see it as rows = e1*e2 by cols = e0.
enum class Form : std::uint8_t { scalar, row, col, full };

Form join(Form a, Form b) {
  if (a == b || b == Form::scalar) return a;
  if (a == Form::scalar) return b;
  return Form::full;
}

struct Extent {
  std::uint64_t e0 = 1, e1 = 1, e2 = 1;
  std::uint64_t rows() const { return e1 * e2; }
};

std::uint32_t count(Form f, const Extent& e) {
  switch (f) {
    case Form::scalar: return 1;
    case Form::row: return static_cast<std::uint32_t>(e.e0);
    case Form::col: return static_cast<std::uint32_t>(e.rows());
    case Form::full: return static_cast<std::uint32_t>(e.e0 * e.rows());
  }
  return 0;
}

std::string dtype_name(isa::DType t) { return std::string(isa::to_string(t)); }

std::string exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

double lowest(isa::DType t) {
  switch (t) {
    case isa::DType::int32: return std::numeric_limits<std::int32_t>::min();
    case isa::DType::int8: return std::numeric_limits<std::int8_t>::min();
    case isa::DType::boolean: return 0;
    default: return -std::numeric_limits<double>::infinity();
  }
}

// The vector units do arithmetic on bool as int8 (0/1 values; the conversion back to
// bool maps nonzero to true, so add is "or" and mul is "and", as in PyTorch).
isa::DType arithmetic(isa::DType t) { return t == isa::DType::boolean ? isa::DType::int8 : t; }

bool commutative(const Step& s) {
  if (s.kind == Step::Kind::binary) {
    const auto op = static_cast<isa::BinaryOp>(s.op);
    return op == isa::BinaryOp::add || op == isa::BinaryOp::mul || op == isa::BinaryOp::max ||
           op == isa::BinaryOp::min;
  }
  return s.kind == Step::Kind::compare;  // with the comparison mirrored
}

isa::CompareOp mirrored(isa::CompareOp op) {
  switch (op) {
    case isa::CompareOp::lt: return isa::CompareOp::gt;
    case isa::CompareOp::le: return isa::CompareOp::ge;
    case isa::CompareOp::gt: return isa::CompareOp::lt;
    case isa::CompareOp::ge: return isa::CompareOp::le;
    default: return op;
  }
}

// A resolved value while emitting a tile: a register (scratchpad buffer) or a constant.
struct Ref {
  bool constant = false;
  double value = 0;
  std::string key;
  std::uint32_t addr = 0;
  Form form = Form::scalar;
  isa::DType dtype = isa::DType::fp32;

  static Ref of_constant(double v) {
    Ref r;
    r.constant = true;
    r.value = v;
    return r;
  }
  static Ref of_register(std::string key, std::uint32_t addr, Form form, isa::DType dtype) {
    Ref r;
    r.key = std::move(key);
    r.addr = addr;
    r.form = form;
    r.dtype = dtype;
    return r;
  }
};

// Walks the kernel's steps for one tile. In planning mode it only allocates the
// registers (sized for the largest tile); in emitting mode it appends instructions.
// One walker for both keeps the allocation and the code in step.
class Walker {
 public:
  Walker(const PointwiseKernel& k, const std::vector<Form>& input_forms) : k_(k), input_forms_(input_forms) {}

  // Plans the registers for tiles up to `max`; returns the scratchpad bytes needed.
  std::uint64_t plan(const Extent& max) {
    regs_.clear();
    next_ = 0;
    planning_ = true;
    max_ = max;
    alias_ = false;
    walk(0, max, nullptr);
    return next_;
  }

  // Emits one tile's compute (after its loads, before its store) into `out`.
  void emit(std::uint32_t slot, const Extent& e, std::vector<isa::Instruction>& out) {
    planning_ = false;
    walk(slot, e, &out);
  }

  // Where the tile being emitted starts in the random stream, and the stream distance
  // between its rows and planes (the iteration shape's first two pitches).
  void set_random_position(std::uint64_t start, std::uint64_t row_step, std::uint64_t plane_step) {
    random_start_ = start;
    random_row_step_ = row_step;
    random_plane_step_ = plane_step;
  }
  // The random state's register (16 bytes, loaded once per core).
  std::uint32_t random_state_addr() const { return regs_.at("rng").addr[0]; }

  std::uint32_t input_addr(std::uint32_t i, std::uint32_t slot) const {
    return regs_.at("in" + std::to_string(i)).addr[slot];
  }
  std::uint32_t output_addr(std::uint32_t slot) const { return regs_.at(out_key_).addr[slot]; }
  // The result is stored straight from an input buffer (a same-dtype copy): that
  // buffer may be reloaded only after its store completed.
  bool output_aliases_input() const { return alias_; }

 private:
  struct Reg {
    std::uint32_t addr[2] = {0, 0};
  };

  std::uint32_t reg(const std::string& key, Form form, isa::DType dtype, bool doubled, std::uint32_t slot) {
    auto it = regs_.find(key);
    if (it == regs_.end()) {
      if (!planning_) throw std::logic_error("pointwise: register " + key + " was not planned");
      const std::uint64_t bytes = (std::uint64_t{count(form, max_)} * isa::dtype_size(dtype) + 63) / 64 * 64;
      Reg r;
      r.addr[0] = static_cast<std::uint32_t>(next_);
      next_ += bytes;
      r.addr[1] = doubled ? static_cast<std::uint32_t>(next_) : r.addr[0];
      if (doubled) next_ += bytes;
      it = regs_.emplace(key, r).first;
    }
    return it->second.addr[slot];
  }

  void add(const isa::Instruction& inst) {
    if (out_ != nullptr) out_->push_back(inst);
  }

  Ref resolve(const Value& v, const std::vector<Ref>& steps) {
    switch (v.kind) {
      case Value::Kind::constant: return Ref::of_constant(v.constant_value);
      case Value::Kind::input: {
        if (v.index >= k_.inputs.size()) throw std::invalid_argument("pointwise: step argument names a missing input");
        const std::string key = "in" + std::to_string(v.index);
        const Form f = input_forms_[v.index];
        const isa::DType t = k_.inputs[v.index].dtype;
        return Ref::of_register(key, reg(key, f, t, true, slot_), f, t);
      }
      case Value::Kind::step:
        if (v.index >= steps.size()) throw std::invalid_argument("pointwise: step argument names a later step");
        return steps[v.index];
      case Value::Kind::random: {
        if (v.index >= isa::kNumRandomDists) throw std::invalid_argument("pointwise: unknown random distribution");
        const auto dist = static_cast<isa::RandomDist>(v.index);
        const std::string key = "rnd" + std::string(isa::to_string(dist));
        const Ref r = Ref::of_register(key, reg(key, Form::full, isa::DType::fp32, false, slot_), Form::full,
                                       isa::DType::fp32);
        if (drawn_.insert(key).second) {  // once per tile: every use sees the same numbers
          add(isa::VRandom{.dist = dist, .dst = r.addr, .cols = static_cast<std::uint32_t>(e_.e0),
                           .rows = static_cast<std::uint32_t>(e_.e1), .planes = static_cast<std::uint32_t>(e_.e2),
                           .state = reg("rng", Form::scalar, isa::DType::fp32, false, 0), .start = random_start_,
                           .row_step = random_row_step_, .plane_step = random_plane_step_});
        }
        return r;
      }
    }
    return {};
  }

  // `r` in dtype `t` (same form), converting once per tile.
  Ref as_dtype(const Ref& r, isa::DType t) {
    if (r.constant || r.dtype == t) return r;
    const std::string key = r.key + ">" + dtype_name(t);
    Ref c{.key = key, .addr = reg(key, r.form, t, false, slot_), .form = r.form, .dtype = t};
    add(isa::VConvert{.from = r.dtype, .to = t, .src = r.addr, .dst = c.addr, .count = count(r.form, e_)});
    return c;
  }

  // `r` (a constant, or a register of a smaller form) spread to `form`, in dtype `t`.
  Ref spread(const Ref& r, Form form, isa::DType t) {
    if (!r.constant && r.form == form) return as_dtype(r, t);
    if (t == isa::DType::boolean && !r.constant) {
      // To bool first (nonzero, not a truncation to int8), spread as int8, back to bool.
      return as_dtype(spread(as_dtype(r, t), form, isa::DType::int8), t);
    }
    const std::string key = (r.constant ? "k" + exact(r.value) : r.key) + "^" +
                            std::to_string(static_cast<int>(form)) + dtype_name(t);
    Ref m{.key = key, .addr = reg(key, form, t, false, slot_), .form = form, .dtype = t};
    const std::uint32_t n = count(form, e_);
    if (r.constant) {
      add(isa::VFill{.dtype = t, .dst = m.addr, .count = n, .value = r.value});
      return m;
    }
    // max(lowest, x) = x for every x (NaN included: max propagates it), -0.0 too.
    const Ref src = as_dtype(r, t);
    add(isa::VFill{.dtype = t, .dst = m.addr, .count = n, .value = lowest(t)});
    const auto [rows, cols] = shape_of(form);
    add(isa::VBinary{.op = isa::BinaryOp::max, .dtype = t, .bcast = bcast(src, form), .a = m.addr, .b = src.addr,
                     .dst = m.addr, .rows = rows, .cols = cols});
    return m;
  }

  std::pair<std::uint32_t, std::uint32_t> shape_of(Form f) const {
    switch (f) {
      case Form::full: return {static_cast<std::uint32_t>(e_.rows()), static_cast<std::uint32_t>(e_.e0)};
      default: return {1, count(f, e_)};
    }
  }

  // How b is broadcast against a result of form `result`.
  static isa::Broadcast bcast(const Ref& b, Form result) {
    if (b.constant) return isa::Broadcast::immediate;
    if (b.form == result) return isa::Broadcast::none;
    if (result != Form::full || b.form == Form::scalar) return isa::Broadcast::scalar;
    return b.form == Form::row ? isa::Broadcast::row : isa::Broadcast::col;
  }

  Ref destination(std::size_t step, Form form, isa::DType t) {
    const bool last = step + 1 == k_.steps.size();
    if (last && form == Form::full && t == k_.output.dtype) {
      out_key_ = "out";
      return Ref::of_register("out", reg("out", form, t, true, slot_), form, t);
    }
    const std::string key = "s" + std::to_string(step);
    return Ref::of_register(key, reg(key, form, t, false, slot_), form, t);
  }

  void walk(std::uint32_t slot, const Extent& e, std::vector<isa::Instruction>* out) {
    slot_ = slot;
    e_ = e;
    out_ = out;
    drawn_.clear();
    if (k_.random()) reg("rng", Form::scalar, isa::DType::fp32, false, 0);
    for (std::uint32_t i = 0; i < k_.inputs.size(); ++i) resolve(Value::input(i), {});  // every input is loaded
    std::vector<Ref> steps;
    for (std::size_t j = 0; j < k_.steps.size(); ++j) {
      const Step& s = k_.steps[j];
      const auto need = [&](std::size_t n) {
        if (s.args.size() != n) {
          throw std::invalid_argument("pointwise: step " + std::to_string(j) + " takes " + std::to_string(n) +
                                      " arguments, got " + std::to_string(s.args.size()));
        }
      };
      switch (s.kind) {
        case Step::Kind::unary:
        case Step::Kind::convert: {
          need(1);
          Ref a = resolve(s.args[0], steps);
          const isa::DType t = s.kind == Step::Kind::convert ? s.dtype : arithmetic(s.dtype);
          if (a.constant) a = spread(a, Form::scalar, t);
          a = as_dtype(a, t);
          if (s.kind == Step::Kind::convert) {
            steps.push_back(a);
            break;
          }
          const Ref d = destination(j, a.form, t);
          add(isa::VUnary{.op = static_cast<isa::UnaryOp>(s.op), .dtype = t, .src = a.addr, .dst = d.addr,
                          .count = count(a.form, e_)});
          steps.push_back(d);
          break;
        }
        case Step::Kind::binary:
        case Step::Kind::compare: {
          need(2);
          Ref a = resolve(s.args[0], steps), b = resolve(s.args[1], steps);
          // Two constants (a CPU scalar operand meeting a constant): a is filled into a
          // scalar register and b stays the immediate.
          const Form form = join(a.constant ? Form::scalar : a.form, b.constant ? Form::scalar : b.form);
          std::uint8_t op = s.op;
          if ((a.constant || a.form != form) && commutative(s)) {
            std::swap(a, b);
            if (s.kind == Step::Kind::compare) {
              op = static_cast<std::uint8_t>(mirrored(static_cast<isa::CompareOp>(op)));
            }
          }
          const isa::DType t = s.kind == Step::Kind::binary ? arithmetic(s.dtype) : s.dtype;
          a = spread(a, form, t);
          b = as_dtype(b, t);
          const auto [rows, cols] = shape_of(form);
          const isa::DType result = s.kind == Step::Kind::compare ? isa::DType::boolean : t;
          const Ref d = destination(j, form, result);
          if (s.kind == Step::Kind::binary) {
            add(isa::VBinary{.op = static_cast<isa::BinaryOp>(op), .dtype = t, .bcast = bcast(b, form), .a = a.addr,
                             .b = b.addr, .dst = d.addr, .rows = rows, .cols = cols, .imm = b.value});
          } else {
            add(isa::VCompare{.op = static_cast<isa::CompareOp>(op), .dtype = s.dtype, .bcast = bcast(b, form),
                              .a = a.addr, .b = b.addr, .dst = d.addr, .rows = rows, .cols = cols, .imm = b.value});
          }
          steps.push_back(d);
          break;
        }
        case Step::Kind::select: {
          need(3);
          Ref c = resolve(s.args[0], steps), a = resolve(s.args[1], steps), b = resolve(s.args[2], steps);
          Form form = Form::scalar;
          for (const Ref* r : {&c, &a, &b}) {
            if (!r->constant) form = join(form, r->form);
          }
          c = spread(c, form, isa::DType::boolean);
          a = spread(a, form, s.dtype);
          b = spread(b, form, s.dtype);
          const Ref d = destination(j, form, s.dtype);
          add(isa::VSelect{.dtype = s.dtype, .cond = c.addr, .a = a.addr, .b = b.addr, .dst = d.addr,
                           .count = count(form, e_)});
          steps.push_back(d);
          break;
        }
      }
    }
    // The result, full and in the output dtype, in the double-buffered output register.
    const Ref result = steps.empty() ? resolve(Value::input(0), {}) : steps.back();
    if (result.key == "out") return;
    if (result.form == Form::full && result.dtype == k_.output.dtype && result.key.rfind("in", 0) == 0 &&
        result.key.find_first_of(">^") == std::string::npos) {
      out_key_ = result.key;  // a plain copy: store the loaded buffer itself
      alias_ = true;
      return;
    }
    out_key_ = "out";
    const std::uint32_t dst = reg("out", Form::full, k_.output.dtype, true, slot_);
    if (result.form != Form::full) {
      const Ref full = spread(result, Form::full, k_.output.dtype);
      add(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = k_.output.dtype, .src = full.addr, .dst = dst,
                      .count = count(Form::full, e_)});
    } else if (result.dtype != k_.output.dtype) {
      add(isa::VConvert{.from = result.dtype, .to = k_.output.dtype, .src = result.addr, .dst = dst,
                        .count = count(Form::full, e_)});
    } else {
      add(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = k_.output.dtype, .src = result.addr, .dst = dst,
                      .count = count(Form::full, e_)});
    }
  }

  const PointwiseKernel& k_;
  const std::vector<Form>& input_forms_;
  std::map<std::string, Reg> regs_;
  std::uint64_t next_ = 0;
  bool planning_ = true;
  bool alias_ = false;
  Extent max_, e_;
  std::uint32_t slot_ = 0;
  std::set<std::string> drawn_;  // random registers drawn for the tile being emitted
  std::uint64_t random_start_ = 0, random_row_step_ = 0, random_plane_step_ = 0;
  std::vector<isa::Instruction>* out_ = nullptr;
  std::string out_key_ = "out";
};

// Strides padded to at least three dimensions.
std::vector<std::int64_t> padded(const std::vector<std::int64_t>& s, std::size_t dims) {
  std::vector<std::int64_t> r = s;
  r.resize(dims, 0);
  return r;
}

Form form_of(const std::vector<std::int64_t>& s, const Extent& t) {
  const bool inner = t.e0 > 1 && s[0] != 0;
  const bool outer = (t.e1 > 1 && s[1] != 0) || (t.e2 > 1 && s[2] != 0);
  // A form that covers the whole tile anyway (one row, one column, one element) is
  // full: no broadcast needed.
  if (inner && outer) return Form::full;
  if (inner) return t.rows() == 1 ? Form::full : Form::row;
  if (outer) return t.e0 == 1 ? Form::full : Form::col;
  return t.e0 * t.rows() == 1 ? Form::full : Form::scalar;
}

// The largest dimension 1 a tile box spans to read a broadcast input once (box).
constexpr std::uint64_t kMaxAcross = 64;

// The tile box for about `t` elements: a run of the innermost dimension, or whole
// innermost runs stacked over the next dimensions. With `across` (an input broadcast
// along dimension 1 whose innermost runs are longer than a tile: an expanded copy such
// as grouped-query attention's repeated K and V, a mask broadcast over heads), a run
// of t / d[1] elements (whole sticks of `stick` elements) by all of dimension 1, so the
// broadcast input is read once for the d[1] copies it makes instead of d[1] times.
Extent box(const std::vector<std::uint64_t>& d, std::uint64_t t, bool across = false, std::uint64_t stick = 1) {
  Extent e;
  if (d[0] >= t && across && t / d[1] >= stick) {
    e.e0 = t / d[1] / stick * stick;
    e.e1 = d[1];
    return e;
  }
  if (d[0] >= t) {
    e.e0 = t;
    return e;
  }
  e.e0 = d[0];
  e.e1 = std::min(d[1], std::max<std::uint64_t>(1, t / d[0]));
  if (e.e1 == d[1]) e.e2 = std::min(d[2], std::max<std::uint64_t>(1, t / (d[0] * d[1])));
  return e;
}


}  // namespace

std::uint64_t min_read_bytes(const PointwiseKernel& kernel) {
  std::uint64_t bytes = 0;
  for (const Operand& o : kernel.inputs) {
    std::uint64_t distinct = 1;
    for (std::size_t d = 0; d < kernel.shape.size(); ++d) {
      if (d >= o.strides.size() || o.strides[d] != 0) distinct *= kernel.shape[d];
    }
    bytes += distinct * isa::dtype_size(o.dtype);
  }
  return bytes;
}

std::uint64_t min_write_bytes(const PointwiseKernel& kernel) {
  std::uint64_t elements = 1;
  for (const auto d : kernel.shape) elements *= d;
  return elements * isa::dtype_size(kernel.output.dtype);
}

std::int64_t lowest_offset(const std::vector<std::uint64_t>& shape, const std::vector<std::int64_t>& strides) {
  std::int64_t low = 0;
  for (std::size_t d = 0; d < shape.size() && d < strides.size(); ++d) {
    if (shape[d] > 0 && strides[d] < 0) low += static_cast<std::int64_t>(shape[d] - 1) * strides[d];
  }
  return low;
}

bool PointwiseKernel::draws(isa::RandomDist dist) const {
  for (const auto& s : steps) {
    for (const auto& a : s.args) {
      if (a.kind == Value::Kind::random && a.index == static_cast<std::uint32_t>(dist)) return true;
    }
  }
  return false;
}

bool PointwiseKernel::random() const { return draws(isa::RandomDist::uniform) || draws(isa::RandomDist::normal); }

std::string PointwiseKernel::key() const {
  std::string k = "pw[";
  for (const auto d : shape) k += std::to_string(d) + ",";
  const auto operand = [&](const Operand& o) {
    k += dtype_name(o.dtype) + "(";
    for (const auto s : o.strides) k += std::to_string(s) + ",";
    k += ")";
  };
  k += "]";
  for (const auto& o : inputs) operand(o);
  k += "->";
  operand(output);
  for (const auto& s : steps) {
    k += "|" + std::to_string(static_cast<int>(s.kind)) + "." + std::to_string(s.op) + "." + dtype_name(s.dtype);
    for (const auto& a : s.args) {
      if (a.kind == Value::Kind::constant) {
        k += ":c" + exact(a.constant_value);
      } else if (a.kind == Value::Kind::random) {
        k += ":r" + std::to_string(a.index);
      } else {
        k += (a.kind == Value::Kind::input ? ":i" : ":s") + std::to_string(a.index);
      }
    }
  }
  return k;
}

namespace {

// A kernel's iteration space: its shape padded to at least three dimensions, each
// input's and the output's strides padded alike, and its element count.
struct Space {
  std::size_t dims = 3;
  std::vector<std::uint64_t> shape;
  std::vector<std::vector<std::int64_t>> strides;
  std::vector<std::int64_t> out_strides;
  std::uint64_t elements = 1;

  // The byte offset of an operand's element at `origin`, from its lowest element.
  std::uint64_t offset(const std::vector<std::int64_t>& s, const std::vector<std::uint64_t>& origin,
                       isa::DType dtype) const {
    std::int64_t o = -lowest_offset(shape, s);
    for (std::size_t d = 0; d < dims; ++d) o += static_cast<std::int64_t>(origin[d]) * s[d];
    return static_cast<std::uint64_t>(o) * isa::dtype_size(dtype);
  }
};

// The kernel checked (a stride per dimension for every operand, an input or a random
// value, at least one element) and its space.
Space space_of(const PointwiseKernel& kernel, const std::string& name) {
  Space sp;
  sp.dims = std::max<std::size_t>(3, kernel.shape.size());
  sp.shape = kernel.shape;
  sp.shape.resize(sp.dims, 1);
  const auto check_strides = [&](const Operand& o, const std::string& what) {
    if (o.strides.size() != kernel.shape.size()) {
      throw std::invalid_argument(name + ": " + what + " has " + std::to_string(o.strides.size()) +
                                  " strides for a " + std::to_string(kernel.shape.size()) + "-d shape");
    }
  };
  for (std::size_t i = 0; i < kernel.inputs.size(); ++i) check_strides(kernel.inputs[i], "input " + std::to_string(i));
  check_strides(kernel.output, "the output");
  if (kernel.inputs.empty() && !kernel.random()) {
    throw std::invalid_argument(name + ": a pointwise kernel needs an input or a random value");
  }
  for (const auto d : sp.shape) sp.elements *= d;
  if (sp.elements == 0) throw std::invalid_argument(name + ": nothing to compute (zero elements)");
  for (const auto& o : kernel.inputs) sp.strides.push_back(padded(o.strides, sp.dims));
  sp.out_strides = padded(kernel.output.strides, sp.dims);
  return sp;
}

// An input broadcast along an outer dimension (3 or beyond) but read along the third
// would be read again for every index of that dimension, since a tile box spans the three
// innermost: rotary embeddings' cos and sin [positions x head dim] against Q and K [heads
// x positions x head dim], once per head. When that dimension is small, it trades places
// with the third (the order of an elementwise iteration is free; not with random values,
// whose stream follows it), so the box spans it and the input's plane is read once and
// copied (Replicate below). Not when that would make another input, broadcast along the
// third and read along it, be read again instead.
void bring_broadcast_inside(Space& sp) {
  for (std::size_t d = 3; d < sp.dims; ++d) {
    if (sp.shape[d] <= 1 || sp.shape[d] > kMaxAcross || sp.shape[2] <= 1) continue;
    bool helps = false, hurts = false;
    for (const auto& st : sp.strides) {
      helps = helps || (st[d] == 0 && st[2] != 0);
      hurts = hurts || (st[2] == 0 && st[d] != 0);
    }
    if (!helps || hurts) continue;
    std::swap(sp.shape[2], sp.shape[d]);
    for (auto& st : sp.strides) std::swap(st[2], st[d]);
    std::swap(sp.out_strides[2], sp.out_strides[d]);
    return;
  }
}

// Tile size: at most 64 Ki elements, at most an even share per core (whole sticks),
// halved until the registers fit the scratchpad. Sets the inputs' forms for the tile and
// plans the walker's registers.
Extent fit_tile(const PointwiseKernel& kernel, const Target& target, const Space& sp, Walker& walker,
                std::vector<Form>& forms, const std::string& name) {
  const std::uint64_t per_stick = std::max<std::uint64_t>(1, target.stick_bytes / isa::dtype_size(kernel.output.dtype));
  const std::uint64_t share = (sp.elements + target.cores - 1) / std::max<std::uint32_t>(1, target.cores);
  std::uint64_t t = std::min<std::uint64_t>(64 * 1024, (share + per_stick - 1) / per_stick * per_stick);
  // An input read along dimension 0 but broadcast along dimension 1 (see box).
  const bool across = sp.shape[1] > 1 && sp.shape[1] <= kMaxAcross &&
                      std::any_of(sp.strides.begin(), sp.strides.end(), [](const auto& s) { return s[0] != 0 && s[1] == 0; });
  for (;;) {
    const Extent tile = box(sp.shape, t, across, per_stick);
    forms.clear();
    for (const auto& s : sp.strides) forms.push_back(form_of(s, tile));
    const std::uint64_t bytes = walker.plan(tile);
    if (bytes <= target.scratchpad_bytes) return tile;
    if (t <= per_stick) {
      throw DoesNotFit(name + ": " + std::to_string(sp.elements) + " " + dtype_name(kernel.output.dtype) +
                       " elements need at least " + std::to_string(bytes) + " bytes of scratchpad, the device has " +
                       std::to_string(target.scratchpad_bytes));
    }
    t = std::max(per_stick, t / 2 / per_stick * per_stick);
  }
}

// A tile: its origin in the space and its extent.
struct Unit {
  std::vector<std::uint64_t> origin;
  Extent e;
};

// The tiles in order: blocks of dimension 0, 1, 2, then every index of the outer ones.
struct Tiling {
  const Space& sp;
  Extent tile;
  std::uint64_t nb0, nb1, nb2, outer = 1, units = 0;
  Tiling(const Space& space, const Extent& t)
      : sp(space), tile(t), nb0((space.shape[0] + t.e0 - 1) / t.e0), nb1((space.shape[1] + t.e1 - 1) / t.e1),
        nb2((space.shape[2] + t.e2 - 1) / t.e2) {
    for (std::size_t d = 3; d < sp.dims; ++d) outer *= sp.shape[d];
    units = nb0 * nb1 * nb2 * outer;
  }
  Unit unit(std::uint64_t u) const {
    Unit r;
    r.origin.assign(sp.dims, 0);
    const std::uint64_t b0 = u % nb0, b1 = (u / nb0) % nb1, b2 = (u / (nb0 * nb1)) % nb2;
    std::uint64_t rest = u / (nb0 * nb1 * nb2);
    for (std::size_t d = 3; d < sp.dims; ++d) {
      r.origin[d] = rest % sp.shape[d];
      rest /= sp.shape[d];
    }
    r.origin[0] = b0 * tile.e0;
    r.origin[1] = b1 * tile.e1;
    r.origin[2] = b2 * tile.e2;
    r.e = {std::min(tile.e0, sp.shape[0] - r.origin[0]), std::min(tile.e1, sp.shape[1] - r.origin[1]),
           std::min(tile.e2, sp.shape[2] - r.origin[2])};
    return r;
  }
};

// One core's code: its run of tiles, each loaded into one of two slots while the other's
// computes, then stored.
class TileCode {
 public:
  TileCode(const PointwiseKernel& kernel, const Space& sp, const Tiling& tiling, const std::vector<Form>& forms,
           Walker& walker)
      : k_(kernel), sp_(sp), tiling_(tiling), forms_(forms), walker_(walker) {}

  // Tiles [first, last) into `code`.
  void emit(std::uint64_t first, std::uint64_t last, std::vector<isa::Instruction>& code);

 private:
  static constexpr std::uint8_t kStateToken = 4;
  void load(std::vector<isa::Instruction>& code, const Unit& u, std::uint32_t slot);
  void replicate(std::vector<isa::Instruction>& code, std::uint32_t slot);

  const PointwiseKernel& k_;
  const Space& sp_;
  const Tiling& tiling_;
  const std::vector<Form>& forms_;
  Walker& walker_;
  // What each slot's input buffers hold: a broadcast operand whose box is the same for
  // every tile (a bias row, a scalar) is loaded once per core and slot, not per tile
  // (steps never write the input buffers).
  using Loaded = std::tuple<std::uint64_t, std::array<std::uint32_t, 3>, std::array<std::int64_t, 3>>;
  std::vector<std::optional<Loaded>> loaded_[2];
  // A full box that repeats along its outermost dimension (a float input broadcast along
  // dimension 2 but not 0 and 1: rotary embeddings' cos and sin over the heads) is read
  // once, one plane, and copied into the box's other planes in the scratchpad once it has
  // arrived, instead of being read from DRAM once per plane.
  struct Replicate {
    std::uint32_t addr = 0, plane = 0, planes = 0;  // buffer, elements per plane, planes
    isa::DType dtype = isa::DType::fp32;
  };
  std::vector<Replicate> replicate_[2];
};

void TileCode::load(std::vector<isa::Instruction>& code, const Unit& u, std::uint32_t slot) {
  loaded_[slot].resize(k_.inputs.size());
  for (std::uint32_t i = 0; i < k_.inputs.size(); ++i) {
    const auto& s = sp_.strides[i];
    const auto e0 = static_cast<std::uint32_t>(u.e.e0), e1 = static_cast<std::uint32_t>(u.e.e1),
               e2 = static_cast<std::uint32_t>(u.e.e2);
    std::array<std::uint32_t, 3> box_shape{1, 1, 1};
    std::array<std::int64_t, 3> box_stride{0, 0, 0};
    switch (forms_[i]) {
      case Form::full: box_shape = {e0, e1, e2}, box_stride = {s[0], s[1], s[2]}; break;
      case Form::row: box_shape = {e0, 1, 1}, box_stride = {s[0], 0, 0}; break;
      case Form::col: box_shape = {e1, e2, 1}, box_stride = {s[1], s[2], 0}; break;
      case Form::scalar: break;
    }
    const std::uint64_t source = sp_.offset(s, u.origin, k_.inputs[i].dtype);
    if (forms_[i] == Form::full && e2 > 1 && s[2] == 0 && isa::is_float(k_.inputs[i].dtype)) {
      box_shape[2] = 1;
      replicate_[slot].push_back({walker_.input_addr(i, slot), e0 * e1, e2, k_.inputs[i].dtype});
    }
    Loaded now{source, box_shape, box_stride};
    if (forms_[i] != Form::full && loaded_[slot][i] == now) continue;
    loaded_[slot][i] = now;
    code.push_back(make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(slot), k_.inputs[i].dtype,
                                          static_cast<std::uint16_t>(i), source, walker_.input_addr(i, slot), box_shape,
                                          box_stride));
  }
}

// The planes of the slot's replicated boxes doubled: 1 -> 2 -> 4 ...
void TileCode::replicate(std::vector<isa::Instruction>& code, std::uint32_t slot) {
  for (const Replicate& r : replicate_[slot]) {
    const std::uint32_t plane_bytes = r.plane * static_cast<std::uint32_t>(isa::dtype_size(r.dtype));
    for (std::uint32_t have = 1; have < r.planes;) {
      const std::uint32_t n = std::min(have, r.planes - have);
      code.push_back(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = r.dtype, .src = r.addr,
                                 .dst = r.addr + have * plane_bytes, .count = n * r.plane});
      have += n;
    }
  }
  replicate_[slot].clear();
}

void TileCode::emit(std::uint64_t first, std::uint64_t last, std::vector<isa::Instruction>& code) {
  const auto out_arg = static_cast<std::uint16_t>(k_.inputs.size());
  // The random stream position of each dimension: the iteration shape's pitches.
  std::vector<std::uint64_t> pitch(sp_.dims, 1);
  for (std::size_t d = 1; d < sp_.dims; ++d) pitch[d] = pitch[d - 1] * sp_.shape[d - 1];
  if (k_.random()) {  // the state as integers: real on every device, data or not
    code.push_back(make_dma<isa::DmaLoad>(kStateToken, isa::DType::int32, static_cast<std::uint16_t>(out_arg + 1), 0,
                                          walker_.random_state_addr(), {4, 1, 1}, {1, 0, 0}));
  }
  load(code, tiling_.unit(first), 0);
  for (std::uint64_t u = first; u < last; ++u) {
    const auto slot = static_cast<std::uint32_t>((u - first) % 2);
    const Unit cur = tiling_.unit(u);
    if (u + 1 < last) {
      // The other slot's buffers: its store (tile u - 1) must be done before a reload
      // when the store reads an input buffer.
      if (walker_.output_aliases_input() && u > first) code.push_back(wait_on(2 + (1 - slot)));
      load(code, tiling_.unit(u + 1), 1 - slot);
    }
    code.push_back(wait_on(slot));
    replicate(code, slot);
    if (u >= first + 2 && !walker_.output_aliases_input()) code.push_back(wait_on(2 + slot));
    std::uint64_t start = 0;
    for (std::size_t d = 0; d < sp_.dims; ++d) start += cur.origin[d] * pitch[d];
    walker_.set_random_position(start, pitch[1], pitch[2]);
    if (k_.random() && u == first) code.push_back(wait_on(kStateToken));
    walker_.emit(slot, cur.e, code);
    const auto e0 = static_cast<std::uint32_t>(cur.e.e0), e1 = static_cast<std::uint32_t>(cur.e.e1),
               e2 = static_cast<std::uint32_t>(cur.e.e2);
    code.push_back(make_dma<isa::DmaStore>(static_cast<std::uint8_t>(2 + slot), k_.output.dtype, out_arg,
                                           sp_.offset(sp_.out_strides, cur.origin, k_.output.dtype),
                                           walker_.output_addr(slot), {e0, e1, e2},
                                           {sp_.out_strides[0], sp_.out_strides[1], sp_.out_strides[2]}));
  }
  code.push_back(isa::Wait{.token_mask = 0xf});
}

}  // namespace

std::vector<std::uint8_t> compile_pointwise(const PointwiseKernel& kernel, const Target& target,
                                            const std::string& name) {
  Space sp = space_of(kernel, name);
  if (auto transposed = compile_transposed_copy(kernel, target, name)) return std::move(*transposed);
  if (!kernel.random()) bring_broadcast_inside(sp);
  std::vector<Form> forms;
  Walker walker(kernel, forms);
  const Tiling tiling(sp, fit_tile(kernel, target, sp, walker, forms, name));
  if (tiling.units > (1u << 22)) {
    throw DoesNotFit(name + ": the shape splits into " + std::to_string(tiling.units) +
                     " tiles (innermost dimensions too small for the scratchpad tiles)");
  }
  const std::uint32_t cores = static_cast<std::uint32_t>(std::min<std::uint64_t>(target.cores, tiling.units));
  isa::ProgramBuilder b(name, cores);
  std::vector<isa::Instruction> code;
  for (std::uint32_t core = 0; core < cores; ++core) {
    code.clear();
    TileCode(kernel, sp, tiling, forms, walker).emit(tiling.units * core / cores, tiling.units * (core + 1) / cores, code);
    for (const auto& inst : code) b.add(core, inst);
  }
  return b.build();
}

std::vector<std::uint8_t> compile_pointwise_group(const std::vector<PointwiseKernel>& kernels, const Target& target,
                                                  const std::string& name) {
  std::vector<GroupMember> members;
  members.reserve(kernels.size());
  for (std::size_t m = 0; m < kernels.size(); ++m) {
    const PointwiseKernel& k = kernels[m];
    members.push_back({compile_pointwise(k, target, name + " (member " + std::to_string(m) + ")"),
                       static_cast<std::uint32_t>(k.inputs.size() + 1 + (k.random() ? 1 : 0))});
  }
  return compile_group(members, std::max<std::uint32_t>(1, target.cores), name);
}

}  // namespace spyre::compiler
