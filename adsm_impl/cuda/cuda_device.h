/* adsm_impl/cuda/cuda_device.h -- one GPU as the cuda backend drives it: its state (struct adsm__cuda,
 * with the commands its engine runs and the kernel tables it keeps), the driver's entry points
 * loaded with dlopen and cuGetProcAddress, the driver's errors as adsm's, the calling thread's
 * context, and opening the device. The backend's overview is at the top of backend_cuda.h.
 *
 * Contexts: the error helpers run in any context, the fault handler's included (they format into a
 * caller's buffer); loading the driver and opening the device run in normal context, at
 * initialisation. */
#ifndef ADSM__CUDA_DEVICE_INCLUDED
#define ADSM__CUDA_DEVICE_INCLUDED

#include "../common.h"
#include "../os.h"
#include "../blocktree.h"
#include "../config.h"
#include "../copy_queue.h"
#include "../runtime.h"
#include "../device_error.h"
#include "../backend.h"
#include "cuda_driver.h"

#define ADSM__CUDA_MAX_ARGS 4096
#define ADSM__CUDA_RING 64    /* queued engine commands */
#define ADSM__CUDA_EVENTS 256 /* launches in flight */
#define ADSM__CUDA_SLOTS 2    /* staging buffers per direction */
#define ADSM__CUDA_MAX_STREAMS 16

typedef struct adsm__cu_api {
#define ADSM__CU_FIELD(name, version, required, ret, params) adsm__pfn_##name name;
    ADSM__CU_FUNCS(ADSM__CU_FIELD)
#undef ADSM__CU_FIELD
} adsm__cu_api;

typedef struct adsm__nvrtc_api {
#define ADSM__NVRTC_FIELD(name, ret, params) adsm__pfn_##name name;
    ADSM__NVRTC_FUNCS(ADSM__NVRTC_FIELD)
    ADSM__NVRTC_CUBIN_FUNCS(ADSM__NVRTC_FIELD) /* NULL where this NVRTC has none */
#undef ADSM__NVRTC_FIELD
    int major, minor;
} adsm__nvrtc_api;

enum { ADSM__CMD_H2D = 1, ADSM__CMD_D2H, ADSM__CMD_D2D, ADSM__CMD_MEMSET, ADSM__CMD_LAUNCH, ADSM__CMD_MAP,
       ADSM__CMD_UNMAP, ADSM__CMD_UNREGISTER, ADSM__CMD_PEER, ADSM__CMD_SETTLE };

typedef struct adsm__cuda adsm__cuda;

/* What a launch may write and what it only reads (adsm's device addresses): kernels on different
 * streams are ordered by it. */
typedef struct adsm__cuda_launch_access {
    uint32_t nwritable, ninputs;
    adsm__range writable[ADSM__MAX_PARAMS], inputs[ADSM__MAX_INPUTS];
} adsm__cuda_launch_access;

/* What every engine command carries: all a copy, map, memset or unregister needs. These are made
 * in the fault handler, whose stack may be a program's small alternate signal stack (8 KiB, as
 * Rust gives every thread), so they never carry a launch's access lists and argument block. */
typedef struct adsm__cuda_op {
    int type, status, value; /* status: set to 1 by a refusal that is not a device error */
    int async;               /* ADSM__CMD_H2D: nobody waits for it (an eviction, a launch's flush) */
    uintptr_t dst, src; /* device addresses are adsm's (before translation) */
    size_t n;
    adsm__cuda *peer; /* ADSM__CMD_PEER: the device whose memory is the source */
    uint64_t seq; /* a launch's number; an upload's `after` (the last launch it must follow) */
    const adsm_kernel_desc *kernel;
    adsm__cu_function fn;
    unsigned grid[3], block[3];
} adsm__cuda_op;

/* One engine command, a slot of the engine's queue: the op, and a launch's access lists and
 * arguments. Its result (0, 1: refused, -1: failed) goes to the pusher's own variable
 * (copy_queue.h), not here. */
typedef struct adsm__cuda_cmd {
    adsm__cuda_op op;
    adsm__cuda_launch_access access; /* a launch's */
    ADSM__ALIGNAS(16) unsigned char args[ADSM__CUDA_MAX_ARGS];
} adsm__cuda_cmd;

/* An entry of the kernel cache (an stb_ds hash map keyed by descriptor, adsm__cuda_kernel_key). */
typedef struct adsm__cuda_kernel {
    uint64_t key;
    adsm__cu_function value;
} adsm__cuda_kernel;

/* A single-source kernel NVRTC rejected: its error, given again at every later launch instead
 * of compiling the same text again. */
typedef struct adsm__cuda_failure {
    adsm_result code;
    char *message;
} adsm__cuda_failure;

typedef struct adsm__cuda_failed {
    uint64_t key;
    adsm__cuda_failure value;
} adsm__cuda_failed;

/* The cache key of a descriptor: its address with bit 31 moved up one place, so that the top
 * bit of each 32-bit half is clear. stb_ds hashes 8-byte keys with `byte << 24` on int, which is
 * undefined (UBSan stops the program) for a byte of 0x80 or more; user-space addresses stay below
 * 2^62, so the mapping is one to one. */
ADSM__PRIVATE uint64_t adsm__cuda_kernel_key(const adsm_kernel_desc *k) {
    uint64_t p = (uint64_t)(uintptr_t)k;
    return (p & 0x7fffffffu) | (p >> 31 << 32);
}

struct adsm__cuda {
    adsm__runtime *rt;
    unsigned index;    /* adsm's number for this device (0: the first, which counts the others) */
    unsigned ndevices; /* device 0: how many devices adsm drives (ADSM_DEVICES) */
    adsm__cu_device peers[ADSM__MAX_DEVICES]; /* the other devices that may access this one's memory */
    unsigned npeers;
    adsm__cu_api cu;
    void *lib;
    adsm__cu_device device;
    adsm__cu_context ctx;
    adsm__cu_context init_prev; /* the context current on the initialising thread before adsm_init */
    int init_entered;            /* adsm's context made current on that thread (restored at the end) */
    int ctx_retained, cc_major, cc_minor, max_threads, has_param_info;
    int pageable_access; /* the device's kernels reach pageable host memory (HMM, ATS): protocol hmm */
    int driver_version; /* cuDriverGetVersion: 1000 * major + 10 * minor */
    char device_name[128];
    size_t capacity;

    /* address space: device address = adsm address + delta */
    uintptr_t base;
    size_t half;
    adsm__cu_deviceptr va;
    size_t va_size;
    int va_moved_host; /* the host reservation was moved onto the device range */
    intptr_t delta;

    /* device memory, mapped in runs of granules (engine thread): per granule, the objects that
     * use it; per run, at its first granule, its length and its allocation */
    size_t granule;
    uint32_t *granule_refs, *granule_run;
    adsm__cu_mem_handle *granule_handles;
    size_t mapped_ahead; /* granules [0, mapped_ahead): one run mapped at start, kept to shutdown
                            (ADSM_CUDA_MAP_AHEAD; cuda_memory.h) */

    /* kernel streams, the stream of memsets, device copies and maps' zeroing, and the upload and
     * download streams; ks_last: the last launch queued on each kernel stream */
    adsm__cu_stream ks[ADSM__CUDA_MAX_STREAMS], ops, h2d, d2h;
    unsigned nstreams, next_stream;
    adsm__cu_event h2d_last, ops_last, ks_last[ADSM__CUDA_MAX_STREAMS];
    adsm__cu_event h2d_slot_ev[ADSM__CUDA_SLOTS], d2h_slot_ev[ADSM__CUDA_SLOTS];
    adsm__cu_event drained; /* engine only: waits for a whole stream (adsm__cuda_stream_wait) */
    int h2d_reading; /* set by the engine: an asynchronous direct upload may still read host pages
                        (read by drains, atomically; cleared by ADSM__CMD_SETTLE) */
    unsigned char *h2d_stage[ADSM__CUDA_SLOTS], *d2h_stage[ADSM__CUDA_SLOTS];
    size_t stage_size;
    int pinned, h2d_next;

    adsm__queue queue; /* engine commands, run in order by the engine thread (copy_queue.h) */
    pthread_t completion;
    int completion_started;

    /* launches: the engine records kernel events, the completion thread waits for them */
    adsm__cu_event kev[ADSM__CUDA_EVENTS];
    const adsm_kernel_desc *kev_kernel[ADSM__CUDA_EVENTS];
    /* engine: the launch each event slot holds, its stream and (several streams) its accesses */
    uint64_t kev_seq[ADSM__CUDA_EVENTS];
    unsigned char kev_stream[ADSM__CUDA_EVENTS];
    adsm__cuda_launch_access *kev_access;
    uint64_t kev_issued_ns[ADSM__CUDA_EVENTS]; /* ADSM_TRACE: when each launch was issued */
    /* ADSM_TRACE: when the completion thread saw the last kernel of each stream end */
    uint64_t last_kernel_done_ns[ADSM__CUDA_MAX_STREAMS];
    uint64_t issued_seq, completed_seq;
    uint64_t launching_seq; /* the newest launch handed to the driver (atomic; set before issued_seq,
                               its kev_kernel already written): the kernel faults name */
    uint64_t sent_seq; /* the last launch the runtime sent this device (several devices: a subsequence) */
    int issued_gen, completion_gen, lost, quitting;
    adsm__device_error errors; /* the first device error since the last adsm_sync */
    pthread_mutex_t module_mutex;

    /* host ranges page-locked with the driver (cuMemHostRegister): copies to and from them are
     * direct DMA, no staging. Inserted and removed in normal context, looked up by the engine and
     * by signal-context callers, all under locked_lock. */
    adsm__lock_t locked_lock;
    adsm__tree locked;
    int lock_refused; /* the driver refused to lock shared objects at all: said so, stop asking */
    int lock_short_said; /* a refusal for one allocation (out of lockable memory) was logged */
    int device_space_said; /* "not locked: device address space" was logged */

    /* modules and the kernels found in them (normal context, runtime lock): an stb_ds array in
     * load order, and an stb_ds map from descriptor to function, emptied when a module loads */
    adsm__cu_module *modules;
    adsm__cuda_kernel *kernels;
    /* single-source kernels (ADSM_KERNEL_DEF) compiled at their first launch: their modules, kept
     * apart so that their names never shadow a loaded module's, and a map from descriptor to
     * function that module loads leave alone (runtime lock) */
    adsm__cu_module *ss_modules;
    adsm__cuda_kernel *ss_kernels;
    adsm__cuda_failed *ss_failed; /* stb_ds map: the ones NVRTC rejected */
    uint64_t nvrtc_compiles;      /* NVRTC runs so far (a test counts them) */
    void *nvrtc_lib;
    adsm__nvrtc_api nvrtc;
    char nvrtc_name[4200]; /* which NVRTC was picked, and its version (for the log and tests) */
};

/* ---- errors -------------------------------------------------------------------------------- */
ADSM__PRIVATE const char *adsm__cu_name(const adsm__cuda *c, adsm__cu_result r) {
    const char *s = NULL;
    if (c && c->cu.cuGetErrorName && c->cu.cuGetErrorName(r, &s) == 0 && s) return s;
    switch (r) {
#define ADSM__CU_NAME_CASE(name, value) case value: return #name;
        ADSM__CU_RESULTS(ADSM__CU_NAME_CASE)
#undef ADSM__CU_NAME_CASE
    default: return "CUDA_ERROR_(unknown code)";
    }
}

ADSM__PRIVATE const char *adsm__cu_text(const adsm__cuda *c, adsm__cu_result r) {
    const char *s = NULL;
    if (c && c->cu.cuGetErrorString && c->cu.cuGetErrorString(r, &s) == 0 && s) return s;
    return "no description";
}

/* Formats "<what>: CUDA_ERROR_X (description)" into buf. */
ADSM__PRIVATE void adsm__cu_describe(const adsm__cuda *c, adsm__cu_result r, const char *what, char *buf,
                                     size_t size) {
    snprintf(buf, size, "%s: %s (%s)", what, adsm__cu_name(c, r), adsm__cu_text(c, r));
}

/* The adsm code for a driver error: kernel faults poison the context (CUDA's sticky errors). */
ADSM__PRIVATE adsm_result adsm__cu_code(adsm__cu_result r) {
    switch (r) {
    case ADSM__CUDA_ERROR_OUT_OF_MEMORY: return ADSM_ERROR_DEVICE_OUT_OF_MEMORY;
    case ADSM__CUDA_ERROR_ILLEGAL_ADDRESS: case ADSM__CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case ADSM__CUDA_ERROR_MISALIGNED_ADDRESS: case ADSM__CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case ADSM__CUDA_ERROR_HARDWARE_STACK_ERROR: case ADSM__CUDA_ERROR_ASSERT:
    case ADSM__CUDA_ERROR_LAUNCH_FAILED: case ADSM__CUDA_ERROR_LAUNCH_TIMEOUT: case ADSM__CUDA_ERROR_INVALID_PC:
    case ADSM__CUDA_ERROR_ECC_UNCORRECTABLE: case ADSM__CUDA_ERROR_NVLINK_UNCORRECTABLE: /* sticky, as the rest */
        return ADSM_ERROR_KERNEL_CRASHED;
    default: return ADSM_ERROR_DRIVER;
    }
}

ADSM__PRIVATE adsm_result adsm__cu_fail(const adsm__cuda *c, adsm__cu_result r, const char *what) {
    char text[300];
    adsm__cu_describe(c, r, what, text, sizeof text);
    return adsm__fail(adsm__cu_code(r), "cuda backend: %s", text);
}

/* Remembers the first device-side error for adsm_sync; any error after a kernel fault, or any
 * failure of the engine's own calls, marks the device lost (CUDA contexts do not recover). */
ADSM__PRIVATE void adsm__cuda_record_error(adsm__cuda *c, adsm_result code, const char *text, int lost) {
    adsm__device_error_record(&c->errors, code, text);
    if (lost) {
        ADSM__STORE(&c->lost, 1);
        ADSM__ADD(&c->completion_gen, 1);
        adsm__futex_wake_all(&c->completion_gen);
    }
}

/* ---- the calling thread's context --------------------------------------------------------------- */
/* Normal context: makes adsm's context current on the calling thread for a few driver calls and
 * returns the one that was current (the application's own, or NULL) for adsm__cuda_leave. The
 * current context is per-thread state the application may rely on for its own CUDA code. */
ADSM__PRIVATE adsm__cu_context adsm__cuda_enter(adsm__cuda *c) {
    adsm__cu_context prev = NULL;
    if (c->cu.cuCtxGetCurrent(&prev) != 0) prev = NULL;
    if (prev != c->ctx) c->cu.cuCtxSetCurrent(c->ctx);
    return prev;
}

ADSM__PRIVATE void adsm__cuda_leave(adsm__cuda *c, adsm__cu_context prev) {
    if (prev != c->ctx) c->cu.cuCtxSetCurrent(prev);
}

/* ---- loading the driver ---------------------------------------------------------------------- */
ADSM__PRIVATE adsm_result adsm__cuda_open(adsm__cuda *c, const char *configured) {
    static const char *const names[] = {"libcuda.so.1", "libcuda.so"};
    const char *tried = configured[0] ? configured : names[0];
    c->lib = configured[0] ? dlopen(configured, RTLD_NOW | RTLD_LOCAL) : NULL;
    for (size_t i = 0; !configured[0] && !c->lib && i < 2; i++) c->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!c->lib)
        return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE, "cuda backend: no CUDA driver (%s cannot be loaded: %s)",
                          tried, dlerror());
    adsm__pfn_cuGetProcAddress get;
    *(void **)&get = dlsym(c->lib, ADSM__CU_GET_PROC_ADDRESS_SYMBOL); /* POSIX's way round ISO C's rule */
    if (!get)
        return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE,
                          "cuda backend: the CUDA driver is too old (no %s; adsm needs a CUDA 12.0 driver)",
                          ADSM__CU_GET_PROC_ADDRESS_SYMBOL);
    adsm__cu_result r;
    adsm__cu_proc_query_result status;
#define ADSM__CU_RESOLVE(name, version, required, ret, params)                                                     \
    status = 0;                                                                                                    \
    r = get(#name, (void **)&c->cu.name, version < 12000 ? ADSM__CU_ABI_VERSION : version,                        \
            ADSM__CU_GET_PROC_ADDRESS_DEFAULT, &status);                                                           \
    if (r == ADSM__CUDA_ERROR_STUB_LIBRARY)                                                                        \
        return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE,                                                          \
                          "cuda backend: no CUDA driver (%s is the toolkit's stub library, CUDA_ERROR_STUB_LIBRARY)", \
                          tried);                                                                                  \
    if ((r != 0 || status != 0 || !c->cu.name) && required)                                                        \
        return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE,                                                          \
                          "cuda backend: the CUDA driver lacks %s (ABI %d, error %d, status %d); adsm needs CUDA 12.0", \
                          #name, version, (int)r, (int)status);                                                    \
    if (r != 0 || status != 0) c->cu.name = NULL;
    ADSM__CU_FUNCS(ADSM__CU_RESOLVE)
#undef ADSM__CU_RESOLVE
    return ADSM_OK;
}

/* cuInit, the driver version, the device and its primary context. */
ADSM__PRIVATE adsm_result adsm__cuda_device(adsm__cuda *c, int ordinal) {
    char text[300];
    int version = 0, count = 0, vmm = 0;
    adsm__cu_result r = c->cu.cuInit(0);
    if (r == ADSM__CUDA_ERROR_STUB_LIBRARY)
        return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE,
                          "cuda backend: no CUDA driver (the loaded libcuda is the toolkit's stub library)");
    if (r == ADSM__CUDA_ERROR_NO_DEVICE)
        return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE, "cuda backend: the CUDA driver sees no device");
    if (r != 0) {
        adsm__cu_describe(c, r, "cuInit", text, sizeof text);
        return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE, "cuda backend: not available: %s", text);
    }
    if (c->cu.cuDriverGetVersion(&version) != 0 || (c->driver_version = version) < ADSM__CU_ABI_VERSION)
        return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE,
                          "cuda backend: the CUDA driver supports CUDA %d.%d; adsm needs 12.0 or newer",
                          version / 1000, version % 1000 / 10);
    if (c->cu.cuDeviceGetCount(&count) != 0 || count == 0)
        return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE, "cuda backend: the CUDA driver sees no device");
    if (ordinal >= count && c->rt->cfg.cuda_devices == 1)
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "ADSM_DEVICE=%d: there are only %d CUDA devices", ordinal, count);
    if (ordinal >= count)
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "ADSM_DEVICES lists GPU %d; there are only %d CUDA devices",
                          ordinal, count);
    if (c->index == 0) c->ndevices = c->rt->cfg.cuda_devices ? c->rt->cfg.cuda_devices
                                                            : (unsigned)ADSM__MIN(count, ADSM__MAX_DEVICES);
    if (c->index == 0 && c->rt->cfg.cuda_devices == 0 && count > ADSM__MAX_DEVICES)
        adsm__log(ADSM_LOG_WARN, "ADSM_DEVICES=all: adsm drives the first %d of the %d CUDA devices", ADSM__MAX_DEVICES,
                  count);
    if ((r = c->cu.cuDeviceGet(&c->device, ordinal)) != 0) return adsm__cu_fail(c, r, "cuDeviceGet");
    c->cu.cuDeviceGetName(c->device_name, (int)sizeof c->device_name, c->device);
    c->cu.cuDeviceGetAttribute(&c->cc_major, ADSM__CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, c->device);
    c->cu.cuDeviceGetAttribute(&c->cc_minor, ADSM__CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, c->device);
    c->cu.cuDeviceGetAttribute(&c->max_threads, ADSM__CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, c->device);
    c->cu.cuDeviceGetAttribute(&vmm, ADSM__CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, c->device);
    if (c->cu.cuDeviceGetAttribute(&c->pageable_access, ADSM__CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, c->device))
        c->pageable_access = 0;
    if (!vmm)
        return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE,
                          "cuda backend: device %d (%s) lacks virtual memory management (cuMemMap)", ordinal,
                          c->device_name);
    if ((r = c->cu.cuDevicePrimaryCtxRetain(&c->ctx, c->device)) != 0)
        return adsm__cu_fail(c, r, "cuDevicePrimaryCtxRetain");
    c->ctx_retained = 1;
    if (c->cu.cuCtxGetCurrent(&c->init_prev) != 0) c->init_prev = NULL;
    if ((r = c->cu.cuCtxSetCurrent(c->ctx)) != 0) return adsm__cu_fail(c, r, "cuCtxSetCurrent");
    c->init_entered = 1; /* initialisation runs on this thread with adsm's context; restored after */
    size_t free_bytes = 0, total = 0;
    if ((r = c->cu.cuMemGetInfo(&free_bytes, &total)) != 0) return adsm__cu_fail(c, r, "cuMemGetInfo");
    c->capacity = free_bytes;
    c->has_param_info = c->cu.cuFuncGetParamInfo != NULL;
    return ADSM_OK;
}

#endif /* ADSM__CUDA_DEVICE_INCLUDED */
