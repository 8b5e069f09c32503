// The functional half of the core: the real math of every compute instruction, on
// scratchpad bytes. No timing, no SystemC. Floats compute in fp32 and round to the
// destination type (round to nearest even); integer arithmetic wraps like two's
// complement; float -> int conversion truncates toward zero and saturates (NaN -> 0).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "spyre/isa/isa.h"

namespace spyre::sim::numeric {

// Elements the bulk routines convert at a time (through an fp32 buffer on the stack).
inline constexpr std::size_t kChunk = 2048;

float fp16_to_f32(std::uint16_t h);
std::uint16_t f32_to_fp16(float f);
float bf16_to_f32(std::uint16_t b);
std::uint16_t f32_to_bf16(float f);

// Whether fp16/bf16 values pass through DL16 on their way into and out of the math
// (load_f32 / store_f32 and every instruction built on them), for the calling thread:
// the executor sets it from the chip's config before each instruction. Off by default.
void set_half_through_dl16(bool on);
bool half_through_dl16();

// n elements of dtype `t` <-> fp32 (ints convert exactly up to 2^24; bool is 0/1).
// (These and the scalar conversions above: convert.cpp.)
void load_f32(isa::DType t, const std::uint8_t* src, float* dst, std::size_t n);
void store_f32(isa::DType t, const float* src, std::uint8_t* dst, std::size_t n);

// Each returns an error message for a fault the hardware would raise (integer
// division by zero), or nothing.
using Fault = std::optional<std::string>;

void convert(isa::DType from, isa::DType to, const std::uint8_t* src, std::uint8_t* dst, std::size_t n);
void unary(isa::UnaryOp op, isa::DType t, const std::uint8_t* src, std::uint8_t* dst, std::size_t n);
Fault binary(const isa::VBinary& inst, std::uint8_t* sp);
void compare(const isa::VCompare& inst, std::uint8_t* sp);
void select(const isa::VSelect& inst, std::uint8_t* sp);
void reduce(const isa::VReduce& inst, std::uint8_t* sp);
void fill(const isa::VFill& inst, std::uint8_t* sp);
void transpose(const isa::VTranspose& inst, std::uint8_t* sp);
void matmul(const isa::Matmul& inst, std::uint8_t* sp);

// The fp32 function behind each float unary op (the reference of the unary tests).
float apply_unary(isa::UnaryOp op, float x);

}  // namespace spyre::sim::numeric
