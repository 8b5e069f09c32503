// Precompiled for every translation unit of spyre_torch: the torch headers they share
// (docs/ARCHITECTURE.md §2: a TU including these costs ~25 s and >1 GB when not precompiled).
#pragma once

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/DeviceType.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <torch/library.h>
