// Running pointwise kernels (compiler/pointwise.h) over a TensorIterator: the
// iterator does PyTorch's broadcasting, type promotion, output allocation/resizing
// and dimension coalescing; its shape and per-operand strides become the kernel's
// IR, so broadcast and strided operands are read by DMA descriptors (no copies).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/TensorIterator.h>

#include "compiler/pointwise.h"
#include "runtime/launch.h"

namespace spyre::backend {

// Whether the device can run `iter`: every tensor operand on one spyre device in a
// dtype the device computes (fp32, fp16, bf16, int32, int8, bool); CPU scalars any
// real dtype.
bool device_can_run(const at::TensorIteratorBase& iter);

// The dtype to compute a `steps`-step expression in for the common dtype: fp16/bf16
// go through fp32 when there is more than one step (one rounding, as opmath).
isa::DType compute_dtype(c10::ScalarType common, std::size_t steps);

// Runs `steps` (Value::input(i) = the iterator's i-th input) on the device, on the
// current stream; CPU scalar inputs become constants (rounded to `round_scalars_to`
// when given, as the CPU's comparison kernels see them; arithmetic keeps them exact,
// as PyTorch's opmath does). The kernel is compiled once per shape, strides, dtypes,
// steps and constants (kernel_cache.h).
void run_pointwise(const char* name, at::TensorIteratorBase& iter, const std::vector<compiler::Step>& steps,
                   std::optional<c10::ScalarType> round_scalars_to = std::nullopt);

// The same, with the op's least DRAM traffic given (for the roofline) where the
// iterator's inputs overlap (a pooling window's taps are views of one input: each
// input's bytes counted once would count it once per tap).
void run_pointwise_with_traffic(const char* name, at::TensorIteratorBase& iter, const std::vector<compiler::Step>& steps,
                                const Traffic& least);

// `steps` into `out` over `inputs` (Value::input(i) = inputs[i], broadcast to out's
// shape; 0-d device tensors are broadcast operands): the common case of a kernel the
// caller composes, without PyTorch's type promotion (each step names its dtype).
void run_pointwise_into(const char* name, at::Tensor& out, const std::vector<at::Tensor>& inputs,
                        const std::vector<compiler::Step>& steps);

// The same, for steps that draw random numbers (compiler::Value::random): the numbers
// come from `generator` (a spyre generator; the output device's default when empty),
// which moves past the counters they use.
void run_random_pointwise(const char* name, at::TensorIteratorBase& iter, const std::vector<compiler::Step>& steps,
                          const std::optional<at::Generator>& generator);

// Pointwise kernels given to the device together (what the _foreach ops use: one
// launch for a list of tensors). While a group is open on this thread, run_pointwise*
// hand it their kernels (random ones excepted) instead of launching them. It launches
// what it holds as one program (compiler::compile_pointwise_group) when it closes, and
// sooner: when the next kernel depends on one it holds (reads bytes one writes, or
// writes bytes one reads or writes: members run at once, on different cores), is for
// another device or stream, or would take the launch past its argument table; and
// before any other work this thread gives the device (runtime/launch.h), so the device
// sees the thread's work in order. A group holding one kernel launches it as run_pointwise
// would have. A group opened inside another adds to the outer one.
class PointwiseGroup {
 public:
  explicit PointwiseGroup(std::string name);  // the launch's name (the foreach op's)
  PointwiseGroup(const PointwiseGroup&) = delete;
  PointwiseGroup& operator=(const PointwiseGroup&) = delete;
  // Launches what is left; during an exception's unwinding too (a launch error then is
  // dropped: the exception in flight is the one reported).
  ~PointwiseGroup();
  // Launches what is left; errors propagate.
  void close();

  struct Pending;

 private:
  std::unique_ptr<Pending> pending_;  // null for a group inside another
};

// dst = src on dst's device, with dtype conversion, any strides on both sides and src
// broadcast to dst's shape. Both on the same spyre device; false if a dtype is not a
// device dtype (the caller copies another way).
bool device_copy(const at::Tensor& dst, const at::Tensor& src);

// dst = src for an int64 src (the device stores it as two int32 words, low first) into
// an fp32, fp16, bf16 or int32 dst on the same device, as one pointwise kernel reading
// both words: int32 takes the low word (PyTorch's wrap-around); floats take the low
// word's value when the high word is its sign extension (|v| < 2^31: one rounding, the
// CPU's), else high x 2^32 + unsigned low (two roundings: |v| >= 2^31 may land an ulp
// from the CPU's). False when the dtypes do not fit (the caller copies another way).
bool device_copy_from_int64(const at::Tensor& dst, const at::Tensor& src);

// dst = src for one dtype the device does not compute in whose elements are whole
// int32 words (int64, float64, complex64, complex128): a copy of the words, any
// strides on both sides, src broadcast to dst's shape, so a strided cache index or a
// transposed float64 tensor does not go through the host. False otherwise.
bool device_copy_words(const at::Tensor& dst, const at::Tensor& src);

// Word `word` (0 low, 1 high) of every element of an int64 tensor, as an int32 tensor
// over the same storage (element strides doubled): how kernels read and write int64
// values, which the device stores as two int32 words, low first.
at::Tensor int64_word(const at::Tensor& t, std::int64_t word);

// The scalar exponents pow(Tensor, Scalar) runs on the device (others on the CPU).
std::vector<double> pow_device_exponents();
// x ** exponent's device steps in fp32 (x is input 0) as the fused IR
// (compiler/pointwise_ir.h): torch.compile's fusion splices the eager kernel's own steps
// (torch.ops.spyre.pow_program). Empty for an exponent without steps of its own.
std::vector<std::int64_t> pow_program(double exponent);

}  // namespace spyre::backend
