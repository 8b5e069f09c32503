/*
 * spyre_drv.h — the plain C ABI of the (mock) Spyre driver.
 *
 * The only door into the device: the PyTorch backend and any other host runtime use
 * nothing else, so a real driver could be dropped in behind this header.
 *
 * Conventions (after Level Zero):
 *  - `spyre` prefix, Object+Verb names; opaque handles; every function returns a
 *    spyre_result_t; outputs come last; parameters are tagged [in], [out], [optional].
 *  - Enums are pinned to 32 bits. Structs passed in or out start with `struct_size`,
 *    which the caller sets to sizeof(the struct) it was compiled with; a smaller size
 *    than the driver knows gives SPYRE_ERROR_UNSUPPORTED_VERSION.
 *  - Every function may also return SPYRE_ERROR_NOT_INITIALIZED (the driver could not
 *    start: bad SPYRE_SIM_CONFIG, ...; spyreGetLastErrorMessage says why) and
 *    SPYRE_ERROR_INTERNAL (a driver bug).
 *  - After any failure, spyreGetLastErrorMessage() gives this thread a one-line
 *    explanation (what was expected, what was found, where).
 *  - Device pointers are `void*` values inside a device's address range; they are not
 *    host pointers (dereferencing one on the host crashes). Host pointers are ordinary.
 *  - Thread-safe: any function may be called from any thread.
 *
 * Queues hold at most 1024 unfinished commands (a hardware command ring): a submission
 * beyond that blocks until one completes, advancing the host clock to that moment.
 *
 * Time: the mock driver keeps a virtual host clock. Every call advances it by the
 * device config's per-call host overhead; commands reach the device at the host time
 * of their submission; a blocking call lets the simulation run until its condition
 * holds and moves the host clock to that instant. Device timestamps are simulated
 * picoseconds. For a single-threaded host program every timestamp is identical from
 * run to run.
 *
 * Environment (defaults; spyreDriverConfigure replaces the first three):
 * SPYRE_SIM_DEVICES (device count; default the config's system.cards, else 1),
 * SPYRE_SIM_CONFIG (a chip
 * YAML; default: the embedded configs/spyre.yaml), SPYRE_SIM_SET ("key=value;..."
 * overrides, split at ';'), SPYRE_SIM_LAUNCH_RECORDS (launch records kept per device,
 * a count or "all"; default 1024, totals stay exact), SPYRE_SIM_MODE ("timed", the SystemC model, default; "functional": no
 * SystemC and no timing, every command runs when it is submitted, for fast tests of
 * the layers above and for ThreadSanitizer; "no-data": timed without data, see
 * spyre_device_mode_t; spyreDriverConfigure's mode replaces it), SPYRE_LOG_LEVEL (trace, debug, info,
 * warn, error, off; default warn).
 */
#ifndef SPYRE_SPYRE_DRV_H
#define SPYRE_SPYRE_DRV_H

#include <stddef.h>
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
/* 0.3: spyre_device_properties_t.dram_deliverable_bytes_per_s.
 * 0.4: spyreDriverConfigure.
 * 0.5: spyre_driver_config_t.config_yaml and .mode (spyre_device_mode_t).
 * 0.6: spyre_device_properties_t: the compute array's dataflow, the vector pipeline,
 *      and the memory system (DRAM channels, latency, interleave; DMA engines; ring;
 *      scratchpad), what a kernel compiler's cost model needs.
 * 0.7: spyre_launch_desc_t.min_read_bytes / min_write_bytes (the roofline's traffic).
 * 0.8: spyreSystemScheduleTime and spyreQueueExternal (collectives between cards that
 *      different processes drive).
 * 0.9: spyre_external_desc_t.card / cards / transfers / num_transfers (the report's
 *      bytes per link of a collective).
 * 0.10: spyre_device_properties_t: the vector unit's cycles per cost class, the DRAM
 *      channel map, and the derived DMA engine rate and read/write turnaround (the rest
 *      of what the kernel compiler's cost model reads). */
#define SPYRE_API_VERSION_CURRENT SPYRE_MAKE_VERSION(0, 10)

/* ---------------------------------------------------------------------------------
 * Result codes. Ranges: 0 success; 1..0x0fff "not yet"; 0x1000.. caller errors;
 * 0x2000.. device errors; 0x3000.. driver errors.
 */
typedef enum spyre_result_t {
  SPYRE_SUCCESS = 0,
  SPYRE_NOT_READY = 1,                        /* the work or event has not completed yet */

  SPYRE_ERROR_INVALID_ARGUMENT = 0x1000,      /* a value out of its documented range */
  SPYRE_ERROR_INVALID_HANDLE = 0x1001,        /* null, destroyed, or the wrong kind of handle */
  SPYRE_ERROR_INVALID_NULL_POINTER = 0x1002,  /* a required pointer is NULL */
  SPYRE_ERROR_INVALID_SIZE = 0x1003,          /* a size of 0 where not allowed, or past an allocation's end */
  SPYRE_ERROR_UNSUPPORTED_VERSION = 0x1004,   /* struct_size too small / unknown API version */
  SPYRE_ERROR_INVALID_DEVICE_POINTER = 0x1005,/* not (or no longer) inside a live device allocation */
  SPYRE_ERROR_DOUBLE_FREE = 0x1006,           /* freeing memory that was already freed */
  SPYRE_ERROR_INVALID_PROGRAM = 0x1007,       /* a program blob that does not validate */
  SPYRE_ERROR_QUEUE_IN_ERROR_STATE = 0x1008,  /* the queue faulted; acknowledge before reuse */

  SPYRE_ERROR_OUT_OF_DEVICE_MEMORY = 0x2000,
  SPYRE_ERROR_DEVICE_FAULT = 0x2001,          /* device work failed; see spyreQueueGetFault */
  SPYRE_ERROR_DEVICE_LOST = 0x2002,           /* reserved for real drivers: the mock never loses a device */

  SPYRE_ERROR_INTERNAL = 0x3000,
  SPYRE_ERROR_OUT_OF_HOST_MEMORY = 0x3001,
  SPYRE_ERROR_NOT_INITIALIZED = 0x3002,

  SPYRE_RESULT_FORCE_UINT32 = 0x7fffffff
} spyre_result_t;

/* ---------------------------------------------------------------------------------
 * Handles.
 */
typedef struct spyre_device_s* spyre_device_t;
typedef struct spyre_queue_s* spyre_queue_t;
typedef struct spyre_event_s* spyre_event_t;
typedef struct spyre_program_s* spyre_program_t;

/* ---------------------------------------------------------------------------------
 * Driver.
 */

/* The API version this driver implements.
 *   version [out] SPYRE_API_VERSION_CURRENT of the driver's build.
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_NULL_POINTER. Never initializes. */
SPYRE_API spyre_result_t spyreDriverGetApiVersion(uint32_t* version);

/* Starts the driver if it is not running (every other call does this implicitly).
 *   api_version [in] the SPYRE_API_VERSION_CURRENT the caller was built with; a
 *                    different major version is refused.
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_UNSUPPORTED_VERSION; SPYRE_ERROR_NOT_INITIALIZED
 * (bad environment or config: see spyreGetLastErrorMessage). */
SPYRE_API spyre_result_t spyreDriverInit(uint32_t api_version);

/* How the devices run. */
typedef enum spyre_device_mode_t {
  SPYRE_MODE_DEFAULT = 0,     /* SPYRE_SIM_MODE ("timed", "functional" or "no-data"), else timed */
  SPYRE_MODE_TIMED = 1,       /* the SystemC model: every command takes simulated time */
  SPYRE_MODE_FUNCTIONAL = 2,  /* no timing: each command runs when it is submitted */
  SPYRE_MODE_NO_DATA = 3      /* timed, without data: the same cycles, counters and faults
                                 as timed, but floating-point math and float data movement
                                 are skipped (integer data, e.g. gather indices, stays
                                 real); device memory reads back as whatever it held */
} spyre_device_mode_t;

/* What the driver builds its devices from when it next starts, instead of the
 * environment. Each override is one "key.path=value" (the value is YAML and may
 * contain ';' or any other character: nothing is split or re-parsed).
 * Callers built against 0.4 (struct_size without config_yaml and mode) get the
 * defaults for the newer fields. */
typedef struct spyre_driver_config_t {
  uint32_t struct_size;
  const char* config_path;       /* [optional] chip YAML file; NULL or "": the embedded default */
  const char* const* overrides;  /* [optional] num_overrides strings, applied in order */
  uint32_t num_overrides;
  uint32_t device_count;         /* 1..64; 0: SPYRE_SIM_DEVICES (default 1) */
  /* Since 0.5: */
  const char* config_yaml;       /* [optional] chip YAML text instead of a file (not with config_path) */
  uint32_t mode;                 /* a spyre_device_mode_t; 0: SPYRE_SIM_MODE */
} spyre_driver_config_t;

/* Sets the config (a file or YAML text), overrides, device count and mode of the
 * devices the driver builds when it next starts (the first call after process start
 * or after spyreDriverShutdown); NULL goes back to the environment (SPYRE_SIM_CONFIG,
 * SPYRE_SIM_SET, SPYRE_SIM_DEVICES, SPYRE_SIM_MODE). The config is loaded and checked
 * now.
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_ARGUMENT (a bad config, override, count
 * or mode, or both config_path and config_yaml: the message names file, line and
 * key; or the driver is running);
 * SPYRE_ERROR_INVALID_NULL_POINTER (overrides, or one of them, NULL with
 * num_overrides > 0); SPYRE_ERROR_UNSUPPORTED_VERSION. */
SPYRE_API spyre_result_t spyreDriverConfigure(const spyre_driver_config_t* config);

/* Completes all submitted work, stops the simulation and releases every object.
 * Handles become invalid. Called automatically at process exit. A later call
 * restarts the driver with fresh devices. Returns SPYRE_SUCCESS. */
SPYRE_API spyre_result_t spyreDriverShutdown(void);

/* A static, NUL-terminated name for a result code ("SPYRE_ERROR_INVALID_HANDLE");
 * "SPYRE_RESULT_UNKNOWN" for a value outside the enum. Never NULL. */
SPYRE_API const char* spyreResultString(spyre_result_t result);

/* The explanation of this thread's most recent failed call, "" if none. The string
 * stays valid until this thread's next failing call. Never NULL. */
SPYRE_API const char* spyreGetLastErrorMessage(void);

/* The virtual host clock (simulated picoseconds).
 *   host_time_ps [out]
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_NULL_POINTER. */
SPYRE_API spyre_result_t spyreDriverGetHostTime(uint64_t* host_time_ps);

/* ---------------------------------------------------------------------------------
 * Devices.
 */
typedef enum spyre_mac_type_t {
  SPYRE_MAC_FP32 = 0, SPYRE_MAC_FP16 = 1, SPYRE_MAC_BF16 = 2, SPYRE_MAC_FP8 = 3, SPYRE_MAC_INT8 = 4,
  SPYRE_MAC_INT4 = 5, SPYRE_MAC_TYPE_COUNT = 6, SPYRE_MAC_TYPE_FORCE_UINT32 = 0x7fffffff
} spyre_mac_type_t;

/* The most vector cost classes spyre_device_properties_t.vector_op_cycles holds. */
#define SPYRE_VECTOR_COST_MAX 64

typedef enum spyre_dram_channel_map_t {
  SPYRE_DRAM_CHANNEL_MAP_SKEWED = 0,       /* interleave granule g on the sum of g's base-C digits mod C (default) */
  SPYRE_DRAM_CHANNEL_MAP_INTERLEAVED = 1,  /* granule g on channel g mod C, of C channels */
  SPYRE_DRAM_CHANNEL_MAP_FORCE_UINT32 = 0x7fffffff
} spyre_dram_channel_map_t;

typedef struct spyre_device_properties_t {
  uint32_t struct_size;          /* [in] sizeof(spyre_device_properties_t) */
  uint32_t isa_version;          /* instruction set version programs must carry */
  char name[64];                 /* "spyre:0" */
  char config_name[64];          /* the chip config's name */
  char config_hash[24];          /* 16 hex digits; equal configs, equal hashes (kernel cache key) */
  uint32_t timed;                /* 1: the SystemC timing model; 0: the functional-only device */
  uint32_t cores;
  uint32_t corelets_per_core;
  uint32_t array_rows, array_cols;          /* per corelet */
  uint32_t simd_depth[SPYRE_MAC_TYPE_COUNT];/* MACs per PE per cycle, by spyre_mac_type_t; 0 = unsupported */
  uint32_t vector_units_per_corelet;
  uint32_t vector_lanes;
  uint64_t scratchpad_bytes;                /* per core */
  uint64_t scratchpad_usable_bytes;         /* what kernels may use */
  uint32_t dma_engines_per_core;
  uint32_t stick_bytes;
  uint64_t memory_bytes;                    /* usable device memory */
  uint32_t memory_channels;
  uint32_t max_kernel_args;
  double clock_ghz;
  double dram_peak_bytes_per_s;
  double peak_macs_per_s[SPYRE_MAC_TYPE_COUNT];
  double dram_deliverable_bytes_per_s;      /* peak x the config's efficiency (what streams achieve) */
  /* Since 0.6 (a 0.5-sized struct gets the fields above only): */
  uint32_t dataflow;                        /* the compute array's: 0 output, 1 weight, 2 input stationary */
  uint32_t vector_pipeline_latency_cycles;  /* before a vector operation's first result */
  double dram_channel_bytes_per_s;          /* one channel's peak */
  double dram_efficiency;                   /* the fraction of peak streams achieve */
  double dram_latency_ns;
  uint64_t dram_interleave_bytes;           /* consecutive granules go to consecutive channels */
  uint32_t dma_setup_cycles;                /* per DMA instruction, before its bytes */
  uint32_t dma_bytes_per_cycle;             /* one DMA engine's rate */
  uint32_t ring_memory_stops;               /* ring stops with DRAM channels behind them */
  uint32_t ring_hop_latency_cycles;
  double ring_link_bytes_per_s;             /* one ring link, one direction */
  uint32_t scratchpad_ports;
  uint32_t scratchpad_latency_cycles;
  /* Since 0.10: */
  uint32_t dram_channel_map;                /* spyre_dram_channel_map_t */
  uint32_t vector_cost_count;               /* entries of vector_op_cycles given (the rest 0) */
  /* Cycles per vector of `vector_lanes` elements, by cost class: index i is
   * spyre::isa::VectorCost i (spyre/isa/isa.h; its name is the chip config's
   * cores.vector.op_cycles key). */
  double vector_op_cycles[SPYRE_VECTOR_COST_MAX];
  double dma_engine_bytes_per_s;            /* one engine's rate with its outstanding-request limit */
  double dram_turnaround_s_per_byte;        /* DRAM time = (R + W) / deliverable + this x min(R, W) */
} spyre_device_properties_t;

/* Number of devices (SPYRE_SIM_DEVICES).
 *   count [out]
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_NULL_POINTER; SPYRE_ERROR_NOT_INITIALIZED. */
SPYRE_API spyre_result_t spyreDeviceGetCount(uint32_t* count);

/*   index  [in]  0 .. count-1
 *   device [out]
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_ARGUMENT (index out of range);
 * SPYRE_ERROR_INVALID_NULL_POINTER. */
SPYRE_API spyre_result_t spyreDeviceGet(uint32_t index, spyre_device_t* device);

/*   device     [in]
 *   properties [in,out] struct_size set by the caller
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE; SPYRE_ERROR_INVALID_NULL_POINTER;
 * SPYRE_ERROR_UNSUPPORTED_VERSION. */
SPYRE_API spyre_result_t spyreDeviceGetProperties(spyre_device_t device, spyre_device_properties_t* properties);

/* Blocks until all work submitted to every queue of the device has completed.
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE; SPYRE_ERROR_DEVICE_FAULT (some
 * queue of the device is in error state). */
SPYRE_API spyre_result_t spyreDeviceSynchronize(spyre_device_t device);

/* ---------------------------------------------------------------------------------
 * Memory.
 */

/* Allocates device memory (contents: zero on first use, otherwise undefined).
 *   device [in]
 *   bytes  [in]  0 is allowed and gives a unique, non-dereferenceable address
 *   ptr    [out] a device pointer, 256-byte aligned
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE; SPYRE_ERROR_INVALID_NULL_POINTER;
 * SPYRE_ERROR_OUT_OF_DEVICE_MEMORY (the message says requested, in use and free). */
SPYRE_API spyre_result_t spyreMemAlloc(spyre_device_t device, size_t bytes, void** ptr);

/* Frees device memory after all work submitted to the device so far has completed
 * (like cudaFree, it synchronizes the device).
 *   ptr [in] a pointer returned by spyreMemAlloc
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_NULL_POINTER; SPYRE_ERROR_DOUBLE_FREE;
 * SPYRE_ERROR_INVALID_DEVICE_POINTER (not the start of a live allocation). */
SPYRE_API spyre_result_t spyreMemFree(void* ptr);

/*   device [in]
 *   free_bytes, total_bytes [out] usable device memory
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE; SPYRE_ERROR_INVALID_NULL_POINTER. */
SPYRE_API spyre_result_t spyreMemGetInfo(spyre_device_t device, size_t* free_bytes, size_t* total_bytes);

typedef enum spyre_memory_type_t {
  SPYRE_MEMORY_TYPE_UNKNOWN = 0,       /* ordinary (pageable) host memory, or nothing we know */
  SPYRE_MEMORY_TYPE_DEVICE = 1,        /* inside a live device allocation */
  SPYRE_MEMORY_TYPE_HOST_PINNED = 2,   /* from spyreHostAlloc or spyreHostRegister */
  SPYRE_MEMORY_TYPE_FORCE_UINT32 = 0x7fffffff
} spyre_memory_type_t;

typedef struct spyre_pointer_attributes_t {
  uint32_t struct_size;      /* [in] */
  spyre_memory_type_t type;
  spyre_device_t device;     /* for device memory; NULL otherwise */
  void* base;                /* start of the allocation/registration holding ptr; NULL if unknown */
  size_t size;               /* its size in bytes */
} spyre_pointer_attributes_t;

/* What a pointer is: device memory (which device, base, size), pinned host memory, or
 * unknown. Never fails for a non-NULL attributes struct.
 *   ptr        [in] any value
 *   attributes [in,out]
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_NULL_POINTER; SPYRE_ERROR_UNSUPPORTED_VERSION. */
SPYRE_API spyre_result_t spyrePointerGetAttributes(const void* ptr, spyre_pointer_attributes_t* attributes);

/* Page-locked host memory: asynchronous copies to and from it are read/written by
 * the device when they execute, not snapshotted at submission.
 *   bytes [in] > 0
 *   ptr   [out]
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_SIZE; SPYRE_ERROR_INVALID_NULL_POINTER;
 * SPYRE_ERROR_OUT_OF_HOST_MEMORY. */
SPYRE_API spyre_result_t spyreHostAlloc(size_t bytes, void** ptr);
/* Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_NULL_POINTER; SPYRE_ERROR_INVALID_ARGUMENT
 * (not from spyreHostAlloc). */
SPYRE_API spyre_result_t spyreHostFree(void* ptr);
/* Treats existing host memory as pinned until unregistered.
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_NULL_POINTER; SPYRE_ERROR_INVALID_SIZE;
 * SPYRE_ERROR_INVALID_ARGUMENT (overlaps a registered range). */
SPYRE_API spyre_result_t spyreHostRegister(void* ptr, size_t bytes);
/* Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_NULL_POINTER; SPYRE_ERROR_INVALID_ARGUMENT
 * (not a registered base). */
SPYRE_API spyre_result_t spyreHostUnregister(void* ptr);

/* ---------------------------------------------------------------------------------
 * Queues: in-order command streams. Different queues run concurrently.
 */
typedef enum spyre_queue_priority_t {
  SPYRE_QUEUE_PRIORITY_NORMAL = 0,
  SPYRE_QUEUE_PRIORITY_LOW = 1,
  SPYRE_QUEUE_PRIORITY_HIGH = 2,   /* its launches get cores first at every scheduling point */
  SPYRE_QUEUE_PRIORITY_FORCE_UINT32 = 0x7fffffff
} spyre_queue_priority_t;

/* Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE; SPYRE_ERROR_INVALID_ARGUMENT
 * (unknown priority); SPYRE_ERROR_INVALID_NULL_POINTER. */
SPYRE_API spyre_result_t spyreQueueCreate(spyre_device_t device, spyre_queue_priority_t priority,
                                          spyre_queue_t* queue);
/* Completes the queue's work, then destroys it.
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE. */
SPYRE_API spyre_result_t spyreQueueDestroy(spyre_queue_t queue);
/* Whether everything submitted so far has completed (at the current host time).
 * Returns SPYRE_SUCCESS (idle); SPYRE_NOT_READY (work pending); SPYRE_ERROR_INVALID_HANDLE;
 * SPYRE_ERROR_DEVICE_FAULT (idle, but the queue is in error state). */
SPYRE_API spyre_result_t spyreQueueQuery(spyre_queue_t queue);
/* Blocks until everything submitted so far has completed.
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE; SPYRE_ERROR_DEVICE_FAULT (the
 * queue is in error state: spyreQueueGetFault, then spyreQueueAcknowledgeError). */
SPYRE_API spyre_result_t spyreQueueSynchronize(spyre_queue_t queue);

typedef enum spyre_command_kind_t {
  SPYRE_COMMAND_COPY = 0, SPYRE_COMMAND_FILL = 1, SPYRE_COMMAND_LAUNCH = 2, SPYRE_COMMAND_EVENT_RECORD = 3,
  SPYRE_COMMAND_EVENT_WAIT = 4, SPYRE_COMMAND_FENCE = 5, SPYRE_COMMAND_EXTERNAL = 6,
  SPYRE_COMMAND_KIND_FORCE_UINT32 = 0x7fffffff
} spyre_command_kind_t;

typedef struct spyre_fault_t {
  uint32_t struct_size;          /* [in] */
  spyre_command_kind_t command;  /* what failed */
  uint64_t command_index;        /* its position in the queue (0 = first ever submitted) */
  uint64_t time_ps;              /* device time of the fault */
  char kernel[64];               /* launch name, "" for other commands */
  uint32_t core, pc;             /* for kernels */
  char instruction[160];         /* disassembled faulting instruction, "" if none */
  uint64_t address;              /* faulting device address, 0 if none */
  char reason[512];              /* e.g. "... runs 16 bytes past the end of a 4096-byte allocation at 0x..." */
  uint64_t skipped_commands;     /* later commands completed unexecuted while in error state */
} spyre_fault_t;

/* The fault that put the queue in error state.
 * Returns SPYRE_SUCCESS; SPYRE_NOT_READY (no fault recorded);
 * SPYRE_ERROR_INVALID_HANDLE; SPYRE_ERROR_INVALID_NULL_POINTER; SPYRE_ERROR_UNSUPPORTED_VERSION. */
SPYRE_API spyre_result_t spyreQueueGetFault(spyre_queue_t queue, spyre_fault_t* fault);
/* Leaves error state: later commands execute again. Blocks until the queue is idle.
 * Returns SPYRE_SUCCESS (also when there was no error); SPYRE_ERROR_INVALID_HANDLE. */
SPYRE_API spyre_result_t spyreQueueAcknowledgeError(spyre_queue_t queue);

/* ---------------------------------------------------------------------------------
 * Copies and fills. The direction follows from the pointers (device pointers are
 * recognised by address; a device pointer of another device makes a peer copy, timed
 * over the links between the cards that the config's `system` section describes).
 * Every device range must lie inside one live allocation.
 * Common results: SPYRE_SUCCESS; SPYRE_ERROR_INVALID_NULL_POINTER;
 * SPYRE_ERROR_INVALID_DEVICE_POINTER; SPYRE_ERROR_INVALID_SIZE (a range past its
 * allocation's end); SPYRE_ERROR_INVALID_ARGUMENT (host to host);
 * SPYRE_ERROR_INVALID_HANDLE (queue); SPYRE_ERROR_QUEUE_IN_ERROR_STATE (queue);
 * synchronous forms also SPYRE_ERROR_DEVICE_FAULT.
 */

/* Synchronous copy: ordered after all work already submitted to the involved
 * device(s), returns when the bytes have landed. */
SPYRE_API spyre_result_t spyreMemcpy(void* dst, const void* src, size_t bytes);
/* Queue-ordered copy. Pageable host source bytes are snapshotted at submission;
 * pinned ones are read when the copy executes. A host destination is written when the
 * copy executes: synchronize before reading it. */
SPYRE_API spyre_result_t spyreMemcpyAsync(spyre_queue_t queue, void* dst, const void* src, size_t bytes);
/* Strided copy of `height` rows of `width` bytes (pitches in bytes, >= width). */
SPYRE_API spyre_result_t spyreMemcpy2DAsync(spyre_queue_t queue, void* dst, size_t dst_pitch, const void* src,
                                            size_t src_pitch, size_t width, size_t height);
/* Fills device memory with a 1-, 2- or 4-byte pattern repeated over `bytes` (a
 * multiple of the pattern size). SPYRE_ERROR_INVALID_ARGUMENT for other sizes. */
SPYRE_API spyre_result_t spyreMemFill(void* dst, const void* pattern, size_t pattern_size, size_t bytes);
SPYRE_API spyre_result_t spyreMemFillAsync(spyre_queue_t queue, void* dst, const void* pattern, size_t pattern_size,
                                           size_t bytes);
/* A command that completes after every command submitted before it, to any queue of
 * the queue's device, has completed. */
SPYRE_API spyre_result_t spyreQueueFence(spyre_queue_t queue);

/* ---------------------------------------------------------------------------------
 * Events: device timestamps in simulated time.
 */

/* Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE; SPYRE_ERROR_INVALID_NULL_POINTER. */
SPYRE_API spyre_result_t spyreEventCreate(spyre_device_t device, spyre_event_t* event);
/* Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE. A pending record still completes. */
SPYRE_API spyre_result_t spyreEventDestroy(spyre_event_t event);
/* Completes when the queue reaches it, taking the device time then. Re-recording
 * replaces the previous record.
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE; SPYRE_ERROR_INVALID_ARGUMENT (the
 * event belongs to another device); SPYRE_ERROR_QUEUE_IN_ERROR_STATE. */
SPYRE_API spyre_result_t spyreEventRecord(spyre_event_t event, spyre_queue_t queue);
/* Later commands of `queue` wait until the event's most recent record (as of this
 * call) completes; an event never recorded is complete (as in CUDA).
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE; SPYRE_ERROR_QUEUE_IN_ERROR_STATE. */
SPYRE_API spyre_result_t spyreQueueWaitEvent(spyre_queue_t queue, spyre_event_t event);
/* Returns SPYRE_SUCCESS (complete or never recorded); SPYRE_NOT_READY; SPYRE_ERROR_INVALID_HANDLE. */
SPYRE_API spyre_result_t spyreEventQuery(spyre_event_t event);
/* Blocks until the most recent record completes.
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE. */
SPYRE_API spyre_result_t spyreEventSynchronize(spyre_event_t event);
/* Device time of the completed record.
 * Returns SPYRE_SUCCESS; SPYRE_NOT_READY (pending); SPYRE_ERROR_INVALID_ARGUMENT (never
 * recorded); SPYRE_ERROR_INVALID_HANDLE; SPYRE_ERROR_INVALID_NULL_POINTER. */
SPYRE_API spyre_result_t spyreEventGetTimestamp(spyre_event_t event, uint64_t* time_ps);
/* Simulated nanoseconds from `start` to `end` (both complete, same device).
 * Returns SPYRE_SUCCESS; SPYRE_NOT_READY; SPYRE_ERROR_INVALID_ARGUMENT (never recorded,
 * or different devices); SPYRE_ERROR_INVALID_HANDLE; SPYRE_ERROR_INVALID_NULL_POINTER. */
SPYRE_API spyre_result_t spyreEventElapsedTime(spyre_event_t start, spyre_event_t end, double* nanoseconds);

/* ---------------------------------------------------------------------------------
 * Programs and launches.
 */

/* Validates a program blob (spyre ISA, include/spyre/isa/program.h) against the device
 * and keeps an immutable copy in device memory.
 *   device [in]
 *   blob, bytes [in]
 *   name [in,optional] overrides the program's own name in records, traces and faults
 *   program [out]
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE; SPYRE_ERROR_INVALID_NULL_POINTER;
 * SPYRE_ERROR_INVALID_PROGRAM (the message names stream, pc and reason);
 * SPYRE_ERROR_OUT_OF_DEVICE_MEMORY. */
SPYRE_API spyre_result_t spyreProgramLoad(spyre_device_t device, const void* blob, size_t bytes, const char* name,
                                          spyre_program_t* program);
/* Unloads once launches already submitted have used it.
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE. */
SPYRE_API spyre_result_t spyreProgramUnload(spyre_program_t program);
/* Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE; SPYRE_ERROR_INVALID_NULL_POINTER. */
SPYRE_API spyre_result_t spyreProgramGetInfo(spyre_program_t program, uint32_t* num_streams, uint64_t* bytes);

#define SPYRE_MAX_CORES 1024

typedef struct spyre_launch_desc_t {
  uint32_t struct_size;            /* [in] sizeof(spyre_launch_desc_t) */
  spyre_program_t program;
  const uint64_t* args;            /* argument table: device pointers (as integers) or scalars */
  uint32_t num_args;               /* <= max_kernel_args */
  uint64_t core_mask[SPYRE_MAX_CORES / 64]; /* cores the launch may use; all zero = any */
  const char* name;                /* [optional] overrides the program name for this launch */
  /* Since 0.7 [optional, 0 = unknown]: the least DRAM traffic the operation needs (each
   * input read once, a broadcast operand at its own size, each output written once).
   * Reports measure the kernel against the roofline of these bytes, not of the bytes it
   * moved, so wasted traffic shows. A 0.6-sized struct is accepted without them. */
  uint64_t min_read_bytes;
  uint64_t min_write_bytes;
} spyre_launch_desc_t;

/* Queue-ordered kernel launch: stream i of the program runs on the i-th core the
 * scheduler picks from the mask (lowest free cores first).
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE (queue or program);
 * SPYRE_ERROR_INVALID_NULL_POINTER; SPYRE_ERROR_UNSUPPORTED_VERSION;
 * SPYRE_ERROR_INVALID_ARGUMENT (program of another device, too many arguments, a mask
 * with fewer cores than the program has streams); SPYRE_ERROR_QUEUE_IN_ERROR_STATE. */
SPYRE_API spyre_result_t spyreLaunch(spyre_queue_t queue, const spyre_launch_desc_t* desc);

/* ---------------------------------------------------------------------------------
 * Cards of one system driven by different processes (one card each, as a distributed
 * host runtime runs them): the bytes of a collective travel between the processes
 * outside the driver; the driver times the collective over the links of the system
 * that the config's `system` section describes, and runs its data movement as a
 * command of a queue. (Cards driven by one process copy to each other with
 * spyreMemcpy*, timed over the same links by the same rule.)
 */

/* One transfer of a schedule: `bytes` from card `src` to card `dst` (src != dst). */
typedef struct spyre_link_transfer_t {
  uint32_t src;
  uint32_t dst;
  uint64_t bytes;
} spyre_link_transfer_t;

/* The simulated time a schedule of transfers takes over the idle links of a system of
 * `cards` cards connected as the device's config says (`system.topology`, its links and
 * latencies; `cards` may exceed the devices this process drives). The steps run one
 * after another: the transfers of a step start together (contending where they share a
 * link), and a step ends when its last byte has landed (transfer and route latency).
 * A pure function of its arguments and the config: every process computes the same.
 *   device         [in] whose config describes the system
 *   cards          [in] 2 .. 1024
 *   transfers      [in] the steps' transfers, step after step
 *   step_sizes     [in] `steps` counts, one per step, summing to the transfers given
 *   duration_ps    [out]
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE; SPYRE_ERROR_INVALID_NULL_POINTER;
 * SPYRE_ERROR_INVALID_ARGUMENT (a card index of cards or more, src == dst, a bad count). */
/* Unlike every other call, it never starts the driver (SPYRE_ERROR_NOT_INITIALIZED when
 * it is not running), so a spyre_external_fn may call it. */
SPYRE_API spyre_result_t spyreSystemScheduleTime(spyre_device_t device, uint32_t cards,
                                                 const spyre_link_transfer_t* transfers, const uint32_t* step_sizes,
                                                 uint32_t steps, uint64_t* duration_ps);

/* Work the host runtime does for a queue when the queue reaches it (the data movement
 * of a collective). Called once, when every earlier command of the queue has completed,
 * at simulated time `arrival_ps`, with `views[i]` a host pointer to the bytes of the
 * descriptor's i-th device range (valid during the call only; reads and writes through
 * it are the command's). When the queue is in error state (an earlier command faulted)
 * the work is skipped: it is called once with `views` NULL instead, so the host runtime
 * can tell whoever waits for it; its result is then ignored. It sets *end_ps, the simulated time the work ends (at least
 * arrival_ps; earlier counts as arrival_ps), and returns 0; or it writes a one-line
 * reason into `message` (message_size bytes) and returns non-zero, which faults the
 * queue with that reason. It may block (waiting for other processes: the simulation of
 * this process waits with it) but must call no spyre function other than
 * spyreSystemScheduleTime: on the timed device it runs on the driver's simulation
 * thread. */
typedef int (*spyre_external_fn)(void* user, uint64_t arrival_ps, void* const* views, uint64_t* end_ps,
                                 char* message, size_t message_size);

typedef struct spyre_external_desc_t {
  uint32_t struct_size;          /* [in] sizeof(spyre_external_desc_t) */
  const char* name;              /* [optional] in traces and the report ("all_reduce") */
  void* const* buffers;          /* num_buffers device pointers, each with its size in */
  const size_t* sizes;           /*   sizes[i]; each range inside one live allocation  */
  uint32_t num_buffers;
  spyre_external_fn fn;
  void* user;                    /* passed to fn */
  uint64_t bytes;                /* the bytes the work moves between cards, for the report */
  /* 0.9 [optional]: the collective's transfers, for the report's bytes per link. This
   * card is `card` of a system of `cards` cards connected as the config's `system`
   * section says; the report adds each transfer whose src is `card` to every link on
   * its route (so summing the cards' reports counts each byte on each link once).
   * Others may be given and are not counted. NULL / 0: the total bytes only. */
  uint32_t card;
  uint32_t cards;                /* 2 .. 1024 when transfers are given */
  const spyre_link_transfer_t* transfers;
  uint32_t num_transfers;
} spyre_external_desc_t;

/* Queue-ordered external work (spyre_external_fn). The device's report counts each as
 * communication (its time from arrival to end, its bytes, and with transfers given its
 * bytes on each link) and traces show it on a "collectives" track.
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE; SPYRE_ERROR_INVALID_NULL_POINTER;
 * SPYRE_ERROR_UNSUPPORTED_VERSION; SPYRE_ERROR_INVALID_DEVICE_POINTER /
 * SPYRE_ERROR_INVALID_SIZE (a range outside a live allocation, or of another device);
 * SPYRE_ERROR_QUEUE_IN_ERROR_STATE; SPYRE_ERROR_INVALID_ARGUMENT (a transfer's card of
 * `cards` or more, src == dst, or `card` not below `cards`). */
SPYRE_API spyre_result_t spyreQueueExternal(spyre_queue_t queue, const spyre_external_desc_t* desc);

/* ---------------------------------------------------------------------------------
 * Statistics, records and traces.
 */
typedef struct spyre_device_stats_t {
  uint32_t struct_size;   /* [in] */
  uint64_t time_ps;       /* device time now */
  uint64_t macs[SPYRE_MAC_TYPE_COUNT];
  uint64_t instructions, launches, faults;
  uint64_t dram_read_bytes, dram_write_bytes;
  uint64_t host_to_device_bytes, device_to_host_bytes;
} spyre_device_stats_t;

typedef struct spyre_launch_record_t {
  uint32_t struct_size;   /* [in] */
  char name[64];
  spyre_queue_t queue;
  uint64_t start_ps, end_ps;
  uint64_t macs[SPYRE_MAC_TYPE_COUNT];
  uint64_t dram_read_bytes, dram_write_bytes, ring_bytes;
  uint32_t cores;
  uint32_t faulted;
} spyre_launch_record_t;

/* Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE; SPYRE_ERROR_INVALID_NULL_POINTER;
 * SPYRE_ERROR_UNSUPPORTED_VERSION. Completed work only (as of the current host time). */
SPYRE_API spyre_result_t spyreDeviceGetStats(spyre_device_t device, spyre_device_stats_t* stats);
/* Two-call pattern: with records NULL, *count receives the number available;
 * otherwise up to *count records are written (each with struct_size set by the
 * caller) and *count receives the number written.
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE; SPYRE_ERROR_INVALID_NULL_POINTER;
 * SPYRE_ERROR_UNSUPPORTED_VERSION. */
SPYRE_API spyre_result_t spyreDeviceGetLaunchRecords(spyre_device_t device, uint32_t* count,
                                                     spyre_launch_record_t* records);
/* The device report as JSON (same two-call pattern on bytes, NUL included).
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE; SPYRE_ERROR_INVALID_NULL_POINTER;
 * SPYRE_ERROR_INVALID_SIZE (buffer too small: *bytes receives the size needed). */
SPYRE_API spyre_result_t spyreDeviceGetReport(spyre_device_t device, char* json, size_t* bytes);
/* Clears statistics and launch records (after completing submitted work).
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE. */
SPYRE_API spyre_result_t spyreDeviceResetStats(spyre_device_t device);

/* Chrome/Perfetto JSON trace of the device from now until stop.
 * Returns SPYRE_SUCCESS; SPYRE_ERROR_INVALID_HANDLE; SPYRE_ERROR_INVALID_ARGUMENT
 * (already tracing, or not tracing on stop; cannot write the file). */
SPYRE_API spyre_result_t spyreTraceStart(spyre_device_t device);
SPYRE_API spyre_result_t spyreTraceStop(spyre_device_t device, const char* path);

#ifdef __cplusplus
}
#endif

#endif /* SPYRE_SPYRE_DRV_H */
