// Device tensors derived from another device tensor's bytes and kept for reuse while
// those bytes are unchanged: a convolution's NCHW weights in the [out, kh, kw, in]
// layout its kernel reads (a model's weights change between steps, not between
// forwards, and the permuting copy was a fifth of a resnet18 forward's host time).
//
// A copy is kept against its source's storage, never against a version counter: an
// in-place op on `p.data` writes the storage without bumping `p`'s counter. Instead,
// every path by which the backend writes device memory reports the address it writes
// (note_write): each argument of a kernel launch (the launch does not say which ones
// the kernel stores to, so all of them), and the destination of a copy or a fill. A
// write anywhere in a storage drops every copy derived from it. A copy is also tied
// to the stream that made it: another stream gets its own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>

#include "spyre_torch/spyre_torch.h"

namespace spyre::backend::derived {

// The copy `kind` (which names the derivation and the source view's sizes, strides,
// offset and dtype) of `source`'s storage made on `stream`, if one is kept and its
// storage has not been written since.
std::optional<at::Tensor> find(const at::Tensor& source, const std::string& kind, c10::Stream stream);

// Keeps `copy` as `source`'s `kind` on `stream`, for as long as the source's storage
// lives unwritten.
void keep(const at::Tensor& source, const std::string& kind, c10::Stream stream, at::Tensor copy);

// (note_write, in spyre_torch/spyre_torch.h: the backend is about to write device
// memory at an address; drops what was derived from the storage that holds it.)

// Drops every kept copy (torch.spyre.empty_cache(), and an allocation that ran out of
// memory before it retries); whether there was any.
bool clear();

}  // namespace spyre::backend::derived
