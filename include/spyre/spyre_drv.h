/*
 * spyre_drv.h — the plain C ABI of the (mock) Spyre driver.
 *
 * The only door into the device: the PyTorch backend and any other host runtime use
 * nothing else. Conventions (after Level Zero): Object+Verb names with the `spyre`
 * prefix, opaque handles, every function returns a spyre_result_t, outputs come last,
 * parameters are tagged [in]/[out]/[optional]. Enums are pinned to 32 bits.
 *
 * This header grows with the firmware/driver issue; what is here is stable.
 */
#ifndef SPYRE_SPYRE_DRV_H
#define SPYRE_SPYRE_DRV_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SPYRE_API __attribute__((visibility("default")))
#else
#define SPYRE_API
#endif

/* API version: major in the high 16 bits, minor in the low 16 bits. */
#define SPYRE_MAKE_VERSION(major, minor) ((((uint32_t)(major)) << 16) | ((uint32_t)(minor)))
#define SPYRE_API_VERSION_CURRENT SPYRE_MAKE_VERSION(0, 1)

/* Result codes. Ranges: 0 success; 1..0x0fff "not yet" states; 0x1000.. caller errors;
 * 0x2000.. device errors; 0x3000.. driver errors. */
typedef enum spyre_result_t {
  SPYRE_SUCCESS = 0,
  SPYRE_NOT_READY = 1,
  SPYRE_ERROR_INVALID_ARGUMENT = 0x1000,
  SPYRE_ERROR_INVALID_HANDLE = 0x1001,
  SPYRE_ERROR_INVALID_NULL_POINTER = 0x1002,
  SPYRE_ERROR_INVALID_SIZE = 0x1003,
  SPYRE_ERROR_UNSUPPORTED_VERSION = 0x1004,
  SPYRE_ERROR_OUT_OF_DEVICE_MEMORY = 0x2000,
  SPYRE_ERROR_DEVICE_FAULT = 0x2001,
  SPYRE_ERROR_DEVICE_LOST = 0x2002,
  SPYRE_ERROR_INTERNAL = 0x3000,
  SPYRE_RESULT_FORCE_UINT32 = 0x7fffffff
} spyre_result_t;

/* Reports the API version this driver implements.
 *   version [out] SPYRE_API_VERSION_CURRENT of the driver's build.
 * Returns SPYRE_SUCCESS, or SPYRE_ERROR_INVALID_NULL_POINTER when version is NULL. */
SPYRE_API spyre_result_t spyreDriverGetApiVersion(uint32_t* version);

/* A static, NUL-terminated name for a result code ("SPYRE_ERROR_INVALID_HANDLE");
 * "SPYRE_RESULT_UNKNOWN" for a value outside the enum. Never NULL. */
SPYRE_API const char* spyreResultString(spyre_result_t result);

#ifdef __cplusplus
}
#endif

#endif /* SPYRE_SPYRE_DRV_H */
