/* Conformance of the driver's C ABI, written in C (compiled -std=c11 -pedantic -Werror).
 * Each check prints what failed; the exit status is the number of failures. */
#include <stdio.h>
#include <string.h>

#include "spyre/spyre_drv.h"

static int failures = 0;

#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                     \
    }                                                                 \
  } while (0)

static void api_version_is_reported(void) {
  uint32_t version = 0;
  CHECK(spyreDriverGetApiVersion(&version) == SPYRE_SUCCESS);
  CHECK(version == SPYRE_API_VERSION_CURRENT);
  CHECK((version >> 16) == 0 && (version & 0xffffu) == 1);
}

static void api_version_rejects_null(void) {
  CHECK(spyreDriverGetApiVersion(NULL) == SPYRE_ERROR_INVALID_NULL_POINTER);
}

static void result_strings_name_each_code(void) {
  CHECK(strcmp(spyreResultString(SPYRE_SUCCESS), "SPYRE_SUCCESS") == 0);
  CHECK(strcmp(spyreResultString(SPYRE_ERROR_INVALID_HANDLE), "SPYRE_ERROR_INVALID_HANDLE") == 0);
  CHECK(strcmp(spyreResultString(SPYRE_ERROR_DEVICE_FAULT), "SPYRE_ERROR_DEVICE_FAULT") == 0);
  CHECK(strcmp(spyreResultString((spyre_result_t)0x4242), "SPYRE_RESULT_UNKNOWN") == 0);
}

static void result_enum_is_32_bits(void) { CHECK(sizeof(spyre_result_t) == 4); }

int main(void) {
  api_version_is_reported();
  api_version_rejects_null();
  result_strings_name_each_code();
  result_enum_is_32_bits();
  if (failures == 0) printf("abi conformance: all checks passed\n");
  return failures;
}
