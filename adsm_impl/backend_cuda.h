/* adsm_impl/backend_cuda.h -- the CUDA driver API backend.
 *
 * The driver is opened with dlopen (ADSM_CUDA_DRIVER, else libcuda.so.1, else libcuda.so) and
 * every entry point comes from cuGetProcAddress at the ABI version listed in cuda_driver.h, so
 * adsm builds without CUDA installed. Shared objects keep one address on both sides when the
 * driver lets the device range sit where the host range is (or the host range move onto the
 * device range, as GMAC did); otherwise device addresses are host addresses plus one constant,
 * and pointer arguments are translated at each launch. Device memory is VMM memory mapped in
 * granules on demand. With several GPUs (ADSM_DEVICES) each has its own context of this kind:
 * device 0 may keep the host's addresses, the others translate; an object's memory is mapped on a
 * GPU only while it is resident there (dev_map), and GPU-to-GPU copies are cuMemcpyPeerAsync on
 * the destination's engine (peer_copy), with peer access granted on every mapping. Copies go through pinned staging buffers, two per direction, so the CPU
 * copy of one chunk overlaps the DMA of the next.
 *
 * Contexts: to_device/from_device/drain/wait run in the SIGSEGV handler (from_device with the
 * runtime lock let go, see protocol.h), so they only queue commands and wait on futexes. Every
 * driver call that moves data, maps memory or launches is made by the engine thread, the worker
 * of a copy_queue.h queue, in queue order; it also keeps the streams ordered with events (copies
 * after the kernels queued before them, kernels after the copies queued before them). The
 * completion thread waits for kernel events and publishes finished launches. Neither thread
 * ever takes the runtime lock. Initialisation, shutdown, module loading and kernel lookup run in
 * normal thread context. */
#ifndef ADSM__BACKEND_CUDA_INCLUDED
#define ADSM__BACKEND_CUDA_INCLUDED

#include "common.h"
#include "os.h"
#include "blocktree.h"
#include "arena.h"
#include "config.h"
#include "copy.h"
#include "copy_queue.h"
#include "trace.h"
#include "runtime.h"
#include "reservation.h"
#include "device_error.h"
#include "backend.h"
#include "kernel.h"
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
    adsm__range writable[ADSM__MAX_PARAMS], inputs[ADSM__MAX_PARAMS];
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
    uint64_t last_kernel_done_ns;              /* ADSM_TRACE: when the completion thread saw the last end */
    const adsm_kernel_desc *last_kernel; /* engine thread: the newest launch, to name in faults */
    uint64_t issued_seq, completed_seq;
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

/* ---- address space ------------------------------------------------------------------------- */
/* adsm keeps device addresses in its shared half; the driver's are offset by delta (0 when the
 * device range sits at the host addresses). */
ADSM__PRIVATE adsm__cu_deviceptr adsm__cuda_dptr(const adsm__cuda *c, uintptr_t dev) {
    return (adsm__cu_deviceptr)dev + (adsm__cu_deviceptr)c->delta;
}

ADSM__PRIVATE adsm__cu_mem_alloc_prop adsm__cuda_prop(const adsm__cuda *c) {
    adsm__cu_mem_alloc_prop prop;
    memset(&prop, 0, sizeof prop);
    prop.type = ADSM__CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requested_handle_types = ADSM__CU_MEM_HANDLE_TYPE_NONE;
    prop.location.type = ADSM__CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = c->device;
    return prop;
}

ADSM__PRIVATE adsm__cu_result adsm__cuda_map_run(adsm__cuda *c, size_t g, size_t count, adsm__cu_mem_handle *handle);
ADSM__PRIVATE void adsm__cuda_unmap_run(adsm__cuda *c, size_t g, size_t count, adsm__cu_mem_handle handle);

/* Checks that device memory really works at the start of the range just placed: map a granule,
 * fill it on the device, read it back. Guards the moved-reservation case, where adsm replaced
 * the driver's host placeholder. */
ADSM__PRIVATE int adsm__cuda_probe(adsm__cuda *c) {
    unsigned char back[256];
    adsm__cu_mem_handle h = 0;
    int ok = 0;
    if (adsm__cuda_map_run(c, 0, 1, &h) == 0) {
        adsm__cu_deviceptr at = adsm__cuda_dptr(c, c->base);
        memset(back, 0, sizeof back);
        ok = c->cu.cuMemsetD8Async(at, 0x5a, sizeof back, NULL) == 0 &&
             c->cu.cuMemcpyDtoHAsync(back, at, sizeof back, NULL) == 0 && c->cu.cuCtxSynchronize() == 0 &&
             back[0] == 0x5a && back[sizeof back - 1] == 0x5a;
        adsm__cuda_unmap_run(c, 0, 1, h);
    }
    return ok;
}

/* Gives the driver back a device range adsm's host reservation was moved onto: a plain
 * placeholder mapped over adsm's own mapping (MAP_FIXED over what adsm holds, never after a
 * munmap), then cuMemAddressFree. After that the range is not adsm's: never unmap it. */
ADSM__PRIVATE void adsm__cuda_give_back(adsm__cuda *c, adsm__cu_deviceptr va, size_t size) {
    mmap((void *)(uintptr_t)va, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    c->cu.cuMemAddressFree(va, size);
}

/* Puts the device range for adsm's shared half [base, base + half): at the same address if the
 * driver takes the hint; else the host reservation moves onto a device range the driver chose
 * (GMAC's order); else any device range, with translation. */
ADSM__PRIVATE adsm_result adsm__cuda_address_space(adsm__cuda *c, adsm__runtime *rt) {
    adsm__cu_result r;
    adsm__cu_deviceptr got = 0;
    size_t align = ADSM__MAX(c->granule, rt->cfg.block_size);
    /* one virtual address names one mapping in the whole process: only the first device can have
     * the host's addresses, every other one takes a range of its own */
    if (rt->cfg.cuda_same_address && c->index == 0) {
        r = c->cu.cuMemAddressReserve(&got, c->half, align, (adsm__cu_deviceptr)c->base, 0);
        if (r == 0 && got == c->base && adsm__cuda_probe(c)) {
            c->va = got;
            c->va_size = c->half;
            return ADSM_OK;
        }
        if (r == 0) c->cu.cuMemAddressFree(got, c->half);
        /* A range for the whole reservation (both halves), then the host side moves onto it. */
        r = c->cu.cuMemAddressReserve(&got, 2 * c->half, align, 0, 0);
        if (r == 0 && adsm__move_reservation(rt, (uintptr_t)got) == ADSM_OK) {
            c->base = rt->base;
            c->va = got;
            c->va_size = 2 * c->half;
            c->va_moved_host = 1;
            if (adsm__cuda_probe(c)) {
                adsm__log(ADSM_LOG_INFO, "cuda: host reservation moved onto the device range at %p", (void *)c->base);
                return ADSM_OK;
            }
            adsm__log(ADSM_LOG_WARN, "cuda: device memory does not work under a moved host reservation");
            adsm_result moved = adsm__replace_reservation(rt);
            if (moved != ADSM_OK) return moved; /* still on got: shutdown gives it back */
            c->base = rt->base;
            c->va = 0;
            c->va_moved_host = 0;
            adsm__cuda_give_back(c, got, 2 * c->half);
        } else if (r == 0) {
            c->cu.cuMemAddressFree(got, 2 * c->half);
        }
    }
    if ((r = c->cu.cuMemAddressReserve(&got, c->half, align, 0, 0)) != 0)
        return adsm__cu_fail(c, r, "cuMemAddressReserve");
    c->va = got;
    c->va_size = c->half;
    c->delta = (intptr_t)(got - (adsm__cu_deviceptr)c->base);
    adsm__log(rt->cfg.cuda_same_address && c->index == 0 ? ADSM_LOG_WARN : ADSM_LOG_INFO,
              "cuda: device %u's addresses differ from host addresses by %+lld bytes; pointer arguments are "
              "translated at each launch, and its kernels cannot follow pointers stored in shared memory",
              c->index, (long long)c->delta);
    return ADSM_OK;
}

/* ---- device memory in runs of granules ------------------------------------------------------- */
/* Who may use this device's memory: the device itself, and the other devices adsm drives that
 * have peer access to it (they read it directly in device-to-device copies). */
ADSM__PRIVATE size_t adsm__cuda_access(const adsm__cuda *c, adsm__cu_mem_access_desc *access) {
    size_t n = 0;
    memset(access, 0, (1 + c->npeers) * sizeof *access);
    access[n].location.type = ADSM__CU_MEM_LOCATION_TYPE_DEVICE;
    access[n].location.id = c->device;
    access[n++].flags = ADSM__CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (unsigned p = 0; p < c->npeers; p++) {
        access[n].location.type = ADSM__CU_MEM_LOCATION_TYPE_DEVICE;
        access[n].location.id = c->peers[p];
        access[n++].flags = ADSM__CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    return n;
}

/* Backs `count` granules from granule g with one allocation: one cuMemCreate, cuMemMap and
 * cuMemSetAccess however large the run. */
ADSM__PRIVATE adsm__cu_result adsm__cuda_map_run(adsm__cuda *c, size_t g, size_t count, adsm__cu_mem_handle *handle) {
    adsm__cu_mem_alloc_prop prop = adsm__cuda_prop(c);
    adsm__cu_deviceptr at = adsm__cuda_dptr(c, c->base + g * c->granule);
    size_t size = count * c->granule;
    adsm__cu_mem_handle h = 0;
    adsm__cu_result r = c->cu.cuMemCreate(&h, size, &prop, 0);
    if (r != 0) return r;
    if ((r = c->cu.cuMemMap(at, size, 0, h, 0)) != 0) {
        c->cu.cuMemRelease(h);
        return r;
    }
    adsm__cu_mem_access_desc access[1 + ADSM__MAX_DEVICES];
    size_t naccess = adsm__cuda_access(c, access);
    if ((r = c->cu.cuMemSetAccess(at, size, access, naccess)) != 0) {
        c->cu.cuMemUnmap(at, size);
        c->cu.cuMemRelease(h);
        return r;
    }
    *handle = h;
    return 0;
}

/* The driver unmaps only whole mappings: a run goes as it came. */
ADSM__PRIVATE void adsm__cuda_unmap_run(adsm__cuda *c, size_t g, size_t count, adsm__cu_mem_handle handle) {
    c->cu.cuMemUnmap(adsm__cuda_dptr(c, c->base + g * c->granule), count * c->granule);
    c->cu.cuMemRelease(handle);
}

/* Whether granule g lies wholly inside [dev, dev + n): then no other object can use it. */
ADSM__PRIVATE int adsm__cuda_owns_granule(const adsm__cuda *c, size_t g, uintptr_t dev, size_t n) {
    uintptr_t at = c->base + g * c->granule;
    return at >= dev && at + c->granule <= dev + n;
}

/* The length of the run to map from unmapped granule g (at most to `last`): granules the object
 * [dev, dev + n) owns wholly go in one run; one it shares with neighbours (adsm packs small
 * objects into pages) is a run of its own, so it can stay mapped while a neighbour lives. */
ADSM__PRIVATE size_t adsm__cuda_run_length(const adsm__cuda *c, size_t g, size_t last, uintptr_t dev, size_t n) {
    size_t k = 1;
    if (!adsm__cuda_owns_granule(c, g, dev, n)) return 1;
    while (g + k <= last && c->granule_refs[g + k] == 0 && adsm__cuda_owns_granule(c, g + k, dev, n)) k++;
    return k;
}

ADSM__PRIVATE void adsm__cuda_unmap(adsm__cuda *c, uintptr_t dev, size_t n);

/* Engine thread: backs [dev, dev + n); every granule counts the objects that use it. */
ADSM__PRIVATE adsm__cu_result adsm__cuda_map(adsm__cuda *c, uintptr_t dev, size_t n) {
    size_t first = (dev - c->base) / c->granule, last = (dev + n - 1 - c->base) / c->granule;
    for (size_t g = first, k; g <= last; g += k) {
        k = 1;
        if (c->granule_refs[g] == 0) {
            k = adsm__cuda_run_length(c, g, last, dev, n);
            adsm__cu_result r = adsm__cuda_map_run(c, g, k, &c->granule_handles[g]);
            if (r != 0) {
                if (g > first) adsm__cuda_unmap(c, dev, c->base + g * c->granule - dev); /* what was done */
                return r;
            }
            c->granule_run[g] = (uint32_t)k;
        }
        for (size_t i = 0; i < k; i++) c->granule_refs[g + i]++;
    }
    return 0;
}

/* Engine thread: unmaps the run that starts at granule g once none of its granules is used. */
ADSM__PRIVATE void adsm__cuda_release_run(adsm__cuda *c, size_t g) {
    size_t k = c->granule_run[g];
    for (size_t i = 0; i < k; i++)
        if (c->granule_refs[g + i]) return;
    if (k == 0) return;
    adsm__cuda_unmap_run(c, g, k, c->granule_handles[g]);
    c->granule_run[g] = 0;
    c->granule_handles[g] = 0;
}

/* Engine thread: [dev, dev + n) is no longer used. Runs lie inside the object that made them (they
 * are granules it owned wholly) or are single shared granules, so every run that can go starts
 * in [first, last]. */
ADSM__PRIVATE void adsm__cuda_unmap(adsm__cuda *c, uintptr_t dev, size_t n) {
    size_t first = (dev - c->base) / c->granule, last = (dev + n - 1 - c->base) / c->granule;
    for (size_t g = first; g <= last; g++)
        if (c->granule_refs[g] > 0) c->granule_refs[g]--;
    for (size_t g = first; g <= last; g++) adsm__cuda_release_run(c, g);
}

/* ---- page-locked host ranges ---------------------------------------------------------------- */
/* Signal-safe: whether [host, host + n) lies in one page-locked range. Page-locking is for the
 * process (CU_MEMHOSTREGISTER_PORTABLE: every GPU's context DMAs the pages), and the first GPU's
 * backend, which adsm__cuda_host_lock is called on, keeps the ranges: every GPU asks it, so no
 * fetch from another GPU moves a staging slot over pinned pages (DMA would miss the object). */
ADSM__PRIVATE int adsm__cuda_is_locked(adsm__cuda *gpu, uintptr_t host, size_t n) {
    adsm__cuda *c = (adsm__cuda *)gpu->rt->dev_ctx[0];
    adsm__lock(&c->locked_lock);
    adsm__tree_node *r = adsm__tree_find(&c->locked, host);
    int whole = r && host + n <= r->end;
    adsm__unlock(&c->locked_lock);
    return whole;
}

ADSM__PRIVATE int adsm__cuda_host_direct(void *ctx, uintptr_t host, size_t n) {
    return adsm__cuda_is_locked((adsm__cuda *)ctx, host, n);
}

/* Engine thread: waits until everything queued on the stream so far has run. Through a
 * blocking-sync event: cuStreamSynchronize spins a core under the primary context's default
 * scheduling (CU_CTX_SCHED_AUTO), which adsm must not change for the application. */
ADSM__PRIVATE adsm__cu_result adsm__cuda_stream_wait(adsm__cuda *c, adsm__cu_stream stream) {
    adsm__cu_result r = c->cu.cuEventRecord(c->drained, stream);
    return r == 0 ? c->cu.cuEventSynchronize(c->drained) : r;
}

/* Engine: calls fn for each launch on this device still in flight (issued, not yet seen done)
 * numbered up to `upto`, oldest first. At most ADSM__CUDA_EVENTS of them (the launch guard). */
ADSM__PRIVATE void adsm__cuda_in_flight(adsm__cuda *c, uint64_t upto, void (*fn)(adsm__cuda *c, unsigned slot, void *arg),
                                        void *arg) {
    uint64_t last = ADSM__MIN(upto, ADSM__LOAD(&c->issued_seq));
    for (uint64_t seq = ADSM__LOAD(&c->completed_seq) + 1; seq <= last; seq++) {
        unsigned slot = (unsigned)(seq % ADSM__CUDA_EVENTS);
        if (c->kev_seq[slot] == seq) fn(c, slot, arg);
    }
}

/* The newest in-flight launch on each stream, by event slot (-1: none). */
ADSM__PRIVATE void adsm__cuda_newest_per_stream(adsm__cuda *c, unsigned slot, void *arg) {
    ((int *)arg)[c->kev_stream[slot]] = (int)slot;
}

/* Engine: makes `stream` (the upload stream) wait for the memsets, device copies and maps queued
 * so far and for the launches numbered up to `after` (an upload changes what they may read):
 * every launch queued so far for ADSM__EVERY_LAUNCH or with one kernel stream; with several, the
 * newest such launch on each stream (a stream runs in order). */
ADSM__PRIVATE adsm__cu_result adsm__cuda_after_launches(adsm__cuda *c, adsm__cu_stream stream, uint64_t after) {
    adsm__cu_result r = c->cu.cuStreamWaitEvent(stream, c->ops_last, 0);
    if (after == ADSM__EVERY_LAUNCH || c->nstreams == 1) {
        for (unsigned i = 0; r == 0 && i < c->nstreams; i++) r = c->cu.cuStreamWaitEvent(stream, c->ks_last[i], 0);
        return r;
    }
    int newest[ADSM__CUDA_MAX_STREAMS];
    for (unsigned i = 0; i < c->nstreams; i++) newest[i] = -1;
    adsm__cuda_in_flight(c, after, adsm__cuda_newest_per_stream, newest);
    for (unsigned i = 0; r == 0 && i < c->nstreams; i++)
        if (newest[i] >= 0) r = c->cu.cuStreamWaitEvent(stream, c->kev[newest[i]], 0);
    return r;
}

/* A direct copy: the driver's DMA reads or writes the host pages themselves, whatever their page
 * protection. A download, and an upload somebody waits for, is waited for before the engine
 * retires the command. An asynchronous upload (an eviction, a launch's flush) is not: the engine
 * goes on to the next command while the DMA runs, so back-to-back evictions keep the link busy
 * instead of idling one wake-up per block, and the next drain waits for the upload stream
 * (ADSM__CMD_SETTLE), so a drain still means "no copy reads host pages any more" (the protocols
 * rely on it before a CPU write). Everything later on the device is ordered after it by events. */
ADSM__PRIVATE adsm__cu_result adsm__cuda_direct(adsm__cuda *c, const adsm__cuda_op *op, int to_device) {
    adsm__cu_result r;
    if (to_device) {
        r = adsm__cuda_after_launches(c, c->h2d, op->seq);
        if (r == 0) r = c->cu.cuMemcpyHtoDAsync(adsm__cuda_dptr(c, op->dst), (const void *)op->src, op->n, c->h2d);
        if (r == 0) r = c->cu.cuEventRecord(c->h2d_last, c->h2d);
        if (r == 0 && op->async) ADSM__STORE(&c->h2d_reading, 1); /* before the command retires */
        else if (r == 0) r = adsm__cuda_stream_wait(c, c->h2d);
    } else {
        r = c->cu.cuStreamWaitEvent(c->d2h, c->h2d_last, 0);
        if (r == 0) r = c->cu.cuStreamWaitEvent(c->d2h, c->ops_last, 0);
        if (r == 0) r = c->cu.cuMemcpyDtoHAsync((void *)op->dst, adsm__cuda_dptr(c, op->src), op->n, c->d2h);
        if (r == 0) r = adsm__cuda_stream_wait(c, c->d2h);
    }
    return r;
}

/* ---- the engine: every copy and launch, in queue order ------------------------------------- */
ADSM__PRIVATE adsm__cu_result adsm__cuda_do_h2d(adsm__cuda *c, const adsm__cuda_op *op) {
    if (adsm__cuda_is_locked(c, op->src, op->n)) return adsm__cuda_direct(c, op, 1);
    ADSM__ADD(&c->rt->stats.staged_bytes, op->n);
    adsm__cu_result r = adsm__cuda_after_launches(c, c->h2d, op->seq);
    for (size_t off = 0; r == 0 && off < op->n; off += c->stage_size) {
        size_t len = ADSM__MIN(c->stage_size, op->n - off);
        int s = c->h2d_next;
        c->h2d_next = (s + 1) % ADSM__CUDA_SLOTS;
        if ((r = c->cu.cuEventSynchronize(c->h2d_slot_ev[s])) != 0) break; /* the slot's last DMA is done */
        adsm__copy_out(c->h2d_stage[s], (const void *)(op->src + off), len);
        if ((r = c->cu.cuMemcpyHtoDAsync(adsm__cuda_dptr(c, op->dst + off), c->h2d_stage[s], len, c->h2d)) != 0)
            break;
        r = c->cu.cuEventRecord(c->h2d_slot_ev[s], c->h2d);
    }
    if (r == 0) r = c->cu.cuEventRecord(c->h2d_last, c->h2d);
    return r;
}

/* Device -> staging in chunks, each chunk's DMA overlapping the copy-out of the one before. */
ADSM__PRIVATE adsm__cu_result adsm__cuda_do_d2h(adsm__cuda *c, const adsm__cuda_op *op) {
    if (adsm__cuda_is_locked(c, op->dst, op->n)) return adsm__cuda_direct(c, op, 0);
    ADSM__ADD(&c->rt->stats.staged_bytes, op->n);
    /* Sees every earlier upload, memset and device copy. Kernels are not waited for here: the
     * protocols wait for the kernel that may write a block before fetching it, and fetches of
     * other objects may overlap a running kernel. */
    adsm__cu_result r = c->cu.cuStreamWaitEvent(c->d2h, c->h2d_last, 0);
    if (r == 0) r = c->cu.cuStreamWaitEvent(c->d2h, c->ops_last, 0);
    size_t nchunks = (op->n + c->stage_size - 1) / c->stage_size;
    for (size_t k = 0; r == 0 && k <= nchunks; k++) {
        if (k < nchunks) { /* issue chunk k */
            size_t off = k * c->stage_size, len = ADSM__MIN(c->stage_size, op->n - off);
            int s = (int)(k % ADSM__CUDA_SLOTS);
            r = c->cu.cuMemcpyDtoHAsync(c->d2h_stage[s], adsm__cuda_dptr(c, op->src + off), len, c->d2h);
            if (r == 0) r = c->cu.cuEventRecord(c->d2h_slot_ev[s], c->d2h);
        }
        if (r == 0 && k > 0) { /* drain chunk k - 1 */
            size_t off = (k - 1) * c->stage_size, len = ADSM__MIN(c->stage_size, op->n - off);
            int s = (int)((k - 1) % ADSM__CUDA_SLOTS);
            r = c->cu.cuEventSynchronize(c->d2h_slot_ev[s]);
            if (r == 0) memcpy((void *)(op->dst + off), c->d2h_stage[s], len); /* writable: copy.h */
        }
    }
    return r;
}

/* A device-to-device copy into this device, on its upload stream: after the kernels queued here
 * before it (one may still read the old bytes), before the ones after it, landed when it returns
 * (the source device may overwrite its side next). */
ADSM__PRIVATE adsm__cu_result adsm__cuda_do_peer(adsm__cuda *c, const adsm__cuda_op *op) {
    adsm__cuda *src = op->peer;
    adsm__cu_result r = adsm__cuda_after_launches(c, c->h2d, ADSM__EVERY_LAUNCH);
    if (r == 0)
        r = c->cu.cuMemcpyPeerAsync(adsm__cuda_dptr(c, op->dst), c->ctx, adsm__cuda_dptr(src, op->src), src->ctx,
                                    op->n, c->h2d);
    if (r == 0) r = c->cu.cuEventRecord(c->h2d_last, c->h2d);
    if (r == 0) r = adsm__cuda_stream_wait(c, c->h2d);
    return r;
}

/* Work on a kernel stream (launches, memsets, device copies) waits for earlier uploads, memsets,
 * device copies and maps. */
ADSM__PRIVATE adsm__cu_result adsm__cuda_kernel_stream_ready(adsm__cuda *c, adsm__cu_stream stream) {
    adsm__cu_result r = c->cu.cuStreamWaitEvent(stream, c->h2d_last, 0);
    return r == 0 ? c->cu.cuStreamWaitEvent(stream, c->ops_last, 0) : r;
}

/* Memsets and device copies run on the ops stream, after the earlier ones (stream order) and
 * after every upload and launch queued before them (they carry no accesses to order them more
 * finely). */
ADSM__PRIVATE adsm__cu_result adsm__cuda_ops_ready(adsm__cuda *c) {
    adsm__cu_result r = c->cu.cuStreamWaitEvent(c->ops, c->h2d_last, 0);
    for (unsigned i = 0; r == 0 && i < c->nstreams; i++) r = c->cu.cuStreamWaitEvent(c->ops, c->ks_last[i], 0);
    return r;
}

/* Whether launch a writes anything launch b reads or writes. */
ADSM__PRIVATE int adsm__cuda_writes_into(const adsm__cuda_launch_access *a, const adsm__cuda_launch_access *b) {
    return adsm__ranges_meet(a->writable, a->nwritable, b->writable, b->nwritable) ||
           adsm__ranges_meet(a->writable, a->nwritable, b->inputs, b->ninputs);
}

typedef struct adsm__cuda_ordering {
    const adsm__cuda_launch_access *access;
    unsigned stream;
    adsm__cu_result r;
} adsm__cuda_ordering;

/* A launch on another stream whose accesses conflict with the new one's: the new one waits. */
ADSM__PRIVATE void adsm__cuda_order_after(adsm__cuda *c, unsigned slot, void *arg) {
    adsm__cuda_ordering *o = (adsm__cuda_ordering *)arg;
    const adsm__cuda_launch_access *earlier = &c->kev_access[slot];
    if (o->r != 0 || c->kev_stream[slot] == o->stream) return; /* same stream: in order anyway */
    if (adsm__cuda_writes_into(earlier, o->access) || adsm__cuda_writes_into(o->access, earlier))
        o->r = c->cu.cuStreamWaitEvent(c->ks[o->stream], c->kev[slot], 0);
}

/* Engine: the stream a launch runs on (in turn), made to wait for the earlier launches in flight
 * whose accesses conflict with its own (read after write, write after read, write after write). */
ADSM__PRIVATE adsm__cu_result adsm__cuda_launch_stream(adsm__cuda *c, adsm__cuda_cmd *cmd, unsigned *stream) {
    *stream = c->next_stream;
    c->next_stream = (c->next_stream + 1) % c->nstreams;
    adsm__cu_result r = adsm__cuda_kernel_stream_ready(c, c->ks[*stream]);
    if (r != 0 || c->nstreams == 1) return r;
    adsm__cuda_ordering o = {&cmd->access, *stream, 0};
    adsm__cuda_in_flight(c, cmd->op.seq, adsm__cuda_order_after, &o);
    return o.r;
}

ADSM__PRIVATE adsm__cu_result adsm__cuda_do_launch(adsm__cuda *c, adsm__cuda_cmd *cmd, unsigned stream, char *text,
                                                   size_t size) {
    const adsm__cuda_op *op = &cmd->op;
    const adsm_kernel_desc *k = op->kernel;
    void *params[ADSM__MAX_PARAMS + 1];
    for (unsigned i = 0; i < k->nparams; i++) params[i] = cmd->args + k->params[i].offset;
    params[k->nparams] = NULL;
    adsm__cu_result r = c->cu.cuLaunchKernel(op->fn, op->grid[0], op->grid[1], op->grid[2], op->block[0], op->block[1],
                                             op->block[2], 0, c->ks[stream], params, NULL);
    if (r != 0) {
        char what[160];
        snprintf(what, sizeof what, "kernel '%s': cuLaunchKernel", k->name);
        adsm__cu_describe(c, r, what, text, size);
    }
    return r;
}

/* Engine thread: one command. Returns 0, or -1 when it failed (the error is recorded). */
ADSM__PRIVATE int adsm__cuda_execute(adsm__cuda *c, adsm__cuda_cmd *cmd) {
    adsm__cuda_op *op = &cmd->op;
    char text[400];
    const char *what = "";
    adsm__cu_result r = 0;
    uint64_t t0 = adsm__now_ns();
    switch (op->type) {
    case ADSM__CMD_H2D:
        what = "cuMemcpyHtoDAsync";
        r = adsm__cuda_do_h2d(c, op);
        adsm__copy_timed(c->rt, 1, t0, op->dst, op->n);
        break;
    case ADSM__CMD_D2H:
        what = "cuMemcpyDtoHAsync";
        r = adsm__cuda_do_d2h(c, op);
        adsm__copy_timed(c->rt, 0, t0, op->src, op->n);
        break;
    case ADSM__CMD_D2D:
    case ADSM__CMD_MEMSET:
        what = op->type == ADSM__CMD_D2D ? "cuMemcpyDtoDAsync" : "cuMemsetD8Async";
        r = adsm__cuda_ops_ready(c);
        if (r == 0 && op->type == ADSM__CMD_D2D)
            r = c->cu.cuMemcpyDtoDAsync(adsm__cuda_dptr(c, op->dst), adsm__cuda_dptr(c, op->src), op->n, c->ops);
        else if (r == 0)
            r = c->cu.cuMemsetD8Async(adsm__cuda_dptr(c, op->dst), (unsigned char)op->value, op->n, c->ops);
        if (r == 0) r = c->cu.cuEventRecord(c->ops_last, c->ops);
        break;
    case ADSM__CMD_PEER:
        what = "cuMemcpyPeerAsync";
        r = adsm__cuda_do_peer(c, op);
        break;
    case ADSM__CMD_MAP:
        what = "cuMemCreate/cuMemMap";
        r = adsm__cuda_map(c, op->dst, op->n);
        /* starts zeroed; nothing else can use a range just mapped, so this waits for nothing */
        if (r == 0) r = c->cu.cuMemsetD8Async(adsm__cuda_dptr(c, op->dst), 0, op->n, c->ops);
        if (r == 0) r = c->cu.cuEventRecord(c->ops_last, c->ops);
        op->status = r == ADSM__CUDA_ERROR_OUT_OF_MEMORY ? 1 : 0;
        if (r == ADSM__CUDA_ERROR_OUT_OF_MEMORY) return -1; /* not fatal: the allocation fails */
        break;
    case ADSM__CMD_UNMAP:
        what = "cuMemUnmap";
        /* copies in flight may still use the range; no kernel does (dev_free's callers waited
         * for those using it), and the kernels using other objects keep running */
        r = adsm__cuda_stream_wait(c, c->h2d);
        if (r == 0) r = adsm__cuda_stream_wait(c, c->d2h);
        if (r == 0) r = adsm__cuda_stream_wait(c, c->ops);
        if (r == 0) adsm__cuda_unmap(c, op->dst, op->n);
        break;
    case ADSM__CMD_UNREGISTER:
        /* copies in flight may still read or write the pages */
        r = adsm__cuda_stream_wait(c, c->h2d);
        if (r == 0) r = adsm__cuda_stream_wait(c, c->d2h);
        (void)c->cu.cuMemHostUnregister((void *)op->dst);
        break;
    case ADSM__CMD_SETTLE: /* a drain: asynchronous direct uploads done reading host pages */
        what = "cuEventSynchronize";
        if (ADSM__LOAD(&c->h2d_reading)) r = adsm__cuda_stream_wait(c, c->h2d);
        if (r == 0) ADSM__STORE(&c->h2d_reading, 0);
        break;
    case ADSM__CMD_LAUNCH: {
        uint64_t seq = op->seq;
        unsigned slot = (unsigned)(seq % ADSM__CUDA_EVENTS);
        for (;;) { /* the event slot is free once the completion thread is past it */
            int gen = ADSM__LOAD(&c->completion_gen);
            if (seq - ADSM__LOAD(&c->completed_seq) <= ADSM__CUDA_EVENTS || ADSM__LOAD(&c->lost)) break;
            adsm__futex_wait(&c->completion_gen, gen);
        }
        unsigned stream = 0;
        r = adsm__cuda_launch_stream(c, cmd, &stream);
        if (r == 0)
            r = adsm__cuda_do_launch(c, cmd, stream, text, sizeof text);
        else
            adsm__cu_describe(c, r, "cuStreamWaitEvent before a launch", text, sizeof text);
        if (r != 0 && adsm__cu_code(r) != ADSM_ERROR_KERNEL_CRASHED) { /* refused, context still fine */
            adsm__cuda_record_error(c, ADSM_ERROR_LAUNCH_FAILED, text, 0);
            r = 0;
        }
        c->kev_kernel[slot] = op->kernel;
        c->kev_seq[slot] = seq;
        c->kev_stream[slot] = (unsigned char)stream;
        if (c->kev_access) c->kev_access[slot] = cmd->access;
        c->kev_issued_ns[slot] = adsm__now_ns();
        c->last_kernel = op->kernel;
        if (r == 0) r = c->cu.cuEventRecord(c->kev[slot], c->ks[stream]);
        if (r == 0) r = c->cu.cuEventRecord(c->ks_last[stream], c->ks[stream]);
        ADSM__STORE(&c->issued_seq, seq);
        ADSM__ADD(&c->issued_gen, 1);
        adsm__futex_wake_all(&c->issued_gen);
        what = "cuEventRecord";
        break;
    }
    default: break;
    }
    if (r == 0) return 0;
    if (r != (adsm__cu_result)-1 && adsm__cu_code(r) == ADSM_ERROR_KERNEL_CRASHED && c->last_kernel) {
        /* a sticky fault surfaces at whatever call comes next: name the kernel, not the call */
        char where[200];
        snprintf(where, sizeof where, "kernel '%s' (or device work queued before it) failed, seen at %s",
                 c->last_kernel->name, what);
        adsm__cu_describe(c, r, where, text, sizeof text);
    } else if (r != (adsm__cu_result)-1) {
        adsm__cu_describe(c, r, what, text, sizeof text);
    } else {
        snprintf(text, sizeof text, "copying fetched data into host memory failed: %s", strerror(errno));
    }
    adsm__cuda_record_error(c, r == (adsm__cu_result)-1 ? ADSM_ERROR_SYSTEM : adsm__cu_code(r), text, 1);
    return -1;
}

/* Engine thread: one command in queue order; its result for the pusher (0, 1 refused, -1). On a
 * lost device only unmaps still run (a free releases its granules whatever the device did). */
ADSM__PRIVATE int adsm__cuda_engine_step(void *ctx, void *slot) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    adsm__cuda_cmd *cmd = (adsm__cuda_cmd *)slot;
    if (ADSM__LOAD(&c->lost) && cmd->op.type != ADSM__CMD_UNMAP) return -1;
    return adsm__cuda_execute(c, cmd) == 0 ? 0 : (cmd->op.status == 1 ? 1 : -1);
}

ADSM__PRIVATE void adsm__cuda_engine_begin(void *ctx) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    adsm__trace_on(&c->rt->trace, 0, ADSM__TR_NAME, adsm__now_ns(), 0, (uintptr_t) "cuda engine", 0);
    c->cu.cuCtxSetCurrent(c->ctx);
}

/* Signal-safe. Queues a command (without its argument block); with wait, returns its result
 * once it ran. Producers are the runtime lock's holder and faults copying outside it. */
ADSM__PRIVATE int adsm__cuda_run(adsm__cuda *c, const adsm__cuda_op *op, int wait) {
    if (wait) return adsm__queue_call(&c->queue, op, sizeof *op);
    adsm__queue_push(&c->queue, op, sizeof *op, NULL);
    return 0;
}

ADSM__PRIVATE adsm__cuda_op adsm__cuda_range_cmd(int type, uintptr_t dst, uintptr_t src, size_t n) {
    adsm__cuda_op cmd;
    memset(&cmd, 0, sizeof cmd);
    cmd.type = type;
    cmd.dst = dst;
    cmd.src = src;
    cmd.n = n;
    return cmd;
}

/* ---- completion thread --------------------------------------------------------------------- */
/* ADSM_TRACE's kernel span on cuda: the events carry no timing (blocking waits need them without),
 * so a kernel runs, as far as the trace knows, from its launch or (one stream) the previous
 * kernel's end, whichever is later, to when this thread saw it finish. */
ADSM__PRIVATE void adsm__cuda_trace_kernel(adsm__cuda *c, unsigned slot, uint64_t seq) {
    if (!c->rt->trace.events) return;
    uint64_t now = adsm__now_ns(), from = c->kev_issued_ns[slot];
    if (c->nstreams == 1) from = ADSM__MAX(from, c->last_kernel_done_ns);
    adsm__trace_on(&c->rt->trace, ADSM__TRACE_DEVICE_TID, ADSM__TR_KERNEL, from, now, 0, seq);
    c->last_kernel_done_ns = now;
}

ADSM__PRIVATE void *adsm__cuda_completion_main(void *arg) {
    adsm__cuda *c = (adsm__cuda *)arg;
    c->cu.cuCtxSetCurrent(c->ctx);
    for (;;) {
        int gen = ADSM__LOAD(&c->issued_gen);
        uint64_t done = ADSM__LOAD(&c->completed_seq);
        if (ADSM__LOAD(&c->issued_seq) == done) {
            if (ADSM__LOAD(&c->quitting)) return NULL;
            adsm__futex_wait(&c->issued_gen, gen);
            continue;
        }
        uint64_t seq = done + 1;
        unsigned slot = (unsigned)(seq % ADSM__CUDA_EVENTS);
        adsm__cu_result r = ADSM__LOAD(&c->lost) ? 0 : c->cu.cuEventSynchronize(c->kev[slot]);
        if (r != 0) {
            char what[160], text[400];
            /* CUDA errors are sticky: the fault may come from this kernel or from work before it */
            snprintf(what, sizeof what, "kernel '%s' (or device work queued before it) failed",
                     c->kev_kernel[slot] ? c->kev_kernel[slot]->name : "?");
            adsm__cu_describe(c, r, what, text, sizeof text);
            adsm__cuda_record_error(c, adsm__cu_code(r), text, 1);
        }
        adsm__cuda_trace_kernel(c, slot, seq);
        ADSM__STORE(&c->completed_seq, seq);
        ADSM__ADD(&c->completion_gen, 1);
        adsm__futex_wake_all(&c->completion_gen);
    }
}

/* ---- vtable verbs ---------------------------------------------------------------------------- */
ADSM__PRIVATE size_t adsm__cuda_capacity(void *ctx) { return ((adsm__cuda *)ctx)->capacity; }

ADSM__PRIVATE adsm_result adsm__cuda_dev_alloc(void *ctx, uintptr_t dev, size_t span) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    if (ADSM__LOAD(&c->lost)) return adsm__fail(ADSM_ERROR_DEVICE_LOST, "cuda backend: the device is lost");
    adsm__cuda_op cmd = adsm__cuda_range_cmd(ADSM__CMD_MAP, dev, 0, span);
    int status = adsm__cuda_run(c, &cmd, 1);
    if (status == 1)
        return adsm__fail(ADSM_ERROR_DEVICE_OUT_OF_MEMORY, "cuda backend: device %s has no memory left for %zu bytes",
                          c->device_name, span);
    if (status != 0) return adsm__fail(ADSM_ERROR_DEVICE_LOST, "cuda backend: %s", c->errors.text);
    return ADSM_OK;
}

ADSM__PRIVATE void adsm__cuda_dev_free(void *ctx, uintptr_t dev, size_t span) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    adsm__cuda_op cmd = adsm__cuda_range_cmd(ADSM__CMD_UNMAP, dev, 0, span);
    adsm__cuda_run(c, &cmd, 1);
}

/* Signal-safe (a queued command and a futex wait): backs a shared object on this device when it
 * becomes resident here, with several devices. 0, 1 no memory, -1 lost. */
ADSM__PRIVATE int adsm__cuda_dev_map(void *ctx, uintptr_t dev, size_t span) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    if (ADSM__LOAD(&c->lost)) return -1;
    adsm__cuda_op cmd = adsm__cuda_range_cmd(ADSM__CMD_MAP, dev, 0, span);
    return adsm__cuda_run(c, &cmd, 1);
}

ADSM__PRIVATE int adsm__cuda_to_device(void *ctx, uintptr_t dev, uintptr_t host, size_t n, int async, uint64_t after);
ADSM__PRIVATE int adsm__cuda_from_device(void *ctx, uintptr_t host, uintptr_t dev, size_t n);

/* Device to device, run by the destination's engine (after its earlier kernels, before its later
 * ones); returns once the bytes landed. Without cuMemcpyPeerAsync in the driver, through host
 * memory instead. Normal context. */
ADSM__PRIVATE int adsm__cuda_peer_copy(void *dst_ctx, void *src_ctx, uintptr_t dev, size_t n) {
    adsm__cuda *c = (adsm__cuda *)dst_ctx, *src = (adsm__cuda *)src_ctx;
    if (ADSM__LOAD(&c->lost) || ADSM__LOAD(&src->lost)) return -1;
    if (!c->cu.cuMemcpyPeerAsync) {
        void *bounce = malloc(n);
        int rc = !bounce || adsm__cuda_from_device(src, (uintptr_t)bounce, dev, n) != 0 ||
                         adsm__cuda_to_device(c, dev, (uintptr_t)bounce, n, 0, ADSM__EVERY_LAUNCH) != 0
                     ? -1
                     : 0;
        free(bounce);
        return rc;
    }
    adsm__cuda_op cmd = adsm__cuda_range_cmd(ADSM__CMD_PEER, dev, dev, n);
    cmd.peer = src;
    return adsm__cuda_run(c, &cmd, 1) == 0 ? 0 : -1;
}

/* The driver would not page-lock [.., + n). A refusal of the range itself (shared addresses: it is
 * device address space; a system that forbids locking) holds for every object, so adsm stops
 * asking; anything else (out of lockable memory, RLIMIT_MEMLOCK, an error left by an earlier
 * launch) is this object's alone: its copies are staged, and the next object is tried again.
 * Said once each, at info. */
ADSM__PRIVATE void adsm__cuda_note_lock_refusal(adsm__cuda *c, int object, size_t n, adsm__cu_result cr) {
    int never = cr == ADSM__CUDA_ERROR_INVALID_VALUE || cr == ADSM__CUDA_ERROR_NOT_SUPPORTED ||
                cr == ADSM__CUDA_ERROR_NOT_PERMITTED;
    char text[200];
    adsm__cu_describe(c, cr, "cuMemHostRegister", text, sizeof text);
    if (object && never) {
        c->lock_refused = 1;
        adsm__log(ADSM_LOG_INFO, "cuda: the driver refused to page-lock shared memory (%s addresses: %s); copies "
                  "go through pinned staging", c->delta ? "translated" : "shared", text);
    } else if (!c->lock_short_said) {
        c->lock_short_said = 1;
        adsm__log(ADSM_LOG_INFO, "cuda: the driver would not page-lock %zu bytes of %s (%s); their copies go "
                  "through pinned staging, and later allocations are tried again", n,
                  object ? "a shared object" : "adsm_host_alloc memory", text);
    }
}

/* Initialisation, first GPU under shared addresses: the objects' host pages are its device address
 * space (its range sits at their addresses, or the host reservation moved onto it), so they are
 * given a second view, the host alias (reservation.h), which the driver can page-lock and DMA
 * reaches. Without one (ADSM_CUDA_DMA_VIEW=0, or memfd refused) every copy is staged. */
ADSM__PRIVATE void adsm__cuda_alias_host(adsm__cuda *c, adsm__runtime *rt) {
    if (c->index != 0 || c->delta != 0 || !rt->cfg.cuda_dma_view) return;
    if (adsm__alias_shared_half(rt) != 0) {
        adsm__log(ADSM_LOG_INFO, "cuda: shared addresses: cannot give the objects' host pages a second view (%s); "
                  "copies go through pinned staging", strerror(errno));
        return;
    }
    adsm__log(ADSM_LOG_INFO, "cuda: shared addresses: objects' host pages are shared memory with a second view at "
              "%p, page-locked there for DMA (ADSM_CUDA_DMA_VIEW=0 stages every copy instead)",
              (void *)rt->host_alias);
}

/* Normal context, runtime lock not held (object_life.h). Page-locks an object's host pages (or
 * adsm_host_alloc memory): shared objects' through the host alias where there is one. Under
 * shared addresses the reservation's own pages are the first GPU's device address space (the
 * shared half, and the safe half too where the host reservation moved onto a device range):
 * adsm never asks the driver to lock them, as registering pages the unified address space
 * already maps to the device is not a documented use (the driver double refuses it; a driver
 * that took it could shadow the device mapping), and says so once. That is each such object's
 * own case (a safe object's, or every object's without the alias), not a reason to stop
 * locking the others. */
ADSM__PRIVATE int adsm__cuda_host_lock(void *ctx, uintptr_t host, size_t n) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    int aliased = adsm__in_host_alias(c->rt, host, n), reserved = !adsm__outside_reservation(c->rt, host, n);
    int object = aliased || reserved; /* else adsm_host_alloc memory */
    if (reserved && c->delta == 0) {
        if (!c->device_space_said)
            adsm__log(ADSM_LOG_INFO, "cuda: shared addresses: the host pages of %s are device address space, so "
                      "they are not page-locked; their copies go through pinned staging",
                      c->rt->host_alias ? "adsm_safe_alloc objects" : "objects (ADSM_CUDA_DMA_VIEW=0, or no alias)");
        c->device_space_said = 1;
        return 0;
    }
    if (!c->cu.cuMemHostRegister || !c->cu.cuMemHostUnregister || (object && c->lock_refused) ||
        ADSM__LOAD(&c->lost))
        return 0;
    adsm__tree_node *node = (adsm__tree_node *)calloc(1, sizeof *node);
    /* made here, not on the engine: pinning a large object takes long, and the engine's copies
     * for other objects need not wait for it (the driver is thread-safe; no copy uses the range
     * before the object exists) */
    adsm__cu_result cr = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
    if (node) {
        adsm__cu_context prev = adsm__cuda_enter(c);
        cr = c->cu.cuMemHostRegister((void *)host, n, ADSM__CU_MEMHOSTREGISTER_PORTABLE);
        adsm__cuda_leave(c, prev);
    }
    if (cr != 0) {
        free(node);
        adsm__cuda_note_lock_refusal(c, object, n, cr);
        return 0;
    }
    node->start = host;
    node->end = host + n;
    adsm__lock(&c->locked_lock);
    adsm__tree_insert(&c->locked, node);
    adsm__unlock(&c->locked_lock);
    return 1;
}

ADSM__PRIVATE void adsm__cuda_host_unlock(void *ctx, uintptr_t host, size_t n) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    (void)n;
    adsm__lock(&c->locked_lock);
    adsm__tree_node *node = adsm__tree_find(&c->locked, host);
    if (node) adsm__tree_remove(&c->locked, node);
    adsm__unlock(&c->locked_lock);
    if (!node) return;
    adsm__cuda_op cmd = adsm__cuda_range_cmd(ADSM__CMD_UNREGISTER, host, 0, n);
    adsm__cuda_run(c, &cmd, 1);
    free(node);
}

/* An upload follows the launches up to `after` queued on this device (all of them with one kernel
 * stream), and the memsets, device copies and maps before it. */
ADSM__PRIVATE int adsm__cuda_to_device(void *ctx, uintptr_t dev, uintptr_t host, size_t n, int async,
                                       uint64_t after) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    if (ADSM__LOAD(&c->lost)) return -1;
    adsm__cuda_op cmd = adsm__cuda_range_cmd(ADSM__CMD_H2D, dev, host, n);
    cmd.seq = after;
    cmd.async = async;
    return adsm__cuda_run(c, &cmd, !async) == 0 ? 0 : -1;
}

ADSM__PRIVATE int adsm__cuda_from_device(void *ctx, uintptr_t host, uintptr_t dev, size_t n) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    if (ADSM__LOAD(&c->lost)) return -1;
    adsm__cuda_op cmd = adsm__cuda_range_cmd(ADSM__CMD_D2H, host, dev, n);
    return adsm__cuda_run(c, &cmd, 1) == 0 ? 0 : -1;
}

/* Signal-safe: every command queued so far has run, and every upload is done with host memory:
 * a staged one copied it out at once; where an asynchronous direct upload ran since the last
 * settle, its DMA is waited for (ADSM__CMD_SETTLE). Usually nothing is pending and the drain
 * returns at once, as before there were asynchronous direct uploads. */
ADSM__PRIVATE void adsm__cuda_drain(void *ctx) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    adsm__queue_drain(&c->queue); /* the engine sets h2d_reading before it retires the upload */
    if (!ADSM__LOAD(&c->h2d_reading) || ADSM__LOAD(&c->lost)) return;
    adsm__cuda_op cmd = adsm__cuda_range_cmd(ADSM__CMD_SETTLE, 0, 0, 0);
    adsm__cuda_run(c, &cmd, 1);
}

ADSM__PRIVATE int adsm__cuda_wait(void *ctx, uint64_t seq) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    /* with several devices, launch `seq` may have gone elsewhere: this device's launches up to it
     * are done once the last one it was sent is (its completion thread passes every number) */
    uint64_t sent = ADSM__LOAD(&c->sent_seq);
    if (seq > sent) seq = sent;
    return adsm__wait_launch(&c->completed_seq, &c->completion_gen, &c->lost, seq);
}

ADSM__PRIVATE adsm_result adsm__cuda_synchronize(void *ctx) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    adsm__cuda_wait(ctx, ADSM__LOAD(&c->rt->launch_seq));
    return adsm__device_error_take(&c->errors, ADSM__LOAD(&c->lost),
                                   "cuda backend: the device is lost after an earlier error");
}

ADSM__PRIVATE int adsm__cuda_dev_memset(void *ctx, uintptr_t dev, int value, size_t n) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    if (ADSM__LOAD(&c->lost)) return -1;
    adsm__cuda_op cmd = adsm__cuda_range_cmd(ADSM__CMD_MEMSET, dev, 0, n);
    cmd.value = value;
    return adsm__cuda_run(c, &cmd, 1) == 0 ? 0 : -1;
}

ADSM__PRIVATE int adsm__cuda_dev_copy(void *ctx, uintptr_t dst, uintptr_t src, size_t n) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    if (ADSM__LOAD(&c->lost)) return -1;
    adsm__cuda_op cmd = adsm__cuda_range_cmd(ADSM__CMD_D2D, dst, src, n);
    return adsm__cuda_run(c, &cmd, 1) == 0 ? 0 : -1;
}

/* ---- kernels -------------------------------------------------------------------------------- */
/* Checks the module's parameter layout against the ADSM_KERNEL declaration, where the driver can
 * tell (cuFuncGetParamInfo, CUDA 12.4): a size mismatch would hand the kernel garbage. The list
 * ends where the driver answers CUDA_ERROR_INVALID_VALUE; any other error means it cannot tell
 * (CUDA_ERROR_NOT_SUPPORTED, ...), not "no more parameters", so the check is skipped. */
ADSM__PRIVATE adsm_result adsm__cuda_check_params(adsm__cuda *c, const adsm_kernel_desc *k, adsm__cu_function fn) {
    if (!c->has_param_info) return ADSM_OK;
    size_t count = 0, off, size;
    for (; count <= ADSM__MAX_PARAMS; count++) {
        adsm__cu_result r = c->cu.cuFuncGetParamInfo(fn, count, &off, &size);
        if (r == ADSM__CUDA_ERROR_INVALID_VALUE) break;
        if (r != 0) {
            adsm__log(ADSM_LOG_INFO, "cuda: kernel '%s': parameters not checked (cuFuncGetParamInfo: %s)", k->name,
                      adsm__cu_name(c, r));
            return ADSM_OK;
        }
        if (count < k->nparams && size != k->params[count].size)
            return adsm__fail(ADSM_ERROR_INVALID_VALUE,
                              "kernel '%s': parameter %zu '%s' is %zu bytes in ADSM_KERNEL but %zu bytes in the "
                              "loaded module",
                              k->name, count + 1, k->params[count].name, k->params[count].size, size);
    }
    if (count != k->nparams)
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "kernel '%s': ADSM_KERNEL declares %u parameters, the loaded module's "
                          "kernel takes %zu", k->name, k->nparams, count);
    return ADSM_OK;
}

/* Normal context, runtime lock held: the function for a kernel, found by name once. */
ADSM__PRIVATE adsm_result adsm__cuda_function(adsm__cuda *c, const adsm_kernel_desc *k, adsm__cu_function *out) {
    uint64_t key = adsm__cuda_kernel_key(k); /* an lvalue: stb_ds takes its address in C++ */
    ptrdiff_t at = stbds_hmgeti(c->kernels, key);
    if (at >= 0) {
        *out = c->kernels[at].value;
        return ADSM_OK;
    }
    adsm__cu_context prev = adsm__cuda_enter(c);
    adsm__cu_function fn = NULL;
    adsm_result r = ADSM_OK;
    size_t nmodules = (size_t)stbds_arrlen(c->modules);
    for (size_t m = nmodules; m-- > 0 && !fn;) /* the newest module wins */
        if (c->cu.cuModuleGetFunction(&fn, c->modules[m], k->name) != 0) fn = NULL;
    ptrdiff_t ss = fn ? -1 : stbds_hmgeti(c->ss_kernels, key);
    if (ss >= 0) fn = c->ss_kernels[ss].value; /* no hand-written version: the single-source one */
    if (!fn)
        r = adsm__fail(ADSM_ERROR_KERNEL_NOT_FOUND,
                       "kernel '%s': no module loaded with adsm_module_load_* has it (%zu modules loaded)", k->name,
                       nmodules);
    if (fn) r = adsm__cuda_check_params(c, k, fn);
    adsm__cuda_leave(c, prev);
    if (r != ADSM_OK) return r;
    stbds_hmput(c->kernels, key, fn);
    *out = fn;
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__cuda_launch(void *ctx, const adsm__launch *l) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    const adsm_kernel_desc *k = l->kernel;
    adsm__cuda_cmd *cmd;
    adsm__cu_function fn = NULL;
    adsm_result r;
    if (ADSM__LOAD(&c->lost)) return adsm__fail(ADSM_ERROR_DEVICE_LOST, "kernel '%s': the device is lost", k->name);
    if ((r = adsm__cuda_function(c, k, &fn)) != ADSM_OK) return r;
    uint64_t threads = (uint64_t)l->grid.block.x * l->grid.block.y * l->grid.block.z;
    if (threads > (uint64_t)c->max_threads)
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "kernel '%s': %llu threads per block, device %s allows %d", k->name,
                          (unsigned long long)threads, c->device_name, c->max_threads);
    cmd = (adsm__cuda_cmd *)malloc(sizeof *cmd);
    if (!cmd) return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "kernel '%s': out of memory", k->name);
    memset(cmd, 0, offsetof(adsm__cuda_cmd, args));
    cmd->op.type = ADSM__CMD_LAUNCH;
    cmd->op.seq = l->seq;
    cmd->op.kernel = k;
    cmd->op.fn = fn;
    cmd->op.grid[0] = l->grid.grid.x, cmd->op.grid[1] = l->grid.grid.y, cmd->op.grid[2] = l->grid.grid.z;
    cmd->op.block[0] = l->grid.block.x, cmd->op.block[1] = l->grid.block.y, cmd->op.block[2] = l->grid.block.z;
    memcpy(cmd->args, l->args, k->args_size);
    cmd->access.nwritable = (uint32_t)l->nwritable;
    cmd->access.ninputs = (uint32_t)l->ninputs;
    memcpy(cmd->access.writable, l->writable, l->nwritable * sizeof *l->writable);
    memcpy(cmd->access.inputs, l->inputs, l->ninputs * sizeof *l->inputs);
    for (unsigned i = 0; c->delta && i < k->nparams; i++) { /* adsm addresses -> device addresses */
        uintptr_t p;
        if (!adsm__access_is_pointer(k->params[i].access)) continue;
        memcpy(&p, cmd->args + k->params[i].offset, sizeof p);
        if (p < c->base || p >= c->base + c->half) continue;
        p += (uintptr_t)c->delta;
        memcpy(cmd->args + k->params[i].offset, &p, sizeof p);
        ADSM__ADD(&c->rt->stats.translated_args, 1);
    }
    ADSM__STORE(&c->sent_seq, l->seq); /* before the push: a wait must not miss it */
    adsm__queue_push(&c->queue, cmd, offsetof(adsm__cuda_cmd, args) + k->args_size, NULL);
    free(cmd);
    return ADSM_OK;
}

/* ---- modules --------------------------------------------------------------------------------- */
/* Pure: the NVRTC library names to try for a driver of `driver_version` (cuDriverGetVersion),
 * best first. NVRTC N emits PTX of an ISA that drivers older than CUDA N refuse
 * (CUDA_ERROR_UNSUPPORTED_PTX_VERSION), so only the versioned sonames from the driver's major down
 * to 12 (the oldest driver adsm runs on), newest first; then the unversioned name, whose version
 * is checked once loaded. Writes at most cap names; returns how many. */
ADSM__PRIVATE size_t adsm__nvrtc_names(int driver_version, char (*names)[32], size_t cap) {
    size_t n = 0;
    for (int major = driver_version / 1000; major >= ADSM__CU_ABI_VERSION / 1000 && n + 1 < cap; major--)
        snprintf(names[n++], sizeof names[0], "libnvrtc.so.%d", major);
    if (n < cap) snprintf(names[n++], sizeof names[0], "libnvrtc.so");
    return n;
}

/* Pure: whether an NVRTC of this major version may be used with the driver. Sonames carry the
 * major alone, so that is what the choice goes by; a newer minor of the driver's own major
 * compiles to cubins (adsm__nvrtc_wants_cubin). */
ADSM__PRIVATE int adsm__nvrtc_fits(int major, int driver_version) { return major <= driver_version / 1000; }

/* Pure: whether NVRTC major.minor should compile to a cubin for the driver rather than to PTX.
 * The driver refuses PTX of an ISA newer than its own (CUDA_ERROR_UNSUPPORTED_PTX_VERSION): an
 * NVRTC of a later minor release of the driver's major emits such PTX. Cubins built by any minor
 * release of a major load on every driver of that major (minor version compatibility), so that
 * case gets a cubin for the device's own architecture. PTX otherwise: it also runs on GPUs newer
 * than the NVRTC (the driver compiles it). */
ADSM__PRIVATE int adsm__nvrtc_wants_cubin(int major, int minor, int driver_version) {
    return major == driver_version / 1000 && minor > driver_version % 1000 / 10;
}

/* Whether this runtime's NVRTC compiles to cubins (adsm__nvrtc_wants_cubin, and it can). */
ADSM__PRIVATE int adsm__nvrtc_cubin(const adsm__cuda *c) {
    return c->nvrtc.nvrtcGetCUBINSize && c->nvrtc.nvrtcGetCUBIN &&
           adsm__nvrtc_wants_cubin(c->nvrtc.major, c->nvrtc.minor, c->driver_version);
}

/* dlopen's one NVRTC and fills api with its entry points: the handle, or NULL. */
ADSM__PRIVATE void *adsm__nvrtc_load(const char *name, adsm__nvrtc_api *api) {
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
#define ADSM__NVRTC_RESOLVE(fn, ret, params) \
    if (lib && !(*(void **)&api->fn = dlsym(lib, #fn))) {      \
        dlclose(lib);                                          \
        lib = NULL;                                            \
    }
    ADSM__NVRTC_FUNCS(ADSM__NVRTC_RESOLVE)
#undef ADSM__NVRTC_RESOLVE
    if (lib) {
        *(void **)&api->nvrtcGetCUBINSize = dlsym(lib, "nvrtcGetCUBINSize");
        *(void **)&api->nvrtcGetCUBIN = dlsym(lib, "nvrtcGetCUBIN");
    }
    return lib;
}

/* The NVRTC ADSM_NVRTC_LIBRARY names wins, whatever its version (with a warning if the driver
 * may refuse its PTX); otherwise the newest one the driver can load (adsm__nvrtc_names). */
ADSM__PRIVATE adsm_result adsm__nvrtc_open(adsm__cuda *c) {
    const char *configured = c->rt->cfg.nvrtc_library;
    char names[8][32], refused[400] = "";
    int major = 0, minor = 0, dv = c->driver_version;
    size_t n = configured[0] ? 1 : adsm__nvrtc_names(dv, names, 8);
    if (c->nvrtc_lib) return ADSM_OK;
    for (size_t i = 0; i < n && !c->nvrtc_lib; i++) {
        const char *name = configured[0] ? configured : names[i];
        adsm__nvrtc_api api;
        void *lib = adsm__nvrtc_load(name, &api);
        if (!lib || api.nvrtcVersion(&major, &minor) != ADSM__NVRTC_SUCCESS) {
            if (lib) dlclose(lib);
            continue;
        }
        if (!configured[0] && !adsm__nvrtc_fits(major, dv)) { /* PTX the driver would refuse */
            snprintf(refused, sizeof refused, " (%s is NVRTC %d.%d, newer than the CUDA %d.%d driver)", name, major,
                     minor, dv / 1000, dv % 1000 / 10);
            dlclose(lib);
            continue;
        }
        api.major = major;
        api.minor = minor;
        c->nvrtc = api;
        c->nvrtc_lib = lib;
        snprintf(c->nvrtc_name, sizeof c->nvrtc_name, "NVRTC %d.%d (%s)", major, minor, name);
    }
    if (!c->nvrtc_lib)
        return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE,
                          "adsm_module_load_source: no NVRTC the CUDA %d.%d driver can use: tried %s%s%s%s; set "
                          "ADSM_NVRTC_LIBRARY",
                          dv / 1000, dv % 1000 / 10, configured[0] ? configured : names[0],
                          configured[0] || n < 2 ? "" : " ... ", configured[0] || n < 2 ? "" : names[n - 1], refused);
    int newer = major * 1000 + minor * 10 > dv, cubin = adsm__nvrtc_cubin(c);
    adsm__log(newer && !cubin ? ADSM_LOG_WARN : ADSM_LOG_INFO, "cuda: %s for a CUDA %d.%d driver%s", c->nvrtc_name,
              dv / 1000, dv % 1000 / 10,
              cubin ? ": newer than the driver, so kernels are compiled to cubins (sm_XY), which it loads"
              : newer ? ": newer than the driver, which may refuse its PTX (CUDA_ERROR_UNSUPPORTED_PTX_VERSION)" : "");
    return ADSM_OK;
}

/* The architecture NVRTC compiles for: compute_XY (PTX) or sm_XY (a cubin). */
ADSM__PRIVATE void adsm__nvrtc_arch(const adsm__cuda *c, char *out, size_t n) {
    snprintf(out, n, "--gpu-architecture=%s_%d%d", adsm__nvrtc_cubin(c) ? "sm" : "compute", c->cc_major, c->cc_minor);
}

/* A compiled module image (PTX, NUL-terminated, or a cubin) and its size. */
ADSM__PRIVATE adsm__image *adsm__image_new(size_t size) {
    adsm__image *im = (adsm__image *)malloc(sizeof *im + size + 1);
    if (!im) return NULL;
    im->size = size;
    im->bytes = (unsigned char *)(im + 1);
    im->bytes[size] = 0;
    return im;
}

ADSM__PRIVATE adsm__image *adsm__image_dup(const adsm__image *im) {
    adsm__image *copy = im ? adsm__image_new(im->size) : NULL;
    if (copy) memcpy(copy->bytes, im->bytes, im->size);
    return copy;
}

/* The compiled program's image: its cubin where adsm__nvrtc_cubin, else its PTX. NULL on failure. */
ADSM__PRIVATE adsm__image *adsm__nvrtc_image(adsm__cuda *c, adsm__nvrtc_program prog) {
    int cubin = adsm__nvrtc_cubin(c);
    size_t size = 0;
    if ((cubin ? c->nvrtc.nvrtcGetCUBINSize(prog, &size) : c->nvrtc.nvrtcGetPTXSize(prog, &size)) != 0) return NULL;
    adsm__image *im = adsm__image_new(size);
    if (im && (cubin ? c->nvrtc.nvrtcGetCUBIN(prog, (char *)im->bytes) : c->nvrtc.nvrtcGetPTX(prog, (char *)im->bytes)) != 0) {
        free(im);
        im = NULL;
    }
    return im;
}

/* CUDA C -> PTX or a cubin for this device's architecture. *image is malloc'ed. */
/* Copies a compiler log into out (of size n), its error lines first: the message a program gets
 * is short, and warnings about the prelude must not push the line that matters out of it. */
ADSM__PRIVATE void adsm__errors_first(const char *log, char *out, size_t n) {
    size_t used = 0;
    out[0] = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (const char *line = log; *line;) {
            const char *end = strchr(line, '\n');
            size_t len = end ? (size_t)(end - line) + 1 : strlen(line);
            const char *err = strstr(line, "error");
            int is_error = err && err < line + len;
            if (is_error == (pass == 0) && used + 1 < n) {
                size_t take = ADSM__MIN(len, n - 1 - used);
                memcpy(out + used, line, take);
                used += take;
                out[used] = 0;
            }
            line += len;
        }
    }
}

ADSM__PRIVATE adsm_result adsm__nvrtc_compile(adsm__cuda *c, const char *source, const char *const *options,
                                              const char *file, const char *what, adsm__image **image) {
    adsm_result r = adsm__nvrtc_open(c);
    if (r != ADSM_OK) return r;
    c->nvrtc_compiles++;
    const char **opts = NULL; /* stb_ds array: the architecture, then every option given */
    char arch[64];
    adsm__nvrtc_arch(c, arch, sizeof arch);
    stbds_arrput(opts, arch);
    for (; options && *options; options++) stbds_arrput(opts, *options);
    adsm__nvrtc_program prog = NULL;
    adsm__nvrtc_result nr = c->nvrtc.nvrtcCreateProgram(&prog, source, file, 0, NULL, NULL);
    if (nr != ADSM__NVRTC_SUCCESS) {
        stbds_arrfree(opts);
        return adsm__fail(ADSM_ERROR_INVALID_MODULE, "%s: nvrtcCreateProgram: %s", what,
                          c->nvrtc.nvrtcGetErrorString(nr));
    }
    nr = c->nvrtc.nvrtcCompileProgram(prog, (int)stbds_arrlen(opts), opts);
    stbds_arrfree(opts);
    if (nr != ADSM__NVRTC_SUCCESS) {
        char log[700] = "";
        size_t log_size = 0;
        if (c->nvrtc.nvrtcGetProgramLogSize(prog, &log_size) == 0 && log_size > 0) {
            char *full = (char *)malloc(log_size);
            if (full && c->nvrtc.nvrtcGetProgramLog(prog, full) == 0) adsm__errors_first(full, log, sizeof log);
            free(full);
        }
        r = adsm__fail(ADSM_ERROR_INVALID_MODULE, "%s: NVRTC: %s\n%s", what, c->nvrtc.nvrtcGetErrorString(nr), log);
    } else if (!(*image = adsm__nvrtc_image(c, prog))) {
        r = adsm__fail(ADSM_ERROR_INVALID_MODULE, "%s: NVRTC produced no %s", what, adsm__nvrtc_cubin(c) ? "cubin" : "PTX");
    }
    c->nvrtc.nvrtcDestroyProgram(&prog);
    return r;
}

/* Normal context, runtime lock held: loads a PTX/cubin/fatbin image into adsm's context. */
ADSM__PRIVATE adsm_result adsm__cuda_module_image(adsm__cuda *c, const void *image, adsm__cu_module *out) {
    char log[1024] = "", text[300];
    adsm__cu_jit_option opts[2] = {ADSM__CU_JIT_ERROR_LOG_BUFFER, ADSM__CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *values[2] = {log, (void *)(uintptr_t)sizeof log};
    adsm__cu_module m = NULL;
    adsm__cu_context prev = adsm__cuda_enter(c);
    adsm__cu_result cr = c->cu.cuModuleLoadDataEx(&m, image, 2, opts, values);
    adsm__cuda_leave(c, prev);
    if (cr != 0) {
        adsm__cu_describe(c, cr, "cuModuleLoadDataEx", text, sizeof text);
        return adsm__fail(ADSM_ERROR_INVALID_MODULE, "adsm_module_load: %s%s%s", text, log[0] ? ": " : "", log);
    }
    *out = m;
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__cuda_module_add(adsm__cuda *c, const void *image) {
    adsm__cu_module m = NULL;
    adsm_result r = adsm__cuda_module_image(c, image, &m);
    if (r != ADSM_OK) return r;
    stbds_arrput(c->modules, m);
    stbds_hmfree(c->kernels); /* a newer module may now provide a kernel: look names up again */
    return ADSM_OK;
}

/* What a compiled source's PTX depends on, as one string (malloc'ed, or NULL): the architecture,
 * the options, the text. */
ADSM__PRIVATE char *adsm__cuda_source_key(const adsm__cuda *c, const char *source, const char *const *options) {
    size_t n = strlen(source) + 80;
    for (const char *const *o = options; o && *o; o++) n += strlen(*o) + 1;
    char *key = (char *)malloc(n), *at = key;
    if (!key) return NULL;
    char arch[64];
    adsm__nvrtc_arch(c, arch, sizeof arch);
    at += sprintf(at, "%s\n", arch);
    for (const char *const *o = options; o && *o; o++) at += sprintf(at, "%s\n", *o);
    sprintf(at, "\n%s", source);
    return key;
}

/* CUDA C -> PTX or cubin, once per architecture, options and text in the process: a second GPU of
 * the same generation (adsm_module_load_source loads into every GPU) or a later adsm_init reuses
 * it. NVRTC is opened first: which kind of image it makes is part of the key. */
ADSM__PRIVATE adsm_result adsm__cuda_source_image(adsm__cuda *c, const char *source, const char *const *options,
                                                  adsm__image **image) {
    adsm_result r = adsm__nvrtc_open(c);
    if (r != ADSM_OK) return r;
    char *key = adsm__cuda_source_key(c, source, options);
    if (!key) return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "adsm_module_load_source: out of memory");
    adsm__lock(&c->rt->lock);
    /* the map keeps copies of its keys (set before the first lookup, which creates the map) */
    if (!c->rt->source_images) stbds_sh_new_strdup(c->rt->source_images);
    ptrdiff_t at = stbds_shgeti(c->rt->source_images, key);
    *image = at >= 0 ? adsm__image_dup(c->rt->source_images[at].value) : NULL;
    adsm__unlock(&c->rt->lock);
    if (!*image) r = adsm__nvrtc_compile(c, source, options, "adsm_module.cu", "adsm_module_load_source", image);
    adsm__image *kept = r == ADSM_OK && at < 0 ? adsm__image_dup(*image) : NULL;
    if (kept) {
        adsm__lock(&c->rt->lock);
        if (stbds_shgeti(c->rt->source_images, key) < 0) stbds_shput(c->rt->source_images, key, kept);
        else free(kept); /* another thread compiled it meanwhile */
        adsm__unlock(&c->rt->lock);
    }
    free(key);
    return r;
}

ADSM__PRIVATE adsm_result adsm__cuda_module_load(void *ctx, const void *image, size_t size, int source,
                                                 const char *const *options) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    adsm__image *compiled = NULL;
    adsm_result r = ADSM_OK;
    (void)size;
    pthread_mutex_lock(&c->module_mutex); /* NVRTC runs outside the runtime lock: it takes seconds */
    if (source) r = adsm__cuda_source_image(c, (const char *)image, options, &compiled);
    if (r == ADSM_OK) {
        adsm__lock(&c->rt->lock);
        r = adsm__cuda_module_add(c, compiled ? compiled->bytes : image);
        adsm__unlock(&c->rt->lock);
    }
    pthread_mutex_unlock(&c->module_mutex);
    free(compiled);
    return r;
}

/* ---- single-source kernels (ADSM_KERNEL_DEF) -------------------------------------------------- */
/* What a single-source body finds on the device: the fixed-width integer types (NVRTC has no
 * <stdint.h>), adsm_grid with the thread's own global index as [begin, begin + 1) (x fastest, as
 * the CPU flattens it), and C spellings the program's C preprocessor may have left in the text. */
static const char adsm__cuda_prelude[] =
    "typedef signed char int8_t; typedef unsigned char uint8_t; typedef short int16_t;\n"
    "typedef unsigned short uint16_t; typedef int int32_t; typedef unsigned int uint32_t;\n"
    "typedef long long int64_t; typedef unsigned long long uint64_t;\n"
    "typedef long intptr_t; typedef unsigned long uintptr_t;\n"
    "#define restrict __restrict__\n"
    "#define _Bool bool\n"
    "#define _Static_assert static_assert\n"
    "#define _Alignof alignof\n"
    "typedef struct adsm_dim3 { uint32_t x, y, z; } adsm_dim3;\n"
    "typedef struct adsm_grid { adsm_dim3 grid, block; size_t begin, end; } adsm_grid;\n"
    "static __device__ inline size_t adsm_grid_threads(adsm_grid g) {\n"
    "    return (size_t)g.grid.x * g.block.x * g.grid.y * g.block.y * g.grid.z * g.block.z;\n"
    "}\n"
    "static __device__ inline adsm_grid adsm__device_grid(void) {\n"
    "    adsm_grid g;\n"
    "    g.grid.x = gridDim.x; g.grid.y = gridDim.y; g.grid.z = gridDim.z;\n"
    "    g.block.x = blockDim.x; g.block.y = blockDim.y; g.block.z = blockDim.z;\n"
    "    size_t nx = (size_t)gridDim.x * blockDim.x, ny = (size_t)gridDim.y * blockDim.y;\n"
    "    size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    size_t y = (size_t)blockIdx.y * blockDim.y + threadIdx.y;\n"
    "    size_t z = (size_t)blockIdx.z * blockDim.z + threadIdx.z;\n"
    "    g.begin = (z * ny + y) * nx + x;\n"
    "    g.end = g.begin + 1;\n"
    "    return g;\n"
    "}\n"
    /* adsm.h's atomics under the same names */
    "static __device__ inline uint32_t adsm_atomic_add_u32(uint32_t *p, uint32_t v) { return atomicAdd(p, v); }\n"
    "static __device__ inline uint64_t adsm_atomic_add_u64(uint64_t *p, uint64_t v) { return atomicAdd(p, v); }\n"
    "static __device__ inline unsigned long long adsm_atomic_add_ull(unsigned long long *p, unsigned long long v) {\n"
    "    return atomicAdd(p, v);\n"
    "}\n"
    "static __device__ inline int32_t adsm_atomic_add_i32(int32_t *p, int32_t v) { return atomicAdd(p, v); }\n"
    "static __device__ inline float adsm_atomic_add_f32(float *p, float v) { return atomicAdd(p, v); }\n"
    "static __device__ inline uint32_t adsm_atomic_min_u32(uint32_t *p, uint32_t v) { return atomicMin(p, v); }\n"
    "static __device__ inline uint32_t adsm_atomic_max_u32(uint32_t *p, uint32_t v) { return atomicMax(p, v); }\n"
    "static __device__ inline int32_t adsm_atomic_min_i32(int32_t *p, int32_t v) { return atomicMin(p, v); }\n"
    "static __device__ inline int32_t adsm_atomic_max_i32(int32_t *p, int32_t v) { return atomicMax(p, v); }\n";

/* The whole CUDA C of a single-source kernel: the prelude, its translation unit's ADSM_SHARED
 * blocks in source order, then the kernel. malloc'ed, or NULL. */
ADSM__PRIVATE char *adsm__cuda_single_source(const adsm_kernel_desc *k) {
    size_t n = sizeof adsm__cuda_prelude + strlen(k->cuda_source) + 1;
    for (const adsm__shared *s = k->shared ? *k->shared : NULL; s; s = s->next) n += strlen(s->text) + 1;
    char *text = (char *)malloc(n), *at = text;
    if (!text) return NULL;
    at += sprintf(at, "%s", adsm__cuda_prelude);
    for (const adsm__shared *s = k->shared ? *k->shared : NULL; s; s = s->next) at += sprintf(at, "%s\n", s->text);
    sprintf(at, "%s", k->cuda_source);
    return text;
}

/* Normal context, runtime lock held: whether a loaded module has an entry of this name. */
ADSM__PRIVATE int adsm__cuda_module_has(adsm__cuda *c, const char *name) {
    adsm__cu_context prev = adsm__cuda_enter(c);
    adsm__cu_function fn = NULL;
    for (ptrdiff_t m = 0; m < stbds_arrlen(c->modules) && !fn; m++)
        if (c->cu.cuModuleGetFunction(&fn, c->modules[m], name) != 0) fn = NULL;
    adsm__cuda_leave(c, prev);
    return fn != NULL;
}

/* Normal context, runtime lock held: loads a single-source kernel's image and remembers its function. */
ADSM__PRIVATE adsm_result adsm__cuda_single_add(adsm__cuda *c, const adsm_kernel_desc *k, const adsm__image *image) {
    adsm__cu_module m = NULL;
    adsm__cu_function fn = NULL;
    adsm_result r = adsm__cuda_module_image(c, image->bytes, &m);
    if (r != ADSM_OK) return r;
    stbds_arrput(c->ss_modules, m);
    adsm__cu_context prev = adsm__cuda_enter(c);
    adsm__cu_result cr = c->cu.cuModuleGetFunction(&fn, m, k->name);
    adsm__cuda_leave(c, prev);
    if (cr != 0)
        return adsm__fail(ADSM_ERROR_KERNEL_NOT_FOUND, "kernel '%s' (ADSM_KERNEL_DEF): its compiled module has no "
                          "entry of that name", k->name);
    uint64_t key = adsm__cuda_kernel_key(k);
    stbds_hmput(c->ss_kernels, key, fn);
    return ADSM_OK;
}

/* The key of a kernel's image in rt->kernel_images: its descriptor and the architecture it was
 * compiled for (PTX for compute_90 does not load on a compute 8.x GPU, so a node with GPUs of two
 * generations compiles once for each), cubin or PTX. Bits 48-61 are free in a descriptor's key. */
ADSM__PRIVATE uint64_t adsm__cuda_image_key(const adsm__cuda *c, const adsm_kernel_desc *k) {
    uint64_t arch = (uint64_t)(c->cc_major * 10 + c->cc_minor) & 0x1fff;
    return adsm__cuda_kernel_key(k) | (arch | (uint64_t)adsm__nvrtc_cubin(c) << 13) << 48;
}

/* NVRTC, with unannotated functions (the ADSM_SHARED helpers) compiled for the device. */
ADSM__PRIVATE adsm_result adsm__cuda_single_compile(adsm__cuda *c, const adsm_kernel_desc *k) {
    static const char *const options[] = {"--device-as-default-execution-space", NULL};
    char file[300], what[300];
    snprintf(file, sizeof file, "%s.cu", k->name);
    snprintf(what, sizeof what, "kernel '%s' (ADSM_KERNEL_DEF)", k->name);
    adsm_result r = adsm__nvrtc_open(c); /* which kind of image it makes is part of the key */
    if (r != ADSM_OK) return r;
    uint64_t key = adsm__cuda_image_key(c, k);
    adsm__lock(&c->rt->lock);
    /* compiled for another GPU of this architecture, or under an earlier adsm_init */
    ptrdiff_t at = stbds_hmgeti(c->rt->kernel_images, key);
    adsm__image *image = at >= 0 ? adsm__image_dup(c->rt->kernel_images[at].value) : NULL;
    adsm__unlock(&c->rt->lock);
    if (!image) {
        char *text = adsm__cuda_single_source(k);
        if (!text) return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "%s: out of memory", what);
        r = adsm__nvrtc_compile(c, text, options, file, what, &image);
        free(text);
    }
    if (r == ADSM_OK) {
        adsm__lock(&c->rt->lock);
        r = adsm__cuda_single_add(c, k, image);
        adsm__image *kept = r == ADSM_OK && stbds_hmgeti(c->rt->kernel_images, key) < 0 ? adsm__image_dup(image) : NULL;
        if (kept) stbds_hmput(c->rt->kernel_images, key, kept);
        adsm__unlock(&c->rt->lock);
    }
    free(image);
    return r;
}

/* Before a launch, no lock held: compiles a single-source kernel the first time it runs, unless
 * a loaded module has a (hand-written) kernel of its name. NVRTC runs outside the runtime lock. */
ADSM__PRIVATE adsm_result adsm__cuda_prepare(void *ctx, const adsm_kernel_desc *k) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    if (!k->cuda_source) return ADSM_OK;
    pthread_mutex_lock(&c->module_mutex);
    uint64_t key = adsm__cuda_kernel_key(k);
    adsm__lock(&c->rt->lock);
    int ready = stbds_hmgeti(c->ss_kernels, key) >= 0 || adsm__cuda_module_has(c, k->name);
    adsm__unlock(&c->rt->lock);
    ptrdiff_t failed = ready ? -1 : stbds_hmgeti(c->ss_failed, key);
    adsm_result r = ADSM_OK;
    if (failed >= 0) /* rejected before: the same text would be rejected again */
        r = adsm__fail(c->ss_failed[failed].value.code, "%s", c->ss_failed[failed].value.message);
    else if (!ready && (r = adsm__cuda_single_compile(c, k)) != ADSM_OK) {
        adsm__cuda_failure f = {r, strdup(adsm_last_error())};
        if (f.message) stbds_hmput(c->ss_failed, key, f);
    }
    pthread_mutex_unlock(&c->module_mutex);
    return r;
}

/* ---- lifetime -------------------------------------------------------------------------------- */
/* How many kernels this GPU runs at once: ADSM_STREAMS, else 4 with several GPUs and 1 with one
 * (where a kernel may follow stored pointers into objects it does not name, so only issue order
 * is safe). Several streams remember each launch's accesses, to order the conflicting ones. */
ADSM__PRIVATE adsm_result adsm__cuda_stream_count(adsm__cuda *c) {
    unsigned devices = c->index == 0 ? c->ndevices : ((adsm__cuda *)c->rt->dev_ctx[0])->ndevices;
    c->nstreams = c->rt->cfg.streams ? c->rt->cfg.streams : devices > 1 ? ADSM__DEFAULT_STREAMS : 1;
    c->nstreams = ADSM__MIN(c->nstreams, ADSM__CUDA_MAX_STREAMS);
    if (c->nstreams == 1) return ADSM_OK;
    c->kev_access = (adsm__cuda_launch_access *)calloc(ADSM__CUDA_EVENTS, sizeof *c->kev_access);
    return c->kev_access ? ADSM_OK : adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "cuda backend: out of memory");
}

ADSM__PRIVATE adsm_result adsm__cuda_streams(adsm__cuda *c) {
    adsm__cu_result r = 0;
    r = c->cu.cuStreamCreate(&c->h2d, ADSM__CU_STREAM_NON_BLOCKING);
    if (r == 0) r = c->cu.cuStreamCreate(&c->d2h, ADSM__CU_STREAM_NON_BLOCKING);
    if (r == 0) r = c->cu.cuStreamCreate(&c->ops, ADSM__CU_STREAM_NON_BLOCKING);
    for (unsigned i = 0; r == 0 && i < c->nstreams; i++) r = c->cu.cuStreamCreate(&c->ks[i], ADSM__CU_STREAM_NON_BLOCKING);
    adsm__cu_event *events[4 + 2 * ADSM__CUDA_SLOTS] = {&c->h2d_last, &c->ops_last, &c->drained, &c->ks_last[0]};
    for (int s = 0; s < ADSM__CUDA_SLOTS; s++) {
        events[4 + 2 * s] = &c->h2d_slot_ev[s];
        events[5 + 2 * s] = &c->d2h_slot_ev[s];
    }
    /* Every event may be waited on by the engine or the completion thread (cuEventSynchronize):
     * blocking sync makes that wait sleep instead of spinning a core; nothing reads timings. */
    unsigned flags = ADSM__CU_EVENT_DISABLE_TIMING | ADSM__CU_EVENT_BLOCKING_SYNC;
    for (size_t i = 0; r == 0 && i < sizeof events / sizeof *events; i++) r = c->cu.cuEventCreate(events[i], flags);
    for (size_t i = 0; r == 0 && i < ADSM__CUDA_EVENTS; i++) r = c->cu.cuEventCreate(&c->kev[i], flags);
    for (unsigned i = 1; r == 0 && i < c->nstreams; i++) r = c->cu.cuEventCreate(&c->ks_last[i], flags);
    return r == 0 ? ADSM_OK : adsm__cu_fail(c, r, "creating streams and events");
}

/* Pinned staging buffers; pageable ones (synchronous copies) when the driver cannot pin. */
ADSM__PRIVATE adsm_result adsm__cuda_staging(adsm__cuda *c) {
    unsigned char **all[2 * ADSM__CUDA_SLOTS];
    for (int s = 0; s < ADSM__CUDA_SLOTS; s++) {
        all[2 * s] = &c->h2d_stage[s];
        all[2 * s + 1] = &c->d2h_stage[s];
    }
    c->pinned = 1;
    for (size_t i = 0; i < 2 * ADSM__CUDA_SLOTS; i++) {
        if (c->pinned && c->cu.cuMemAllocHost((void **)all[i], c->stage_size) == 0) continue;
        if (c->pinned) {
            adsm__log(ADSM_LOG_WARN, "cuda: cannot pin %zu bytes of staging memory; copies will be synchronous",
                      c->stage_size);
            for (size_t j = 0; j < i; j++) {
                c->cu.cuMemFreeHost(*all[j]);
                *all[j] = NULL;
            }
            c->pinned = 0;
            i = (size_t)-1; /* start again with pageable buffers */
            continue;
        }
        if (posix_memalign((void **)all[i], 4096, c->stage_size) != 0)
            return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "cuda backend: no memory for staging buffers");
    }
    return ADSM_OK;
}

/* Shutdown: ranges still page-locked (objects the program did not free) are unlocked. */
ADSM__PRIVATE void adsm__cuda_unlock_all(adsm__cuda *c) {
    for (adsm__tree_node *n; (n = adsm__tree_first(&c->locked)) != NULL;) {
        adsm__tree_remove(&c->locked, n);
        if (c->cu.cuMemHostUnregister) c->cu.cuMemHostUnregister((void *)n->start);
        free(n);
    }
}

ADSM__PRIVATE void adsm__cuda_shutdown(void *ctx) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    ADSM__STORE(&c->quitting, 1);
    adsm__queue_stop(&c->queue); /* runs the commands still queued first */
    if (c->completion_started) {
        ADSM__ADD(&c->issued_gen, 1);
        adsm__futex_wake_all(&c->issued_gen);
        pthread_join(c->completion, NULL);
    }
    if (c->ctx_retained) {
        adsm__cu_context prev = adsm__cuda_enter(c);
        if (c->ks[0]) c->cu.cuCtxSynchronize();
        for (size_t g = 0; c->granule_run && g < c->half / c->granule; g++)
            if (c->granule_run[g]) adsm__cuda_unmap_run(c, g, c->granule_run[g], c->granule_handles[g]);
        for (ptrdiff_t m = 0; m < stbds_arrlen(c->modules); m++) c->cu.cuModuleUnload(c->modules[m]);
        for (ptrdiff_t m = 0; m < stbds_arrlen(c->ss_modules); m++) c->cu.cuModuleUnload(c->ss_modules[m]);
        adsm__cuda_unlock_all(c);
        for (int s = 0; s < ADSM__CUDA_SLOTS; s++) {
            if (c->h2d_stage[s]) c->pinned ? (void)c->cu.cuMemFreeHost(c->h2d_stage[s]) : free(c->h2d_stage[s]);
            if (c->d2h_stage[s]) c->pinned ? (void)c->cu.cuMemFreeHost(c->d2h_stage[s]) : free(c->d2h_stage[s]);
            if (c->h2d_slot_ev[s]) c->cu.cuEventDestroy(c->h2d_slot_ev[s]);
            if (c->d2h_slot_ev[s]) c->cu.cuEventDestroy(c->d2h_slot_ev[s]);
        }
        for (size_t i = 0; i < ADSM__CUDA_EVENTS; i++)
            if (c->kev[i]) c->cu.cuEventDestroy(c->kev[i]);
        if (c->h2d_last) c->cu.cuEventDestroy(c->h2d_last);
        for (unsigned i = 0; i < ADSM__CUDA_MAX_STREAMS; i++) {
            if (c->ks_last[i]) c->cu.cuEventDestroy(c->ks_last[i]);
            if (c->ks[i]) c->cu.cuStreamDestroy(c->ks[i]);
        }
        if (c->ops_last) c->cu.cuEventDestroy(c->ops_last);
        if (c->drained) c->cu.cuEventDestroy(c->drained);
        if (c->h2d) c->cu.cuStreamDestroy(c->h2d);
        if (c->ops) c->cu.cuStreamDestroy(c->ops);
        if (c->d2h) c->cu.cuStreamDestroy(c->d2h);
        if (c->va && c->va_moved_host) {
            adsm__cuda_give_back(c, c->va, c->va_size);
            adsm__disown_reservation(c->rt); /* the host reservation was that range */
        } else if (c->va) {
            c->cu.cuMemAddressFree(c->va, c->va_size);
        }
        adsm__cuda_leave(c, prev);
        c->cu.cuDevicePrimaryCtxRelease(c->device);
    }
    /* The driver library stays loaded: drivers do not support being unloaded and loaded again. */
    stbds_arrfree(c->modules);
    stbds_hmfree(c->kernels);
    stbds_arrfree(c->ss_modules);
    stbds_hmfree(c->ss_kernels);
    for (ptrdiff_t i = 0; i < stbds_hmlen(c->ss_failed); i++) free(c->ss_failed[i].value.message);
    stbds_hmfree(c->ss_failed);
    free(c->granule_refs);
    free(c->granule_run);
    free(c->granule_handles);
    free(c->kev_access);
    adsm__device_error_destroy(&c->errors);
    pthread_mutex_destroy(&c->module_mutex);
    free(c);
}

ADSM__PRIVATE adsm_result adsm__cuda_init(adsm__runtime *rt, void **ctx) {
    adsm__cuda *c = (adsm__cuda *)calloc(1, sizeof *c);
    adsm_result r;
    adsm__cu_mem_alloc_prop prop; /* declared before the first goto: C++ refuses jumps over initialisations */
    adsm__cu_result cr;
    if (!c) return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "cuda backend: out of memory");
    c->rt = rt;
    c->index = rt->ndev; /* devices start in order: this one's number is the count so far */
    c->base = rt->base;
    c->half = rt->half;
    c->stage_size = rt->cfg.cuda_staging;
    c->h2d_next = 0;
    adsm__tree_init(&c->locked);
    adsm__device_error_init(&c->errors);
    pthread_mutex_init(&c->module_mutex, NULL);
    if ((r = adsm__cuda_open(c, rt->cfg.cuda_driver)) != ADSM_OK ||
        (r = adsm__cuda_device(c, rt->cfg.cuda_devices ? rt->cfg.cuda_ordinals[c->index] : (int)c->index)) != ADSM_OK)
        goto fail;
    prop = adsm__cuda_prop(c);
    cr = c->cu.cuMemGetAllocationGranularity(&c->granule, &prop, ADSM__CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (cr != 0) {
        r = adsm__cu_fail(c, cr, "cuMemGetAllocationGranularity");
        goto fail;
    }
    if (c->granule == 0 || !adsm__is_pow2(c->granule) || c->half % c->granule) {
        r = adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE, "cuda backend: unusable allocation granularity %zu", c->granule);
        goto fail;
    }
    if ((r = adsm__cuda_address_space(c, rt)) != ADSM_OK) goto fail;
    c->granule_refs = (uint32_t *)calloc(c->half / c->granule, sizeof *c->granule_refs);
    c->granule_run = (uint32_t *)calloc(c->half / c->granule, sizeof *c->granule_run);
    c->granule_handles = (adsm__cu_mem_handle *)calloc(c->half / c->granule, sizeof *c->granule_handles);
    if (!c->granule_refs || !c->granule_run || !c->granule_handles) {
        r = adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "cuda backend: out of memory");
        goto fail;
    }
    if ((r = adsm__cuda_stream_count(c)) != ADSM_OK || (r = adsm__cuda_streams(c)) != ADSM_OK ||
        (r = adsm__cuda_staging(c)) != ADSM_OK)
        goto fail;
    adsm__queue_start(&c->queue, sizeof(adsm__cuda_cmd), ADSM__CUDA_RING, adsm__cuda_engine_step,
                      adsm__cuda_engine_begin, c);
    c->completion_started = pthread_create(&c->completion, NULL, adsm__cuda_completion_main, c) == 0;
    if (!c->queue.started || !c->completion_started) {
        r = adsm__fail(ADSM_ERROR_SYSTEM, "cuda backend: cannot start its threads");
        goto fail;
    }
    adsm__cuda_alias_host(c, rt); /* last: nothing after it fails, so no failure path undoes it */
    adsm__log(ADSM_LOG_INFO, "cuda: device %u is GPU %d (%s, compute %d.%d), %zu MiB, %s addresses, %s staging of "
              "%zu KiB", c->index, (int)c->device, c->device_name, c->cc_major, c->cc_minor, c->capacity >> 20,
              c->delta ? "translated" : "same", c->pinned ? "pinned" : "pageable", c->stage_size >> 10);
    /* the addresses adsm_safe and adsm_dev_alloc hand out are device 0's; the others translate
     * them in their own verbs */
    if (c->index == 0) rt->dev_delta = c->delta;
    if (c->index == 0) rt->dev_granule = c->granule; /* what an object takes on a device (directory.h) */
    adsm__cuda_leave(c, c->init_prev);
    *ctx = c;
    return ADSM_OK;
fail:
    {
        /* keep the message: the calls below must not overwrite it */
        char saved[sizeof adsm__tls_error];
        memcpy(saved, adsm__tls_error, sizeof saved);
        /* auto goes on to emu with the reservation: hand the device range back, keep a fresh one */
        if (c->va_moved_host && adsm__replace_reservation(rt) == ADSM_OK) {
            adsm__cuda_give_back(c, c->va, c->va_size);
            c->va = 0;
            c->va_moved_host = 0;
        }
        if (c->init_entered) adsm__cuda_leave(c, c->init_prev); /* shutdown enters and leaves itself */
        adsm__cuda_shutdown(c);
        adsm__fail(r, "%s", saved);
    }
    return r;
}

/* Once every device's context exists: the devices that may reach this one's memory directly
 * (cuDeviceCanAccessPeer) get access to everything mapped here from now on, so device-to-device
 * copies from it go peer to peer. */
ADSM__PRIVATE adsm_result adsm__cuda_start(void *ctx) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    c->npeers = 0;
    for (unsigned d = 0; d < c->rt->ndev && c->cu.cuDeviceCanAccessPeer; d++) {
        adsm__cuda *other = (adsm__cuda *)c->rt->dev_ctx[d];
        int can = 0;
        if (other == c || other->device == c->device) continue;
        if (c->cu.cuDeviceCanAccessPeer(&can, other->device, c->device) == 0 && can) c->peers[c->npeers++] = other->device;
    }
    if (c->rt->ndev > 1)
        adsm__log(ADSM_LOG_INFO, "cuda: device %u: %u of the other %u devices have peer access to its memory", c->index,
                  c->npeers, c->rt->ndev - 1);
    return ADSM_OK;
}

ADSM__PRIVATE unsigned adsm__cuda_device_count(void *ctx) { return ((adsm__cuda *)ctx)->ndevices; }

static const adsm__backend_vtbl adsm__backend_cuda = {
    .name = "cuda",
    .moves_data = 1,
    .max_args = ADSM__CUDA_MAX_ARGS,
    .init = adsm__cuda_init,
    .start = adsm__cuda_start,
    .device_count = adsm__cuda_device_count,
    .shutdown = adsm__cuda_shutdown,
    .capacity = adsm__cuda_capacity,
    .dev_alloc = adsm__cuda_dev_alloc,
    .dev_free = adsm__cuda_dev_free,
    .dev_map = adsm__cuda_dev_map,
    .to_device = adsm__cuda_to_device,
    .from_device = adsm__cuda_from_device,
    .peer_copy = adsm__cuda_peer_copy,
    .drain = adsm__cuda_drain,
    .launch = adsm__cuda_launch,
    .wait = adsm__cuda_wait,
    .synchronize = adsm__cuda_synchronize,
    .dev_memset = adsm__cuda_dev_memset,
    .dev_copy = adsm__cuda_dev_copy,
    .module_load = adsm__cuda_module_load,
    .prepare = adsm__cuda_prepare,
    .host_lock = adsm__cuda_host_lock,
    .host_unlock = adsm__cuda_host_unlock,
    .host_direct = adsm__cuda_host_direct,
};

#endif /* ADSM__BACKEND_CUDA_INCLUDED */
