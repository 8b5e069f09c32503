// Precompiled for every translation unit of spyre_torch: the torch headers they share.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>
