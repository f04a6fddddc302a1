/* adsm_impl/backend.h -- the backend vtable: the few verbs the protocols need from a device.
 *
 * One `static const adsm__backend_vtbl` per backend (emu, host, cuda). Device addresses are chosen
 * by the runtime (for same-address objects they equal the host address); the backend only backs
 * and releases them. Verbs marked "signal-safe" are called from the SIGSEGV handler while the
 * runtime lock is held, so they may only do async-signal-safe work (raw system calls, atomics,
 * futex waits on other threads that never take the runtime lock). */
#ifndef ADSM__BACKEND_INCLUDED
#define ADSM__BACKEND_INCLUDED

#include "common.h"
#include "os.h"
#include "trace.h"
#include "runtime.h"

#define ADSM__MAX_PARAMS 16
#define ADSM__EVERY_LAUNCH UINT64_MAX

typedef struct adsm__range {
    uintptr_t addr;
    size_t len;
    const char *param; /* parameter name, for error messages */
} adsm__range;

/* Whether a range of a[] overlaps a range of b[] (kernels' accesses: backends that run kernels at
 * once order those whose accesses conflict, emu_streams.h and backend_cuda.h). */
ADSM__PRIVATE int adsm__ranges_meet(const adsm__range *a, size_t na, const adsm__range *b, size_t nb) {
    for (size_t i = 0; i < na; i++)
        for (size_t j = 0; j < nb; j++)
            if (a[i].addr < b[j].addr + b[j].len && b[j].addr < a[i].addr + a[i].len) return 1;
    return 0;
}

/* A launch's read-only ranges: its IN objects, and with several devices one more covering what it
 * reaches through declared pointer fields (launch.h), which it may read too. */
#define ADSM__MAX_INPUTS (ADSM__MAX_PARAMS + 1)

/* A launch as the runtime hands it to a backend: arguments already translated to device
 * addresses, plus the device ranges the kernel may write and those it may only read. */
typedef struct adsm__launch {
    const adsm_kernel_desc *kernel;
    adsm_grid grid;
    const void *args;
    uint64_t seq;
    size_t nwritable, ninputs;
    adsm__range writable[ADSM__MAX_PARAMS];
    adsm__range inputs[ADSM__MAX_INPUTS];
} adsm__launch;

typedef struct adsm__backend_vtbl {
    const char *name;
    int moves_data;   /* 0: the device works on host memory (no copies, no tracking) */
    size_t max_args;  /* largest packed argument block a launch may carry; 0: no limit */
    adsm_result (*init)(adsm__runtime *rt, void **ctx);
    /* optional: starts the backend's threads, once every device's init ran (emu forks a process
     * per device, and a fork from a process with threads is unsafe: the child inherits locks
     * held, and ThreadSanitizer refuses it) */
    adsm_result (*start)(void *ctx);
    /* optional: how many devices the backend drives, asked of the first device's context (each
     * later init finds its index in rt->ndev); NULL: one */
    unsigned (*device_count)(void *ctx);
    void (*shutdown)(void *ctx);
    size_t (*capacity)(void *ctx);
    adsm_result (*dev_alloc)(void *ctx, uintptr_t dev, size_t span);
    /* no kernel uses the range any more (the caller waited for those that did); copies may */
    void (*dev_free)(void *ctx, uintptr_t dev, size_t span);
    /* optional: the memory behind [dev, dev + n) of a live range may go (its content is dropped,
     * the range stays usable); no copy or kernel uses it (the caller drained and waited) */
    void (*dev_discard)(void *ctx, uintptr_t dev, size_t n);
    /* optional, signal-safe (cuda): with several devices a shared object has memory on a device
     * only while it is resident there (capacity.h): dev_map backs [dev, dev + span), zeroed, when
     * it becomes resident, dev_free gives it back when it leaves, and adsm_alloc calls neither.
     * 0, 1 when the device has no memory left, -1 when it is lost. */
    int (*dev_map)(void *ctx, uintptr_t dev, size_t span);
    /* signal-safe: host->device copy; async copies complete in order, before drain() returns.
     * after: the last launch on this device the copy must wait for (one that may use the range:
     * the copy changes what it reads); ADSM__EVERY_LAUNCH for every launch sent so far */
    int (*to_device)(void *ctx, uintptr_t dev, uintptr_t host, size_t n, int async, uint64_t after);
    /* signal-safe: device->host copy into writable host memory (copy.h fills protected pages) */
    int (*from_device)(void *ctx, uintptr_t host, uintptr_t dev, size_t n);
    /* optional: [dev, dev + n) from device src's memory to device dst's, both at adsm's device
     * address (each backend context translates its own side), after dst's earlier launches;
     * returns once the copy landed, 0 or -1. Normal context, no lock needed. Without it device
     * to device copies read the source through device_view (emu). */
    int (*peer_copy)(void *dst, void *src, uintptr_t dev, size_t n);
    /* signal-safe: wait until every async to_device copy queued so far is done with host memory
     * (the CPU may write the pages then) */
    void (*drain)(void *ctx);
    adsm_result (*launch)(void *ctx, const adsm__launch *l);
    /* signal-safe: wait until launch `seq` finished; 0, or -1 when the device is lost */
    int (*wait)(void *ctx, uint64_t seq);
    /* optional, signal-safe: 1 when no copy is queued and no launch runs, so a synchronous
     * to_device from the caller's thread waits for nothing and wakes no other thread (emu); NULL:
     * never taken as idle */
    int (*idle)(void *ctx);
    /* wait for every launch; return (and forget) the first launch error since the last call */
    adsm_result (*synchronize)(void *ctx);
    /* device-only bulk operations (state-aware memset/memcpy); callers drained and waited */
    int (*dev_memset)(void *ctx, uintptr_t dev, int value, size_t n);
    int (*dev_copy)(void *ctx, uintptr_t dst, uintptr_t src, size_t n);
    /* device code: an image (PTX/cubin/fatbin; size may be 0 for PTX), or, with source != 0,
     * CUDA C compiled with `options`; NULL on backends that run kernels from their CPU bodies */
    adsm_result (*module_load)(void *ctx, const void *image, size_t size, int source, const char *const *options);
    /* optional: called before a launch with no lock held, to get the kernel's device code ready
     * (cuda compiles single-source kernels there) */
    adsm_result (*prepare)(void *ctx, const adsm_kernel_desc *k);
    /* optional (cuda): page-lock host memory with the driver so that copies to and from it are
     * direct DMA; 1 when it did (the caller unlocks it before releasing the pages), 0 when copies
     * of it stay staged. Normal context; the range is mapped read-write and populated. */
    int (*host_lock)(void *ctx, uintptr_t host, size_t n);
    void (*host_unlock)(void *ctx, uintptr_t host, size_t n);
    /* optional, signal-safe: whether from_device writes [host, host + n) whatever its page
     * protection (a DMA engine into page-locked pages), so no staging slot is needed */
    int (*host_direct)(void *ctx, uintptr_t host, size_t n);
    /* optional, signal-safe: device memory [dev, dev + n) as the CPU can read it in place (emu),
     * after the kernels that may write it finished; NULL where only copies reach it */
    const void *(*device_view)(void *ctx, uintptr_t dev, size_t n);
    /* optional: the same, writable in place, while no kernel or copy uses the range (emu; the
     * caller drained and waited); NULL where only copies reach it */
    void *(*device_window)(void *ctx, uintptr_t dev, size_t n);
    /* optional (cuda), for the protocols whose objects live in managed memory (protocol_um.h):
     * n bytes, zeroed, that the CPU and the device reach at one address *addr, the driver keeping
     * them coherent; freed once no kernel uses them. Normal context, no lock needed. */
    adsm_result (*managed_alloc)(void *ctx, size_t n, uintptr_t *addr);
    void (*managed_free)(void *ctx, uintptr_t addr);
    /* optional (cuda): asks the driver to move [addr, addr + n) of managed memory to the device
     * ahead of the next launch (to_device) or to the host; a hint, ordered on the launch stream;
     * `managed_settle` waits until the moves asked so far landed. Normal context. 0 or -1. */
    int (*managed_prefetch)(void *ctx, uintptr_t addr, size_t n, int to_device);
    int (*managed_settle)(void *ctx);
    /* optional (cuda): 1 when the device's kernels reach pageable host memory, plain anonymous
     * pages, at their host addresses (HMM, or ATS on a coherent link), for protocol hmm. Normal
     * context. */
    int (*pageable_access)(void *ctx);
    /* optional: what this device's kernels see at adsm's device address a is a + address_delta
     * (cuda translating, emu with ADSM_EMU_SAME_ADDRESS=0); NULL: 0, the same address. Any context */
    intptr_t (*address_delta)(void *ctx);
} adsm__backend_vtbl;

/* A copy a backend made, started at t0: its time in the stats and, under ADSM_TRACE, its span on
 * the copying thread's track (a copy to a device from another device's memory, directory.h,
 * labelled as such). Signal-safe. */
ADSM__PRIVATE void adsm__copy_timed(adsm__runtime *rt, int to_device, uint64_t t0, uintptr_t dev, size_t n) {
    uint64_t t1 = adsm__now_ns();
    ADSM__ADD(to_device ? &rt->stats.h2d_ns : &rt->stats.d2h_ns, t1 - t0);
    unsigned kind = !to_device ? ADSM__TR_D2H : adsm__tls_copy_between_devices ? ADSM__TR_D2D : ADSM__TR_H2D;
    if (rt->trace.events) adsm__trace_on(&rt->trace, 0, kind, t0, t1, dev, n);
}

#endif /* ADSM__BACKEND_INCLUDED */
