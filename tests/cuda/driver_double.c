/* tests/cuda/driver_double.c -- a test double of the CUDA driver API (libcudadouble.so).
 *
 * It implements, over host memory, exactly the driver entry points adsm uses (the ADSM__CU_FUNCS
 * list in adsm_impl/cuda/cuda_driver.h, plus cuGetProcAddress_v2), following the documented semantics
 * closely enough that a runtime that works here should work on a GPU, and rejecting what a real
 * driver rejects. Device memory is one sparse memfd carved in 2 MiB granules; a reserved device
 * range is a PROT_NONE placeholder in the host address space (so device addresses never collide
 * with host ones) plus a private "shadow" range where the double itself sees the mapped granules.
 * Kernels are host functions registered by PTX entry name (driver_double.h). Environment knobs,
 * read at cuInit: CUDADOUBLE_DEVICES (default 1; 0 = no device), CUDADOUBLE_DRIVER_VERSION
 * (12080), CUDADOUBLE_MEMORY (bytes per device, 1 GiB), CUDADOUBLE_NO_PEER=1 (no pair of devices
 * can access each other's memory: cuDeviceCanAccessPeer answers 0), CUDADOUBLE_COMPUTE (each
 * device's compute capability as major*10+minor, comma-separated, e.g. "90,80"; 90 for those not
 * listed: a module whose PTX .target is newer than its context's device is refused, as the JIT
 * refuses it), CUDADOUBLE_NO_PARAM_INFO=1 (cuFuncGetParamInfo
 * not found), CUDADOUBLE_NO_PINNED=1 (cuMemAllocHost fails), CUDADOUBLE_NO_MANAGED=1 (no managed
 * memory: the device attributes say 0, cuMemAllocManaged answers NOT_SUPPORTED), CUDADOUBLE_PAGEABLE=1
 * (every device reaches pageable host memory, as with HMM: CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS
 * says 1, and kernels and copies reach any mapped host address outside the reserved device
 * ranges; an unmapped one is an illegal address), CUDADOUBLE_NO_PLACEHOLDER=1 (reserved
 * device ranges hold no host placeholder, so a hint on a host mapping is granted), CUDADOUBLE_DELAY_US (sleep before
 * each queued stream operation, 0), CUDADOUBLE_NO_REGISTER=1 (cuMemHostRegister refuses, as a
 * driver out of lockable memory does), CUDADOUBLE_REGISTER_BUDGET (bytes registrations may hold
 * at once; one that would pass it fails with CUDA_ERROR_OUT_OF_MEMORY), CUDADOUBLE_REGISTER_US_PER_MIB (microseconds a successful
 * cuMemHostRegister spends pinning each MiB, outside the double's lock; 0), CUDADOUBLE_UNMAP_US
 * (microseconds each cuMemUnmap takes, outside the double's locks, as a real unmap waits for the
 * GPU; 0), CUDADOUBLE_KERNEL_MAX_THREADS (threads per block a kernel
 * can launch with, 1024; more fail with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, as a kernel that uses
 * many registers does on a real device), CUDADOUBLE_PARAM_INFO_ERROR=<code> (cuFuncGetParamInfo
 * answers that CUresult for every index, as a driver that cannot tell answers NOT_SUPPORTED),
 * CUDADOUBLE_LOSE_NULL_MEMSETS=1 (memsets on the NULL stream succeed but write nothing: device
 * memory that does not work, which adsm's start-up probe must notice).
 *
 * Contexts: cuCtxSetCurrent/cuCtxGetCurrent keep one current context per thread, as the driver
 * does, so a test can check that a runtime leaves the application's context current.
 *
 * Several devices: each has its own pool of granules (cuMemCreate takes them from the device the
 * allocation property names; cuMemGetInfo answers for the current context's device). Access is
 * per device, as with the VMM API: cuMemSetAccess grants it to the devices it lists (a device
 * other than the memory's own only where cuDeviceCanAccessPeer allows), and copies, memsets and
 * kernels on a device's streams may touch only memory that device has access to (else
 * CUDA_ERROR_INVALID_VALUE at the call, or a sticky ILLEGAL_ADDRESS in a kernel).
 * cuMemcpyPeerAsync copies between two contexts' memory whatever the access: directly when the
 * destination device may read the source (counted in peer_direct_bytes), else staged.
 *
 * Page-locked memory: cuMemAllocHost memory and ranges registered with cuMemHostRegister are
 * "pinned" (a registration without CU_MEMHOSTREGISTER_PORTABLE for the registering context's copies
 * only): copies to and from them are asynchronous, and the device side of a copy (the stream
 * worker) writes and reads them whatever their page protection, as a DMA engine does (through
 * /proc/self/mem). A registration may not overlap a reserved device range (the unified address
 * space has the range already) or another registration, and its pages must be mapped read-write
 * when it is made: the driver pins them for writing (pin_user_pages with FOLL_WRITE), which the
 * kernel refuses on a PROT_NONE or read-only mapping (here CUDA_ERROR_INVALID_VALUE), and which
 * allocates every page of the range (here too); pinned pages stay pinned whatever their
 * protection later. Copies from or to pageable memory are
 * synchronous and go through a private buffer, as the real driver stages them.
 *
 * Managed memory (cuMemAllocManaged, cuMemFree, cuMemPrefetchAsync with the location argument of
 * CUDA 12.2+): plain host pages that the CPU, kernels and copies of every device reach at one
 * address, as unified memory does; prefetches move nothing and are counted by destination.
 *
 * Thread contexts: every cu* function and cudadouble_* function runs on the calling application
 * thread and is thread safe (one global mutex `g.mu` and one condition variable `g.cv`, plus a
 * rwlock `g.maplock` that queued memory operations hold for reading while they touch the shadow
 * and that calls changing mappings or access hold for writing; lock order maplock -> mu). Each
 * stream owns one worker thread (stream_worker) that runs its queued operations in FIFO order,
 * and registered kernel functions run on that worker (or on the calling thread for the NULL
 * stream, whose operations run synchronously after every stream is idle). The library starts no
 * other threads and installs no signal handlers. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "adsm_impl/cuda/cuda_driver.h"
#include "tests/cuda/driver_double.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef adsm__cu_result CUresult;
typedef adsm__cu_deviceptr dptr_t;

#define GRAN ((size_t)2 << 20)
#define MAX_SHMEM ((unsigned)48 << 10)

/* Prototypes with the exact ABI signatures from ADSM__CU_FUNCS: a definition below that
 * differs is a compile error. */
#define DD_DECL(name, version, required, ret, params) EXPORT ret name params;
ADSM__CU_FUNCS(DD_DECL)
#undef DD_DECL
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags,
                                    adsm__cu_proc_query_result *status);

/* ---------------------------------------------------------------- state */

struct adsm__cu_ctx_st {
    int dev;
    int refs;       /* primary context retain count; 0 = not active */
    CUresult sticky; /* nonzero after a kernel fault */
};

enum op_kind { OP_H2D, OP_D2H, OP_D2D, OP_PEER, OP_MEMSET, OP_LAUNCH, OP_RECORD, OP_WAIT };

struct launch_rec {
    char *name;
    unsigned grid[3], block[3];
    size_t nparams;
    size_t *size;
    void **param;
    unsigned char *buf;
};

struct op {
    struct op *next;
    enum op_kind kind;
    unsigned long long seq;
    dptr_t dst, src;
    void *hdst;       /* D2H destination (pinned user memory or a caller-owned private buffer) */
    const void *hsrc; /* H2D source (pinned user memory or `owned`) */
    bool hsrc_registered; /* hsrc is cuMemHostRegister'ed memory: read whatever its protection */
    void *owned;      /* freed with the op */
    size_t n;
    unsigned char value;
    int dst_dev, src_dev; /* OP_PEER: the devices whose access the two sides need */
    struct launch_rec *launch;
    unsigned long long wserial, wseq; /* OP_WAIT: wait until that stream has done that op */
};

struct adsm__cu_stream_st {
    unsigned long long serial;
    struct adsm__cu_ctx_st *ctx;
    struct op *head, *tail;
    unsigned long long queued_seq, done_seq;
    bool stop;
    pthread_t thread;
};

struct adsm__cu_event_st {
    struct adsm__cu_ctx_st *ctx;
    unsigned flags;
    unsigned long long serial, seq; /* most recent record; serial 0 = complete */
};

struct adsm__cu_func_st {
    struct adsm__cu_mod_st *module;
    char *name;
    size_t nparams;
    size_t *size, *offset;
    size_t block_end, block_rounded;
};

struct adsm__cu_mod_st {
    size_t nfuncs;
    struct adsm__cu_func_st **funcs;
};

struct phys {
    struct phys *next;
    adsm__cu_mem_handle id;
    int dev;      /* the device whose memory it is */
    size_t size, ngran;
    size_t *gran; /* memfd granule index of each granule */
    int maps;
    bool released;
};

struct mapping {
    struct mapping *next;
    dptr_t d;
    size_t size;
    struct phys *h;
};

struct resv {
    struct resv *next;
    dptr_t base;
    size_t size;
    char *shadow;
    bool placeholder; /* base..base+size is held by a PROT_NONE host mapping of ours */
    struct mapping *maps;
    struct mapping **gm; /* per granule: the mapping covering it, or NULL */
    unsigned long long *gr, *gw; /* per granule: the devices that may read it, and write it */
};

struct pinned {
    struct pinned *next;
    char *p;
    size_t size;
    bool registered; /* cuMemHostRegister (the caller's pages), not cuMemAllocHost */
    bool portable;   /* CU_MEMHOSTREGISTER_PORTABLE: page-locked for every context */
    struct adsm__cu_ctx_st *ctx; /* else only for copies in the registering context */
};

/* cuMemAllocManaged memory: plain host pages that the CPU and every device (kernels, copies) reach
 * at one address, as unified memory does; where its pages are is only counted (prefetches). */
struct managed {
    struct managed *next;
    char *p;
    size_t size;
};

struct kernel_reg {
    struct kernel_reg *next;
    char *name;
    cudadouble_kernel_fn fn;
    void *user;
};

enum { H_STREAM = 1, H_EVENT, H_MODULE, H_FUNC };
struct handle_ent {
    void *p;
    int kind;
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_rwlock_t maplock;
    bool initialized;
    int ndev;
    int compute[64]; /* per device: major*10 + minor (CUDADOUBLE_COMPUTE) */
    int driver_version;
    size_t memory;
    bool no_param_info, no_pinned, no_placeholder, no_register, lose_null_memsets, no_peer, no_managed, pageable;
    size_t register_budget, registered_total; /* CUDADOUBLE_REGISTER_BUDGET: lockable bytes (0: no limit) */
    CUresult param_info_error;
    void (*address_hook)(int reserved, unsigned long long base, size_t size, void *user);
    void *address_hook_user;
    int procmem; /* /proc/self/mem: DMA into registered pages whatever their protection */
    unsigned long delay_us;
    unsigned long register_us_per_mib; /* time cuMemHostRegister takes to pin, per MiB */
    int registers_released;            /* cudadouble_release_registers: pinning ends at once, from now on */
    unsigned long unmap_us; /* time cuMemUnmap takes (a real one waits for the GPU) */
    unsigned long long kernel_max_threads;
    struct adsm__cu_ctx_st *ctxs;
    struct handle_ent *reg;
    size_t nreg, capreg;
    unsigned long long next_serial;
    int memfd;
    size_t ngran;             /* granules per device; device d's are [d * ngran, (d + 1) * ngran) */
    unsigned char *gran_used;
    size_t *gran_free;        /* per device */
    adsm__cu_mem_handle next_handle;
    struct phys *phys;
    struct resv *resv;
    struct pinned *pinned;
    struct managed *managed;
    struct kernel_reg *kernels;
    cudadouble_counters counters;
} g = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .cv = PTHREAD_COND_INITIALIZER,
    .maplock = PTHREAD_RWLOCK_INITIALIZER,
    .memfd = -1,
    .procmem = -1,
};

static __thread struct adsm__cu_ctx_st *tl_ctx;      /* cuCtxSetCurrent */
static __thread struct adsm__cu_ctx_st *tl_exec_ctx; /* set while this thread runs a kernel */

static CUresult note(CUresult r) {
    if (r != ADSM__CUDA_SUCCESS && r != ADSM__CUDA_ERROR_NOT_READY)
        __atomic_add_fetch(&g.counters.rejected, 1, __ATOMIC_RELAXED);
    return r;
}

static void lock(void) { pthread_mutex_lock(&g.mu); }
static void unlock(void) { pthread_mutex_unlock(&g.mu); }
static void wait_cv(void) { pthread_cond_wait(&g.cv, &g.mu); }
static void wake(void) { pthread_cond_broadcast(&g.cv); }

/* ---------------------------------------------------------------- handle registry (under mu) */

static bool reg_has(const void *p, int kind) {
    if (!p) return false;
    for (size_t i = 0; i < g.nreg; i++)
        if (g.reg[i].p == p && g.reg[i].kind == kind) return true;
    return false;
}

static bool reg_add(void *p, int kind) {
    if (g.nreg == g.capreg) {
        size_t cap = g.capreg ? 2 * g.capreg : 64;
        struct handle_ent *n = realloc(g.reg, cap * sizeof *n);
        if (!n) return false;
        g.reg = n;
        g.capreg = cap;
    }
    g.reg[g.nreg].p = p;
    g.reg[g.nreg].kind = kind;
    g.nreg++;
    return true;
}

static void reg_del(const void *p) {
    for (size_t i = 0; i < g.nreg; i++)
        if (g.reg[i].p == p) {
            g.reg[i] = g.reg[--g.nreg];
            return;
        }
}

static struct adsm__cu_stream_st *stream_by_serial(unsigned long long serial) {
    for (size_t i = 0; i < g.nreg; i++)
        if (g.reg[i].kind == H_STREAM && ((struct adsm__cu_stream_st *)g.reg[i].p)->serial == serial)
            return g.reg[i].p;
    return NULL;
}

/* True when the op `seq` of stream `serial` has completed (or the stream is gone: a destroyed
 * stream drained its queue first). */
static bool seq_done(unsigned long long serial, unsigned long long seq) {
    if (serial == 0) return true;
    struct adsm__cu_stream_st *s = stream_by_serial(serial);
    return !s || s->done_seq >= seq;
}

static bool ctx_idle(struct adsm__cu_ctx_st *ctx) {
    for (size_t i = 0; i < g.nreg; i++)
        if (g.reg[i].kind == H_STREAM) {
            struct adsm__cu_stream_st *s = g.reg[i].p;
            if (s->ctx == ctx && s->done_seq != s->queued_seq) return false;
        }
    return true;
}

/* ---------------------------------------------------------------- checks (under mu) */

static CUresult check_init(void) {
    return g.initialized ? ADSM__CUDA_SUCCESS : ADSM__CUDA_ERROR_NOT_INITIALIZED;
}

/* The calling thread's current context, usable: else NOT_INITIALIZED / INVALID_CONTEXT / the
 * sticky error. */
static CUresult check_ctx(struct adsm__cu_ctx_st **out) {
    if (!g.initialized) return ADSM__CUDA_ERROR_NOT_INITIALIZED;
    struct adsm__cu_ctx_st *c = tl_ctx;
    if (!c || c->refs == 0) return ADSM__CUDA_ERROR_INVALID_CONTEXT;
    if (c->sticky) return c->sticky;
    if (out) *out = c;
    return ADSM__CUDA_SUCCESS;
}

/* stream handle -> stream (NULL handle = the NULL stream, *out = NULL) */
static CUresult check_stream(adsm__cu_stream h, struct adsm__cu_ctx_st *ctx, struct adsm__cu_stream_st **out) {
    *out = NULL;
    if (!h) return ADSM__CUDA_SUCCESS;
    if (!reg_has(h, H_STREAM)) return ADSM__CUDA_ERROR_INVALID_HANDLE;
    if (h->ctx != ctx) return ADSM__CUDA_ERROR_INVALID_HANDLE;
    *out = h;
    return ADSM__CUDA_SUCCESS;
}

static bool range_ok(uintptr_t a, size_t n) { return a + n >= a; }

static struct resv *resv_containing(dptr_t d, size_t n) {
    if (!range_ok(d, n)) return NULL;
    for (struct resv *r = g.resv; r; r = r->next)
        if (d >= r->base && d + n <= r->base + r->size) return r;
    return NULL;
}

/* Shadow pointer of device range [d, d+n) when every byte is mapped and device `dev` has at
 * least `prot` access to it (1 read, 3 read-write; dev -1: some device has); NULL otherwise.
 * n == 0 checks the byte at d. */
static struct managed *managed_containing(dptr_t d, size_t n) {
    if (!range_ok(d, n)) return NULL;
    for (struct managed *m = g.managed; m; m = m->next)
        if (d >= (uintptr_t)m->p && d + n <= (uintptr_t)m->p + m->size) return m;
    return NULL;
}

static bool host_in_resv(const void *p, size_t n);

/* CUDADOUBLE_PAGEABLE: whether every page of host range [a, a + n) is mapped (mincore fails with
 * ENOMEM on a hole), so that a device reaching pageable memory finds it there. */
static bool host_mapped(uintptr_t a, size_t n) {
    const uintptr_t page = 4096;
    unsigned char vec[64];
    for (uintptr_t p = a & ~(page - 1); p < a + n; p += 64 * page) {
        size_t len = a + n - p < 64 * page ? a + n - p : 64 * page;
        if (mincore((void *)p, len, vec) != 0) return false;
    }
    return true;
}

static char *dev_view(int dev, dptr_t d, size_t n, unsigned prot) {
    if (n == 0) n = 1;
    if (managed_containing(d, n)) return (char *)(uintptr_t)d; /* every device reaches it */
    struct resv *r = resv_containing(d, n);
    if (!r && g.pageable && range_ok(d, n) && !host_in_resv((const void *)(uintptr_t)d, n) && host_mapped(d, n))
        return (char *)(uintptr_t)d; /* pageable memory access (HMM): plain host pages */
    if (!r) return NULL;
    unsigned long long who = dev < 0 ? ~0ull : 1ull << dev;
    size_t first = (d - r->base) / GRAN, last = (d + n - 1 - r->base) / GRAN;
    for (size_t i = first; i <= last; i++) {
        if (!r->gm[i] || !(r->gr[i] & who)) return NULL;
        if ((prot & 2) && !(r->gw[i] & who)) return NULL;
    }
    return r->shadow + (d - r->base);
}

static bool can_access_peer(int dev, int peer) { return dev != peer && !g.no_peer; }

static bool host_in_resv(const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p;
    uintptr_t e = range_ok(a, n) ? a + n : UINTPTR_MAX;
    for (struct resv *r = g.resv; r; r = r->next)
        if (a < r->base + r->size && e > r->base) return true;
    return false;
}

/* The pinned range holding [p, p + n) whole for a copy in context ctx, or NULL. A registration
 * without CU_MEMHOSTREGISTER_PORTABLE is page-locked only for the context that made it; another
 * context's copies treat the memory as pageable (synchronous, staged). */
static struct pinned *host_pinned(const void *p, size_t n, const struct adsm__cu_ctx_st *ctx) {
    uintptr_t a = (uintptr_t)p;
    if (!range_ok(a, n)) return NULL;
    for (struct pinned *q = g.pinned; q; q = q->next)
        if (a >= (uintptr_t)q->p && a + n <= (uintptr_t)q->p + q->size)
            return !q->registered || q->portable || q->ctx == ctx ? q : NULL;
    return NULL;
}

static void count_host_bytes(const struct pinned *q, size_t n) {
    if (!q) g.counters.pageable_bytes += n;
    else if (q->registered) g.counters.registered_bytes += n;
    else g.counters.staged_bytes += n;
}

/* A DMA engine ignores the page protection: page-locked pages the program keeps PROT_NONE are
 * read and written all the same, here through /proc/self/mem. Moves n bytes between buf and the
 * host address `host` (to_host: into it); returns how many it could not (no /proc/self/mem). */
static size_t dma_procmem(char *buf, uintptr_t host, size_t n, bool to_host) {
    while (n > 0 && g.procmem >= 0) {
        ssize_t k = to_host ? pwrite(g.procmem, buf, n, (off_t)host) : pread(g.procmem, buf, n, (off_t)host);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        buf += k;
        host += (uintptr_t)k;
        n -= (size_t)k;
    }
    return n;
}

/* The host side of a copy into page-locked host memory. */
static void dma_write(void *dst, const void *src, size_t n) {
    size_t left = dma_procmem((char *)(uintptr_t)src, (uintptr_t)dst, n, true);
    if (left) memcpy((char *)dst + n - left, (const char *)src + n - left, left); /* plain memory only */
}

/* The host side of a copy from host memory, when it runs (a program may protect registered pages
 * while an asynchronous copy is queued); plain memory (staging buffers) is read directly. */
static void dma_read(void *dst, const void *src, size_t n, bool registered) {
    size_t left = registered ? dma_procmem(dst, (uintptr_t)src, n, false) : n;
    if (left) memcpy((char *)dst + n - left, (const char *)src + n - left, left);
}

/* ---------------------------------------------------------------- stream operations */

static void free_op(struct op *op) {
    if (!op) return;
    free(op->owned);
    if (op->launch) {
        free(op->launch->name);
        free(op->launch->size);
        free(op->launch->param);
        free(op->launch->buf);
        free(op->launch);
    }
    free(op);
}

static void set_sticky(struct adsm__cu_ctx_st *ctx, CUresult code) {
    if (ctx && code != ADSM__CUDA_SUCCESS && !ctx->sticky) ctx->sticky = code;
    wake();
}

/* Runs one operation on the calling thread (a stream worker, or an application thread for the
 * NULL stream). Called without mu; takes maplock for reading around any shadow access. Device
 * ranges were validated at the call; they are checked again here because the application may
 * have unmapped them since (a GPU would fault: sticky ILLEGAL_ADDRESS). */
static void run_op(struct adsm__cu_ctx_st *ctx, struct op *op) {
    if (op->kind == OP_RECORD || op->kind == OP_WAIT) return;
    pthread_rwlock_rdlock(&g.maplock);
    lock();
    char *d = NULL, *s = NULL;
    bool ok = true;
    cudadouble_kernel_fn fn = NULL;
    void *user = NULL;
    switch (op->kind) {
    case OP_H2D: ok = (d = dev_view(ctx->dev, op->dst, op->n, 3)) != NULL; break;
    case OP_D2H: ok = (s = dev_view(ctx->dev, op->src, op->n, 1)) != NULL; break;
    case OP_D2D:
    case OP_PEER:
        ok = (d = dev_view(op->dst_dev, op->dst, op->n, 3)) != NULL &&
             (s = dev_view(op->src_dev, op->src, op->n, 1)) != NULL;
        break;
    case OP_MEMSET: ok = (d = dev_view(ctx->dev, op->dst, op->n, 3)) != NULL; break;
    case OP_LAUNCH:
        for (struct kernel_reg *k = g.kernels; k; k = k->next)
            if (strcmp(k->name, op->launch->name) == 0) {
                fn = k->fn;
                user = k->user;
                break;
            }
        break;
    default: break;
    }
    if (!ok) {
        set_sticky(ctx, ADSM__CUDA_ERROR_ILLEGAL_ADDRESS);
    } else if (op->kind == OP_LAUNCH && !fn) {
        fprintf(stderr, "cudadouble: no host function registered for kernel '%s'\n", op->launch->name);
        set_sticky(ctx, ADSM__CUDA_ERROR_LAUNCH_FAILED);
        ok = false;
    }
    unlock();
    if (ok) {
        switch (op->kind) {
        case OP_H2D:
            dma_read(d, op->hsrc, op->n, op->hsrc_registered);
            lock();
            g.counters.h2d_landed_bytes += op->n;
            unlock();
            break;
        case OP_D2H: dma_write(op->hdst, s, op->n); break;
        case OP_D2D:
        case OP_PEER: memmove(d, s, op->n); break;
        case OP_MEMSET: memset(d, op->value, op->n); break;
        case OP_LAUNCH: {
            cudadouble_launch l;
            memcpy(l.grid, op->launch->grid, sizeof l.grid);
            memcpy(l.block, op->launch->block, sizeof l.block);
            l.nparams = op->launch->nparams;
            l.param_size = op->launch->size;
            l.param = op->launch->param;
            struct adsm__cu_ctx_st *saved = tl_exec_ctx;
            tl_exec_ctx = ctx;
            fn(&l, user);
            tl_exec_ctx = saved;
            break;
        }
        default: break;
        }
    }
    pthread_rwlock_unlock(&g.maplock);
}

static void *stream_worker(void *arg) {
    struct adsm__cu_stream_st *s = arg;
    lock();
    for (;;) {
        while (!s->head && !s->stop) wait_cv();
        if (!s->head) break;
        struct op *op = s->head;
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        if (op->kind == OP_WAIT) {
            while (!seq_done(op->wserial, op->wseq) && !s->ctx->sticky) wait_cv();
        } else if (!s->ctx->sticky) {
            unlock();
            if (g.delay_us) usleep(g.delay_us);
            run_op(s->ctx, op);
            lock();
        }
        s->done_seq = op->seq;
        wake();
        unlock();
        free_op(op);
        lock();
    }
    unlock();
    return NULL;
}

/* Queues `op` on stream `s` (under mu), or, for the NULL stream, waits until every stream of
 * the context is idle and runs it on the calling thread. Takes ownership of op. For a queued
 * op, *serial and *seq say where it is. */
static CUresult submit(struct adsm__cu_ctx_st *ctx, struct adsm__cu_stream_st *s, struct op *op,
                       unsigned long long *serial, unsigned long long *seq) {
    if (s) {
        op->seq = ++s->queued_seq;
        op->next = NULL;
        if (s->tail) s->tail->next = op;
        else s->head = op;
        s->tail = op;
        if (serial) *serial = s->serial;
        if (seq) *seq = op->seq;
        wake();
        return ADSM__CUDA_SUCCESS;
    }
    while (!ctx_idle(ctx)) wait_cv();
    if (serial) *serial = 0;
    if (seq) *seq = 0;
    if (ctx->sticky) {
        free_op(op);
        return ctx->sticky;
    }
    unlock();
    run_op(ctx, op);
    free_op(op);
    lock();
    return ctx->sticky;
}

static struct op *new_op(enum op_kind kind) {
    struct op *op = calloc(1, sizeof *op);
    if (op) op->kind = kind;
    return op;
}

/* ---------------------------------------------------------------- env, init, errors */

static unsigned long long env_ull(const char *name, unsigned long long dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 0);
    if (errno || *end) return dflt;
    return x;
}

/* Each device's compute capability from a comma-separated list; 9.0 where the list says nothing. */
static void env_compute(const char *name) {
    const char *v = getenv(name);
    for (int d = 0; d < 64; d++) {
        char *end = NULL;
        long cc = v && *v ? strtol(v, &end, 10) : 0;
        g.compute[d] = cc > 0 ? (int)cc : 90;
        v = end && *end == ',' ? end + 1 : NULL;
    }
}

static bool env_flag(const char *name) {
    const char *v = getenv(name);
    return v && strcmp(v, "1") == 0;
}

CUresult cuInit(unsigned int flags) {
    if (flags != 0) return note(ADSM__CUDA_ERROR_INVALID_VALUE);
    lock();
    CUresult r = ADSM__CUDA_SUCCESS;
    if (g.initialized) goto out;
    unsigned long long ndev = env_ull("CUDADOUBLE_DEVICES", 1);
    if (ndev == 0) {
        r = ADSM__CUDA_ERROR_NO_DEVICE;
        goto out;
    }
    if (ndev > 64) ndev = 64;
    g.ndev = (int)ndev;
    env_compute("CUDADOUBLE_COMPUTE");
    g.driver_version = (int)env_ull("CUDADOUBLE_DRIVER_VERSION", 12080);
    g.memory = (size_t)env_ull("CUDADOUBLE_MEMORY", (size_t)1 << 30);
    g.no_param_info = env_flag("CUDADOUBLE_NO_PARAM_INFO");
    g.no_pinned = env_flag("CUDADOUBLE_NO_PINNED");
    g.no_managed = env_flag("CUDADOUBLE_NO_MANAGED");
    g.pageable = env_flag("CUDADOUBLE_PAGEABLE");
    g.no_register = env_flag("CUDADOUBLE_NO_REGISTER");
    g.register_budget = (size_t)env_ull("CUDADOUBLE_REGISTER_BUDGET", 0);
    if (g.procmem < 0) g.procmem = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
    g.no_placeholder = env_flag("CUDADOUBLE_NO_PLACEHOLDER");
    g.delay_us = (unsigned long)env_ull("CUDADOUBLE_DELAY_US", 0);
    g.register_us_per_mib = (unsigned long)env_ull("CUDADOUBLE_REGISTER_US_PER_MIB", 0);
    g.unmap_us = (unsigned long)env_ull("CUDADOUBLE_UNMAP_US", 0);
    g.kernel_max_threads = env_ull("CUDADOUBLE_KERNEL_MAX_THREADS", 1024);
    g.param_info_error = (CUresult)env_ull("CUDADOUBLE_PARAM_INFO_ERROR", 0);
    g.lose_null_memsets = env_flag("CUDADOUBLE_LOSE_NULL_MEMSETS");
    g.no_peer = env_flag("CUDADOUBLE_NO_PEER");
    g.ngran = g.memory / GRAN;
    size_t all = g.ngran * (size_t)g.ndev;
    g.gran_used = calloc(all ? all : 1, 1);
    g.gran_free = calloc((size_t)g.ndev, sizeof *g.gran_free);
    g.ctxs = calloc((size_t)g.ndev, sizeof *g.ctxs);
    g.memfd = memfd_create("cudadouble-device-memory", MFD_CLOEXEC);
    if (!g.gran_used || !g.gran_free || !g.ctxs || g.memfd < 0 || ftruncate(g.memfd, (off_t)(all * GRAN)) != 0) {
        free(g.gran_used);
        free(g.gran_free);
        free(g.ctxs);
        g.gran_used = NULL;
        g.gran_free = NULL;
        g.ctxs = NULL;
        if (g.memfd >= 0) close(g.memfd);
        g.memfd = -1;
        r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    for (int i = 0; i < g.ndev; i++) {
        g.ctxs[i].dev = i;
        g.gran_free[i] = g.ngran;
    }
    g.next_handle = 0x1000;
    g.next_serial = 1;
    g.initialized = true;
out:
    unlock();
    return note(r);
}

CUresult cuDriverGetVersion(int *version) {
    if (!version) return note(ADSM__CUDA_ERROR_INVALID_VALUE);
    lock();
    *version = g.initialized ? g.driver_version : (int)env_ull("CUDADOUBLE_DRIVER_VERSION", 12080);
    unlock();
    return ADSM__CUDA_SUCCESS;
}

static const struct {
    CUresult code;
    const char *name, *text;
} error_table[] = {
#define DD_ERR(name, value) {value, #name, NULL},
    ADSM__CU_RESULTS(DD_ERR)
#undef DD_ERR
};

static const char *error_text(CUresult code) {
    switch (code) {
    case 0: return "no error";
    case 1: return "invalid argument";
    case 2: return "out of memory";
    case 3: return "initialization error";
    case 4: return "driver shutting down";
    case 34: return "CUDA driver is a stub library";
    case 35: return "CUDA driver version is insufficient for CUDA runtime version";
    case 36: return "API call requires a newer CUDA driver";
    case 100: return "no CUDA-capable device is detected";
    case 101: return "invalid device ordinal";
    case 200: return "device kernel image is invalid";
    case 201: return "invalid device context";
    case 209: return "no kernel image is available for execution on the device";
    case 218: return "a PTX JIT compilation failed";
    case 222: return "the provided PTX was compiled with an unsupported toolchain";
    case 400: return "invalid resource handle";
    case 500: return "named symbol not found";
    case 600: return "device not ready";
    case 700: return "an illegal memory access was encountered";
    case 701: return "too many resources requested for launch";
    case 702: return "the launch timed out and was terminated";
    case 710: return "device-side assert triggered";
    case 712: return "part or all of the requested memory range is already mapped";
    case 713: return "pointer does not correspond to a registered memory region";
    case 714: return "hardware stack error";
    case 715: return "an illegal instruction was encountered";
    case 716: return "misaligned address";
    case 717: return "operation not supported on global/shared address space";
    case 719: return "unspecified launch failure";
    case 800: return "operation not permitted";
    case 801: return "operation not supported";
    case 803: return "system has unsupported display driver / cuda driver combination";
    case 804: return "forward compatibility was attempted on non supported HW";
    case 999: return "unknown error";
    default: break;
    }
    /* a code adsm_impl/cuda/cuda_driver.h lists that has no message above: its name */
    for (size_t i = 0; i < sizeof error_table / sizeof error_table[0]; i++)
        if (error_table[i].code == code) return error_table[i].name;
    return NULL;
}

CUresult cuGetErrorName(CUresult error, const char **name) {
    if (!name) return note(ADSM__CUDA_ERROR_INVALID_VALUE);
    for (size_t i = 0; i < sizeof error_table / sizeof error_table[0]; i++)
        if (error_table[i].code == error) {
            *name = error_table[i].name;
            return ADSM__CUDA_SUCCESS;
        }
    *name = NULL;
    return note(ADSM__CUDA_ERROR_INVALID_VALUE);
}

CUresult cuGetErrorString(CUresult error, const char **text) {
    if (!text) return note(ADSM__CUDA_ERROR_INVALID_VALUE);
    *text = error_text(error);
    return *text ? ADSM__CUDA_SUCCESS : note(ADSM__CUDA_ERROR_INVALID_VALUE);
}

/* ---------------------------------------------------------------- cuGetProcAddress */

static const struct {
    const char *name;
    int version;
    void (*fn)(void);
} proc_table[] = {
#define DD_PROC(name, version, required, ret, params) {#name, version, (void (*)(void))name},
    ADSM__CU_FUNCS(DD_PROC)
#undef DD_PROC
    {"cuGetProcAddress", 12000, (void (*)(void))cuGetProcAddress_v2},
};

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags,
                             adsm__cu_proc_query_result *status) {
    if (!symbol || !pfn || flags != ADSM__CU_GET_PROC_ADDRESS_DEFAULT) return note(ADSM__CUDA_ERROR_INVALID_VALUE);
    lock();
    bool no_param_info = g.initialized ? g.no_param_info : env_flag("CUDADOUBLE_NO_PARAM_INFO");
    unlock();
    *pfn = NULL;
    for (size_t i = 0; i < sizeof proc_table / sizeof proc_table[0]; i++) {
        if (strcmp(proc_table[i].name, symbol) != 0) continue;
        if (no_param_info && strcmp(symbol, "cuFuncGetParamInfo") == 0) break;
        if (proc_table[i].version > version) {
            if (status) *status = ADSM__CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
            return note(ADSM__CUDA_ERROR_NOT_FOUND);
        }
        *pfn = (void *)proc_table[i].fn;
        if (status) *status = ADSM__CU_GET_PROC_ADDRESS_SUCCESS;
        return ADSM__CUDA_SUCCESS;
    }
    if (status) *status = ADSM__CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return note(ADSM__CUDA_ERROR_NOT_FOUND);
}

/* ---------------------------------------------------------------- devices and contexts */

static CUresult check_dev(adsm__cu_device dev) {
    return dev >= 0 && dev < g.ndev ? ADSM__CUDA_SUCCESS : ADSM__CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuDeviceGetCount(int *count) {
    lock();
    CUresult r = check_init();
    if (!r && !count) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r) *count = g.ndev;
    unlock();
    return note(r);
}

CUresult cuDeviceGet(adsm__cu_device *device, int ordinal) {
    lock();
    CUresult r = check_init();
    if (!r && !device) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r) r = check_dev(ordinal);
    if (!r) *device = ordinal;
    unlock();
    return note(r);
}

CUresult cuDeviceGetName(char *name, int len, adsm__cu_device dev) {
    lock();
    CUresult r = check_init();
    if (!r && (!name || len <= 0)) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r) r = check_dev(dev);
    if (!r) snprintf(name, (size_t)len, "%s", "adsm driver double");
    unlock();
    return note(r);
}

CUresult cuDeviceGetAttribute(int *value, adsm__cu_device_attribute attrib, adsm__cu_device dev) {
    lock();
    CUresult r = check_init();
    if (!r && !value) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r) r = check_dev(dev);
    if (!r) {
        switch (attrib) {
        case ADSM__CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
        case ADSM__CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *value = 1024; break;
        case ADSM__CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *value = 2147483647; break;
        case ADSM__CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: *value = 2; break;
        case ADSM__CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; break;
        case ADSM__CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = g.compute[dev] / 10; break;
        case ADSM__CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = g.compute[dev] % 10; break;
        case ADSM__CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *value = 1; break;
        case ADSM__CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *value = !g.no_managed; break;
        case ADSM__CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: *value = !g.no_managed; break;
        case ADSM__CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: *value = g.pageable; break;
        default: r = ADSM__CUDA_ERROR_INVALID_VALUE; break;
        }
    }
    unlock();
    return note(r);
}

CUresult cuDeviceCanAccessPeer(int *can, adsm__cu_device dev, adsm__cu_device peer) {
    lock();
    CUresult r = check_init();
    if (!r && !can) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r) r = check_dev(dev);
    if (!r) r = check_dev(peer);
    if (!r) *can = can_access_peer(dev, peer);
    unlock();
    return note(r);
}

CUresult cuDeviceTotalMem(size_t *bytes, adsm__cu_device dev) {
    lock();
    CUresult r = check_init();
    if (!r && !bytes) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r) r = check_dev(dev);
    if (!r) *bytes = g.ngran * GRAN;
    unlock();
    return note(r);
}

CUresult cuDevicePrimaryCtxRetain(adsm__cu_context *ctx, adsm__cu_device dev) {
    lock();
    CUresult r = check_init();
    if (!r && !ctx) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r) r = check_dev(dev);
    if (!r) {
        g.ctxs[dev].refs++;
        *ctx = &g.ctxs[dev];
    }
    unlock();
    return note(r);
}

CUresult cuDevicePrimaryCtxRelease(adsm__cu_device dev) {
    lock();
    CUresult r = check_init();
    if (!r) r = check_dev(dev);
    if (!r && g.ctxs[dev].refs == 0) r = ADSM__CUDA_ERROR_INVALID_CONTEXT;
    if (!r && --g.ctxs[dev].refs == 0) g.ctxs[dev].sticky = ADSM__CUDA_SUCCESS; /* reset on last release */
    unlock();
    return note(r);
}

CUresult cuCtxSetCurrent(adsm__cu_context ctx) {
    lock();
    CUresult r = check_init();
    if (!r && ctx) {
        bool known = false;
        for (int i = 0; i < g.ndev; i++) known |= ctx == &g.ctxs[i];
        if (!known) r = ADSM__CUDA_ERROR_INVALID_CONTEXT;
    }
    if (!r) tl_ctx = ctx;
    unlock();
    return note(r);
}

CUresult cuCtxGetCurrent(adsm__cu_context *ctx) {
    lock();
    CUresult r = check_init();
    if (!r && !ctx) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r) *ctx = tl_ctx;
    unlock();
    return note(r);
}

CUresult cuCtxSynchronize(void) {
    lock();
    struct adsm__cu_ctx_st *ctx = NULL;
    CUresult r = check_ctx(&ctx);
    if (!r) {
        while (!ctx_idle(ctx) && !ctx->sticky) wait_cv();
        r = ctx->sticky;
    }
    unlock();
    return note(r);
}

/* ---------------------------------------------------------------- streams and events */

CUresult cuStreamCreate(adsm__cu_stream *stream, unsigned int flags) {
    lock();
    struct adsm__cu_ctx_st *ctx = NULL;
    CUresult r = check_ctx(&ctx);
    if (!r && (!stream || (flags & ~(unsigned)ADSM__CU_STREAM_NON_BLOCKING))) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        struct adsm__cu_stream_st *s = calloc(1, sizeof *s);
        if (!s || !reg_add(s, H_STREAM)) {
            free(s);
            r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            s->ctx = ctx;
            s->serial = g.next_serial++;
            if (pthread_create(&s->thread, NULL, stream_worker, s) != 0) {
                reg_del(s);
                free(s);
                r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                *stream = s;
            }
        }
    }
    unlock();
    return note(r);
}

CUresult cuStreamDestroy(adsm__cu_stream stream) {
    lock();
    CUresult r = check_init();
    struct adsm__cu_ctx_st *ctx = NULL;
    if (!r) {
        ctx = tl_ctx;
        if (!ctx || ctx->refs == 0) r = ADSM__CUDA_ERROR_INVALID_CONTEXT;
    }
    if (!r && (!reg_has(stream, H_STREAM) || stream->ctx != ctx)) r = ADSM__CUDA_ERROR_INVALID_HANDLE;
    if (r) {
        unlock();
        return note(r);
    }
    /* Resources go even on a broken context; the call still reports the sticky error. */
    reg_del(stream);
    stream->stop = true;
    wake();
    unlock();
    pthread_join(stream->thread, NULL);
    lock();
    r = ctx->sticky;
    unlock();
    free(stream);
    lock();
    wake(); /* waiters keyed on its serial now see it gone */
    unlock();
    return note(r);
}

CUresult cuStreamSynchronize(adsm__cu_stream stream) {
    lock();
    struct adsm__cu_ctx_st *ctx = NULL;
    struct adsm__cu_stream_st *s = NULL;
    CUresult r = check_ctx(&ctx);
    if (!r) r = check_stream(stream, ctx, &s);
    if (!r) {
        g.counters.spin_waits++; /* primary contexts schedule CU_CTX_SCHED_AUTO: a real driver spins */
        if (s) {
            unsigned long long serial = s->serial, seq = s->queued_seq;
            while (!seq_done(serial, seq) && !ctx->sticky) wait_cv();
        } else {
            while (!ctx_idle(ctx) && !ctx->sticky) wait_cv();
        }
        r = ctx->sticky;
    }
    unlock();
    return note(r);
}

CUresult cuEventCreate(adsm__cu_event *event, unsigned int flags) {
    lock();
    struct adsm__cu_ctx_st *ctx = NULL;
    CUresult r = check_ctx(&ctx);
    if (!r && (!event || (flags & ~(unsigned)(ADSM__CU_EVENT_BLOCKING_SYNC | ADSM__CU_EVENT_DISABLE_TIMING))))
        r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        struct adsm__cu_event_st *e = calloc(1, sizeof *e);
        if (!e || !reg_add(e, H_EVENT)) {
            free(e);
            r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            e->ctx = ctx;
            e->flags = flags;
            *event = e;
        }
    }
    unlock();
    return note(r);
}

CUresult cuEventDestroy(adsm__cu_event event) {
    lock();
    CUresult r = check_init();
    if (!r && (!tl_ctx || tl_ctx->refs == 0)) r = ADSM__CUDA_ERROR_INVALID_CONTEXT;
    if (!r && !reg_has(event, H_EVENT)) r = ADSM__CUDA_ERROR_INVALID_HANDLE;
    if (!r) {
        reg_del(event);
        free(event);
        r = tl_ctx->sticky;
    }
    unlock();
    return note(r);
}

CUresult cuEventRecord(adsm__cu_event event, adsm__cu_stream stream) {
    lock();
    struct adsm__cu_ctx_st *ctx = NULL;
    struct adsm__cu_stream_st *s = NULL;
    CUresult r = check_ctx(&ctx);
    if (!r && !reg_has(event, H_EVENT)) r = ADSM__CUDA_ERROR_INVALID_HANDLE;
    if (!r) r = check_stream(stream, ctx, &s);
    if (!r) {
        struct op *op = new_op(OP_RECORD);
        if (!op) r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
        else {
            unsigned long long serial, seq;
            r = submit(ctx, s, op, &serial, &seq);
            /* the event may have been destroyed while the NULL stream drained */
            if (!r && reg_has(event, H_EVENT)) {
                event->serial = serial;
                event->seq = seq;
            }
        }
    }
    unlock();
    return note(r);
}

CUresult cuEventSynchronize(adsm__cu_event event) {
    lock();
    struct adsm__cu_ctx_st *ctx = NULL;
    CUresult r = check_ctx(&ctx);
    if (!r && !reg_has(event, H_EVENT)) r = ADSM__CUDA_ERROR_INVALID_HANDLE;
    if (!r) {
        unsigned long long serial = event->serial, seq = event->seq;
        /* without BLOCKING_SYNC a real driver busy-waits here, burning a core */
        if (!(event->flags & ADSM__CU_EVENT_BLOCKING_SYNC)) g.counters.spin_waits++;
        while (!seq_done(serial, seq) && !ctx->sticky) wait_cv();
        r = ctx->sticky;
    }
    unlock();
    return note(r);
}

CUresult cuStreamWaitEvent(adsm__cu_stream stream, adsm__cu_event event, unsigned int flags) {
    lock();
    struct adsm__cu_ctx_st *ctx = NULL;
    struct adsm__cu_stream_st *s = NULL;
    CUresult r = check_ctx(&ctx);
    if (!r) r = check_stream(stream, ctx, &s);
    if (!r && !reg_has(event, H_EVENT)) r = ADSM__CUDA_ERROR_INVALID_HANDLE;
    if (!r && flags != 0) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        unsigned long long serial = event->serial, seq = event->seq;
        if (s) {
            struct op *op = new_op(OP_WAIT);
            if (!op) r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
            else {
                op->wserial = serial;
                op->wseq = seq;
                r = submit(ctx, s, op, NULL, NULL);
            }
        } else {
            /* the NULL stream: later work runs in the caller, so wait here */
            while (!seq_done(serial, seq) && !ctx->sticky) wait_cv();
            r = ctx->sticky;
        }
    }
    unlock();
    return note(r);
}

/* ---------------------------------------------------------------- host memory */

CUresult cuMemAllocHost(void **ptr, size_t bytes) {
    lock();
    CUresult r = check_ctx(NULL);
    if (!r && (!ptr || bytes == 0)) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r && g.no_pinned) r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
    if (!r) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t size = (bytes + page - 1) / page * page;
        struct pinned *q = malloc(sizeof *q);
        void *p = size >= bytes ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                                : MAP_FAILED;
        if (!q || p == MAP_FAILED) {
            free(q);
            if (p != MAP_FAILED) munmap(p, size);
            r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            q->p = p;
            q->size = size;
            q->registered = false;
            q->next = g.pinned;
            g.pinned = q;
            *ptr = p;
        }
    }
    unlock();
    return note(r);
}

CUresult cuMemAllocManaged(adsm__cu_deviceptr *ptr, size_t bytes, unsigned int flags) {
    lock();
    CUresult r = check_ctx(NULL);
    if (!r && (!ptr || bytes == 0 || flags != ADSM__CU_MEM_ATTACH_GLOBAL)) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r && g.no_managed) r = ADSM__CUDA_ERROR_NOT_SUPPORTED;
    if (!r) {
        size_t size = (bytes + GRAN - 1) / GRAN * GRAN;
        struct managed *m = malloc(sizeof *m);
        void *p = size >= bytes ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                                : MAP_FAILED;
        if (!m || p == MAP_FAILED) {
            free(m);
            if (p != MAP_FAILED) munmap(p, size);
            r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            m->p = p;
            m->size = size;
            m->next = g.managed;
            g.managed = m;
            g.counters.managed_allocs++;
            *ptr = (uintptr_t)p;
        }
    }
    unlock();
    return note(r);
}

/* Only managed memory here (adsm frees device memory with cuMemUnmap); as the driver, it waits
 * for the device to be idle first. */
CUresult cuMemFree(adsm__cu_deviceptr ptr) {
    lock();
    CUresult r = check_ctx(NULL);
    struct managed **mp = &g.managed;
    while (!r && *mp && (uintptr_t)(*mp)->p != ptr) mp = &(*mp)->next;
    if (!r && !*mp) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    struct managed *m = r ? NULL : *mp;
    if (m) *mp = m->next;
    unlock();
    if (m) {
        cuCtxSynchronize();
        munmap(m->p, m->size);
        free(m);
    }
    return note(r);
}

/* Counts what would migrate: the range must be managed memory; the location a device or the host. */
CUresult cuMemPrefetchAsync(adsm__cu_deviceptr ptr, size_t bytes, adsm__cu_mem_location location, unsigned int flags,
                            adsm__cu_stream stream) {
    lock();
    struct adsm__cu_ctx_st *ctx = NULL;
    struct adsm__cu_stream_st *s = NULL;
    CUresult r = check_ctx(&ctx);
    if (!r) r = check_stream(stream, ctx, &s);
    if (!r && (flags != 0 || bytes == 0 || !managed_containing(ptr, bytes))) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r && location.type == ADSM__CU_MEM_LOCATION_TYPE_DEVICE && check_dev(location.id) == 0)
        g.counters.prefetch_device_bytes += bytes;
    else if (!r && location.type == ADSM__CU_MEM_LOCATION_TYPE_HOST)
        g.counters.prefetch_host_bytes += bytes;
    else if (!r)
        r = ADSM__CUDA_ERROR_INVALID_DEVICE;
    unlock();
    return note(r);
}

CUresult cuMemFreeHost(void *ptr) {
    lock();
    CUresult r = check_init();
    if (!r && (!tl_ctx || tl_ctx->refs == 0)) r = ADSM__CUDA_ERROR_INVALID_CONTEXT;
    if (!r) {
        struct pinned **pp = &g.pinned;
        while (*pp && ((*pp)->p != ptr || (*pp)->registered)) pp = &(*pp)->next;
        if (!ptr || !*pp) r = ADSM__CUDA_ERROR_INVALID_VALUE;
        else {
            struct pinned *q = *pp;
            *pp = q->next;
            munmap(q->p, q->size);
            free(q);
            r = tl_ctx->sticky;
        }
    }
    unlock();
    return note(r);
}

/* Whether every page of [a, a + n) is mapped readable and writable (/proc/self/maps), as pinning
 * pages for writing needs. */
static bool host_range_writable(uintptr_t a, size_t n) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), at = a & ~(page - 1), end = (a + n + page - 1) & ~(page - 1);
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return false;
    char line[512];
    while (at < end && fgets(line, sizeof line, f)) { /* the lines come in address order */
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || hi <= at) continue;
        if (lo > at || perms[0] != 'r' || perms[1] != 'w') break;
        at = hi;
    }
    fclose(f);
    return at >= end;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* Allocates and maps every page of [p, p + n) for writing (the range is mapped read-write:
 * checked before). MADV_POPULATE_WRITE where the kernel has it (5.14), else a write of what each
 * page already holds, which no other thread can be racing on: nothing uses a range being pinned. */
static void populate_for_writing(void *p, size_t n) {
    if (madvise(p, n, MADV_POPULATE_WRITE) == 0) return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), end = (uintptr_t)p + n;
    for (uintptr_t a = (uintptr_t)p & ~(page - 1); a < end; a += page) { /* every page, an unaligned range's too */
        volatile unsigned char *b = (volatile unsigned char *)(a < (uintptr_t)p ? (uintptr_t)p : a);
        *b = *b;
    }
}

/* Page-locks the caller's [ptr, ptr + bytes): page-aligned is not required (the real driver
 * rounds), but it must not overlap a reserved device range or another pinned range, and its
 * pages must be mapped read-write. */
CUresult cuMemHostRegister(void *ptr, size_t bytes, unsigned int flags) {
    lock();
    struct adsm__cu_ctx_st *ctx = NULL;
    CUresult r = check_ctx(&ctx);
    uintptr_t a = (uintptr_t)ptr;
    g.counters.register_calls++;
    if (!r && (!ptr || bytes == 0 || !range_ok(a, bytes) || (flags & ~0x0fu))) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r && host_in_resv(ptr, bytes)) r = ADSM__CUDA_ERROR_INVALID_VALUE; /* already device addresses */
    if (!r && !host_range_writable(a, bytes)) r = ADSM__CUDA_ERROR_INVALID_VALUE; /* cannot pin for writing */
    for (struct pinned *q = g.pinned; !r && q; q = q->next)
        if (a < (uintptr_t)q->p + q->size && a + bytes > (uintptr_t)q->p) r = ADSM__CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    if (!r && g.no_register) r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
    if (!r && g.register_budget && g.registered_total + bytes > g.register_budget) r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
    if (!r) {
        struct pinned *q = malloc(sizeof *q);
        if (!q) r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
        else {
            q->p = ptr;
            q->size = bytes;
            q->registered = true;
            q->portable = (flags & 0x01u) != 0;
            q->ctx = ctx;
            g.registered_total += bytes;
            q->next = g.pinned;
            g.pinned = q;
            g.counters.registrations++;
        }
    }
    unlock();
    /* pinning faults the pages in for writing, as pin_user_pages with FOLL_WRITE does: a range
     * of a file's pages (adsm's host alias) is allocated here, not at the program's first touch */
    if (!r) populate_for_writing(ptr, bytes);
    if (!r && g.register_us_per_mib) { /* pinning takes time in proportion, outside the driver's lock */
        __atomic_add_fetch(&g.counters.registers_in_flight, 1, __ATOMIC_RELAXED);
        /* in 1 ms steps, so that a test can end the pinning early (cudadouble_release_registers) */
        for (unsigned long long left = g.register_us_per_mib * (bytes >> 20);
             left > 0 && !__atomic_load_n(&g.registers_released, __ATOMIC_ACQUIRE); left -= left < 1000 ? left : 1000)
            usleep((useconds_t)(left < 1000 ? left : 1000));
        __atomic_sub_fetch(&g.counters.registers_in_flight, 1, __ATOMIC_RELAXED);
    }
    return note(r);
}

CUresult cuMemHostUnregister(void *ptr) {
    lock();
    CUresult r = check_ctx(NULL);
    if (!r) {
        struct pinned **pp = &g.pinned;
        while (*pp && !((*pp)->registered && (*pp)->p == ptr)) pp = &(*pp)->next;
        if (!*pp) r = ADSM__CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
        else {
            struct pinned *q = *pp;
            *pp = q->next;
            g.registered_total -= q->size;
            free(q);
        }
    }
    unlock();
    return note(r);
}

/* ---------------------------------------------------------------- copies */

/* Common validation of a copy's stream and context (under mu). */
static CUresult copy_prologue(adsm__cu_stream stream, struct adsm__cu_ctx_st **ctx, struct adsm__cu_stream_st **s) {
    CUresult r = check_ctx(ctx);
    if (!r) r = check_stream(stream, *ctx, s);
    return r;
}

CUresult cuMemcpyHtoDAsync(adsm__cu_deviceptr dst, const void *src, size_t bytes, adsm__cu_stream stream) {
    lock();
    struct adsm__cu_ctx_st *ctx = NULL;
    struct adsm__cu_stream_st *s = NULL;
    CUresult r = copy_prologue(stream, &ctx, &s);
    if (r || bytes == 0) goto out;
    if (!src || !range_ok((uintptr_t)src, bytes) || !dev_view(ctx->dev, dst, bytes, 3) || host_in_resv(src, bytes)) {
        r = ADSM__CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    struct op *op = new_op(OP_H2D);
    if (!op) {
        r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    op->dst = dst;
    op->n = bytes;
    struct pinned *pinned = host_pinned(src, bytes, ctx);
    count_host_bytes(pinned, bytes);
    if (pinned) {
        op->hsrc = src;
        op->hsrc_registered = pinned->registered;
        g.counters.h2d_async++;
    } else {
        /* pageable: staged into a private buffer before the call returns. The source is read
         * without holding the lock (it may fault into the application's handler). */
        unlock();
        op->owned = malloc(bytes);
        if (op->owned) memcpy(op->owned, src, bytes);
        lock();
        if (!op->owned) r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
        else r = copy_prologue(stream, &ctx, &s);
        if (!r && !dev_view(ctx->dev, dst, bytes, 3)) r = ADSM__CUDA_ERROR_INVALID_VALUE;
        if (r) {
            free_op(op);
            goto out;
        }
        op->hsrc = op->owned;
        g.counters.h2d_pageable++;
    }
    g.counters.h2d_bytes += bytes;
    r = submit(ctx, s, op, NULL, NULL);
out:
    unlock();
    return note(r);
}

CUresult cuMemcpyDtoHAsync(void *dst, adsm__cu_deviceptr src, size_t bytes, adsm__cu_stream stream) {
    lock();
    struct adsm__cu_ctx_st *ctx = NULL;
    struct adsm__cu_stream_st *s = NULL;
    CUresult r = copy_prologue(stream, &ctx, &s);
    if (r || bytes == 0) goto out;
    if (!dst || !range_ok((uintptr_t)dst, bytes) || !dev_view(ctx->dev, src, bytes, 1) || host_in_resv(dst, bytes)) {
        r = ADSM__CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    struct op *op = new_op(OP_D2H);
    if (!op) {
        r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    op->src = src;
    op->n = bytes;
    g.counters.d2h_bytes += bytes;
    count_host_bytes(host_pinned(dst, bytes, ctx), bytes);
    if (host_pinned(dst, bytes, ctx)) {
        op->hdst = dst;
        g.counters.d2h_async++;
        r = submit(ctx, s, op, NULL, NULL);
        goto out;
    }
    /* pageable: the device writes a private staging buffer; the caller waits for the copy to
     * finish in stream order and then copies it out itself (outside the lock). */
    g.counters.d2h_pageable++;
    void *stage = malloc(bytes);
    if (!stage) {
        free_op(op);
        r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    op->hdst = stage;
    unsigned long long serial, seq;
    r = submit(ctx, s, op, &serial, &seq);
    if (!r) {
        while (!seq_done(serial, seq)) wait_cv();
        r = ctx->sticky;
    }
    unlock();
    if (!r) memcpy(dst, stage, bytes);
    free(stage);
    return note(r);
out:
    unlock();
    return note(r);
}

/* Queues a copy between device ranges: dst must be writable by device dst_dev, src readable by
 * src_dev (under mu). */
static CUresult queue_device_copy(struct adsm__cu_ctx_st *ctx, struct adsm__cu_stream_st *s, enum op_kind kind,
                                  dptr_t dst, int dst_dev, dptr_t src, int src_dev, size_t bytes) {
    if (!dev_view(dst_dev, dst, bytes, 3) || !dev_view(src_dev, src, bytes, 1)) return ADSM__CUDA_ERROR_INVALID_VALUE;
    struct op *op = new_op(kind);
    if (!op) return ADSM__CUDA_ERROR_OUT_OF_MEMORY;
    op->dst = dst;
    op->src = src;
    op->n = bytes;
    op->dst_dev = dst_dev;
    op->src_dev = src_dev;
    return submit(ctx, s, op, NULL, NULL);
}

/* Both sides in the memory the current context's device may access, not overlapping (the driver
 * documents no order for overlapping copies: refused here, so adsm never relies on one). */
CUresult cuMemcpyDtoDAsync(adsm__cu_deviceptr dst, adsm__cu_deviceptr src, size_t bytes, adsm__cu_stream stream) {
    lock();
    struct adsm__cu_ctx_st *ctx = NULL;
    struct adsm__cu_stream_st *s = NULL;
    CUresult r = copy_prologue(stream, &ctx, &s);
    if (!r && src < dst + bytes && dst < src + bytes) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r && bytes > 0) {
        r = queue_device_copy(ctx, s, OP_D2D, dst, ctx->dev, src, ctx->dev, bytes);
        if (!r) g.counters.d2d_bytes += bytes;
    }
    unlock();
    return note(r);
}

static bool ctx_known(adsm__cu_context c) {
    for (int i = 0; i < g.ndev; i++)
        if (c == &g.ctxs[i]) return c->refs > 0;
    return false;
}

/* Between two contexts' memory, on a stream of the current context. Each side needs only its own
 * device's access; the copy is direct when the destination device may read the source, else the
 * driver stages it through the host (counted apart). */
CUresult cuMemcpyPeerAsync(adsm__cu_deviceptr dst, adsm__cu_context dst_ctx, adsm__cu_deviceptr src,
                           adsm__cu_context src_ctx, size_t bytes, adsm__cu_stream stream) {
    lock();
    struct adsm__cu_ctx_st *ctx = NULL;
    struct adsm__cu_stream_st *s = NULL;
    CUresult r = copy_prologue(stream, &ctx, &s);
    if (!r && (!ctx_known(dst_ctx) || !ctx_known(src_ctx))) r = ADSM__CUDA_ERROR_INVALID_CONTEXT;
    bool direct = !r && (dst_ctx->dev == src_ctx->dev || dev_view(dst_ctx->dev, src, bytes, 1));
    if (!r && bytes > 0) {
        r = queue_device_copy(ctx, s, OP_PEER, dst, dst_ctx->dev, src, src_ctx->dev, bytes);
        if (!r) g.counters.peer_bytes += bytes;
        if (!r && direct) g.counters.peer_direct_bytes += bytes;
    }
    unlock();
    return note(r);
}

CUresult cuMemsetD8Async(adsm__cu_deviceptr dst, unsigned char value, size_t bytes, adsm__cu_stream stream) {
    lock();
    struct adsm__cu_ctx_st *ctx = NULL;
    struct adsm__cu_stream_st *s = NULL;
    CUresult r = copy_prologue(stream, &ctx, &s);
    if (r || bytes == 0) goto out;
    if (!dev_view(ctx->dev, dst, bytes, 3)) {
        r = ADSM__CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    struct op *op = new_op(OP_MEMSET);
    if (!op) {
        r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    op->dst = dst;
    op->value = value;
    op->n = bytes;
    if (!s && g.lose_null_memsets) op->n = 0; /* accepted, but the memory does not change */
    g.counters.memset_bytes += bytes;
    r = submit(ctx, s, op, NULL, NULL);
out:
    unlock();
    return note(r);
}

/* ---------------------------------------------------------------- virtual memory management */

static bool prop_ok(const adsm__cu_mem_alloc_prop *prop) {
    return prop && prop->type == ADSM__CU_MEM_ALLOCATION_TYPE_PINNED &&
           prop->location.type == ADSM__CU_MEM_LOCATION_TYPE_DEVICE && prop->location.id >= 0 &&
           prop->location.id < g.ndev && prop->requested_handle_types == ADSM__CU_MEM_HANDLE_TYPE_NONE;
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const adsm__cu_mem_alloc_prop *prop,
                                       adsm__cu_granularity_flags option) {
    lock();
    CUresult r = check_init();
    if (!r && (!granularity || !prop_ok(prop) ||
               (option != ADSM__CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != ADSM__CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)))
        r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r) *granularity = GRAN;
    unlock();
    return note(r);
}

CUresult cuMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    lock();
    struct adsm__cu_ctx_st *ctx = NULL;
    CUresult r = check_ctx(&ctx);
    if (!r && (!free_bytes || !total_bytes)) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        *free_bytes = g.gran_free[ctx->dev] * GRAN;
        *total_bytes = g.ngran * GRAN;
    }
    unlock();
    return note(r);
}

static void *map_placeholder(void *at, size_t size, int extra) {
    return mmap(at, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | extra, -1, 0);
}

CUresult cuMemAddressReserve(adsm__cu_deviceptr *ptr, size_t size, size_t alignment, adsm__cu_deviceptr addr,
                             unsigned long long flags) {
    bool reserved = false;
    lock();
    CUresult r = check_ctx(NULL);
    if (!r && (!ptr || size == 0 || size % GRAN || flags != 0 || (alignment & (alignment - 1))))
        r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (r) goto out;
    size_t align = alignment > GRAN ? alignment : GRAN;
    struct resv *v = calloc(1, sizeof *v);
    size_t ng = size / GRAN;
    if (v) {
        v->gm = calloc(ng, sizeof *v->gm);
        v->gr = calloc(ng, sizeof *v->gr);
        v->gw = calloc(ng, sizeof *v->gw);
    }
    if (!v || !v->gm || !v->gr || !v->gw) goto oom;
    void *base = MAP_FAILED;
    bool placeholder = true;
    bool free_here = true;
    for (struct resv *o = g.resv; o; o = o->next)
        if (addr < o->base + o->size && o->base < addr + size) free_here = false;
    if (g.no_placeholder && addr && addr % align == 0 && range_ok(addr, size) && free_here) {
        /* a driver that keeps device addresses out of the host's address space: any hint that
         * misses its own reservations is granted, host mappings there or not */
        base = (void *)(uintptr_t)addr;
        placeholder = false;
    } else if (addr && addr % align == 0 && range_ok(addr, size)) {
        base = map_placeholder((void *)(uintptr_t)addr, size, MAP_FIXED_NOREPLACE);
        /* kernels before 4.17 ignore the flag and treat it as a hint */
        if (base != MAP_FAILED && (uintptr_t)base != addr) {
            munmap(base, size);
            base = MAP_FAILED;
        }
    }
    if (base == MAP_FAILED) {
        if (size + align < size) goto oom;
        char *big = map_placeholder(NULL, size + align, 0);
        if (big == MAP_FAILED) goto oom;
        uintptr_t b = ((uintptr_t)big + align - 1) / align * align;
        if (b > (uintptr_t)big) munmap(big, b - (uintptr_t)big);
        uintptr_t end = (uintptr_t)big + size + align;
        if (end > b + size) munmap((void *)(b + size), end - (b + size));
        base = (void *)b;
    }
    v->shadow = map_placeholder(NULL, size, 0);
    if (v->shadow == MAP_FAILED) {
        if (placeholder) munmap(base, size);
        goto oom;
    }
    v->placeholder = placeholder;
    v->base = (uintptr_t)base;
    v->size = size;
    v->next = g.resv;
    g.resv = v;
    g.counters.reservations++;
    *ptr = v->base;
    reserved = true;
    goto out;
oom:
    if (v) {
        free(v->gm);
        free(v->gr);
        free(v->gw);
        free(v);
    }
    r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
out:
    unlock();
    if (reserved && g.address_hook) g.address_hook(1, *ptr, size, g.address_hook_user);
    return note(r);
}

CUresult cuMemAddressFree(adsm__cu_deviceptr ptr, size_t size) {
    bool freed = false;
    pthread_rwlock_wrlock(&g.maplock);
    lock();
    CUresult r = check_init();
    if (!r && (!tl_ctx || tl_ctx->refs == 0)) r = ADSM__CUDA_ERROR_INVALID_CONTEXT;
    if (r) goto out;
    struct resv **pp = &g.resv;
    while (*pp && ((*pp)->base != ptr || (*pp)->size != size)) pp = &(*pp)->next;
    if (!*pp || (*pp)->maps) {
        r = ADSM__CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    struct resv *v = *pp;
    *pp = v->next;
    if (v->placeholder) munmap((void *)(uintptr_t)v->base, v->size);
    munmap(v->shadow, v->size);
    free(v->gm);
    free(v->gr);
    free(v->gw);
    free(v);
    g.counters.reservations--;
    r = tl_ctx->sticky;
    freed = true;
out:
    unlock();
    pthread_rwlock_unlock(&g.maplock);
    /* the range is free address space now: the hook may map there, as another thread could */
    if (freed && g.address_hook) g.address_hook(0, ptr, size, g.address_hook_user);
    return note(r);
}

static void phys_free(struct phys *h) {
    struct phys **pp = &g.phys;
    while (*pp != h) pp = &(*pp)->next;
    *pp = h->next;
    for (size_t i = 0; i < h->ngran; i++) {
        g.gran_used[h->gran[i]] = 0;
        g.gran_free[h->dev]++;
        fallocate(g.memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(h->gran[i] * GRAN), (off_t)GRAN);
    }
    free(h->gran);
    free(h);
}

static struct phys *phys_lookup(adsm__cu_mem_handle id) {
    for (struct phys *h = g.phys; h; h = h->next)
        if (h->id == id && !h->released) return h;
    return NULL;
}

CUresult cuMemCreate(adsm__cu_mem_handle *handle, size_t size, const adsm__cu_mem_alloc_prop *prop,
                     unsigned long long flags) {
    lock();
    CUresult r = check_ctx(NULL);
    if (!r && (!handle || size == 0 || size % GRAN || !prop_ok(prop) || flags != 0)) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r && size / GRAN > g.gran_free[prop->location.id]) r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
    if (r) goto out;
    int dev = prop->location.id;
    struct phys *h = calloc(1, sizeof *h);
    size_t ng = size / GRAN;
    if (h) h->gran = malloc(ng * sizeof *h->gran);
    if (!h || !h->gran) {
        if (h) free(h);
        r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    size_t k = 0;
    h->dev = dev;
    for (size_t i = (size_t)dev * g.ngran; i < (size_t)(dev + 1) * g.ngran && k < ng; i++)
        if (!g.gran_used[i]) {
            /* fresh device memory holds garbage, not zeros */
            void *p = mmap(NULL, GRAN, PROT_READ | PROT_WRITE, MAP_SHARED, g.memfd, (off_t)(i * GRAN));
            if (p == MAP_FAILED) break;
            memset(p, 0xA5, GRAN);
            munmap(p, GRAN);
            g.gran_used[i] = 1;
            h->gran[k++] = i;
        }
    g.gran_free[dev] -= k;
    h->ngran = k;
    if (k < ng) {
        h->next = g.phys;
        g.phys = h;
        phys_free(h);
        r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    h->size = size;
    h->id = g.next_handle++;
    g.counters.mem_creates++;
    h->next = g.phys;
    g.phys = h;
    *handle = h->id;
out:
    unlock();
    return note(r);
}

CUresult cuMemRelease(adsm__cu_mem_handle handle) {
    lock();
    CUresult r = check_ctx(NULL);
    struct phys *h = NULL;
    if (!r && !(h = phys_lookup(handle))) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        if (h->maps == 0) phys_free(h);
        else h->released = true; /* freed with its last mapping */
    }
    unlock();
    return note(r);
}

CUresult cuMemMap(adsm__cu_deviceptr ptr, size_t size, size_t offset, adsm__cu_mem_handle handle,
                  unsigned long long flags) {
    lock();
    CUresult r = check_ctx(NULL);
    struct phys *h = NULL;
    struct resv *v = NULL;
    if (!r && (offset != 0 || flags != 0 || size == 0 || ptr % GRAN || size % GRAN || !(v = resv_containing(ptr, size)) ||
               !(h = phys_lookup(handle)) || size > h->size))
        r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (r) goto out;
    size_t first = (ptr - v->base) / GRAN, ng = size / GRAN;
    for (size_t i = 0; i < ng; i++)
        if (v->gm[first + i]) {
            r = ADSM__CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
    struct mapping *m = calloc(1, sizeof *m);
    if (!m) {
        r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    for (size_t i = 0; i < ng; i++) {
        void *at = v->shadow + (first + i) * GRAN;
        if (mmap(at, GRAN, PROT_NONE, MAP_SHARED | MAP_FIXED, g.memfd, (off_t)(h->gran[i] * GRAN)) == MAP_FAILED) {
            for (size_t j = 0; j < i; j++) map_placeholder(v->shadow + (first + j) * GRAN, GRAN, MAP_FIXED);
            free(m);
            r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
    }
    m->d = ptr;
    m->size = size;
    m->h = h;
    m->next = v->maps;
    v->maps = m;
    for (size_t i = 0; i < ng; i++) {
        v->gm[first + i] = m;
        v->gr[first + i] = v->gw[first + i] = 0;
    }
    h->maps++;
    g.counters.device_bytes_mapped += size;
    g.counters.mem_maps++;
out:
    unlock();
    return note(r);
}

CUresult cuMemUnmap(adsm__cu_deviceptr ptr, size_t size) {
    if (g.unmap_us) usleep(g.unmap_us); /* outside the double's locks, as the GPU is */
    pthread_rwlock_wrlock(&g.maplock);
    lock();
    CUresult r = check_init();
    if (!r && (!tl_ctx || tl_ctx->refs == 0)) r = ADSM__CUDA_ERROR_INVALID_CONTEXT;
    struct resv *v = NULL;
    if (!r && (size == 0 || ptr % GRAN || size % GRAN || !(v = resv_containing(ptr, size)))) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (r) goto out;
    size_t first = (ptr - v->base) / GRAN, ng = size / GRAN;
    for (size_t i = 0; i < ng; i++) {
        struct mapping *m = v->gm[first + i];
        if (!m || m->d < ptr || m->d + m->size > ptr + size) {
            r = ADSM__CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
    }
    for (struct mapping **pp = &v->maps; *pp;) {
        struct mapping *m = *pp;
        if (m->d >= ptr && m->d + m->size <= ptr + size) {
            *pp = m->next;
            map_placeholder(v->shadow + (m->d - v->base), m->size, MAP_FIXED);
            size_t f = (m->d - v->base) / GRAN;
            for (size_t i = 0; i < m->size / GRAN; i++) {
                v->gm[f + i] = NULL;
                v->gr[f + i] = v->gw[f + i] = 0;
            }
            g.counters.device_bytes_mapped -= m->size;
            if (--m->h->maps == 0 && m->h->released) phys_free(m->h);
            free(m);
        } else {
            pp = &m->next;
        }
    }
    r = tl_ctx->sticky;
out:
    unlock();
    pthread_rwlock_unlock(&g.maplock);
    return note(r);
}

/* Whether setting `desc` on granule i only adds access (nothing a running operation may be using
 * goes away). Under mu. */
static bool access_only_grows(const struct resv *v, size_t i, const adsm__cu_mem_access_desc *desc, size_t count) {
    for (size_t k = 0; k < count; k++) {
        unsigned long long bit = 1ull << desc[k].location.id;
        if (((v->gr[i] & bit) && !(desc[k].flags & 1)) || ((v->gw[i] & bit) && !(desc[k].flags & 2))) return false;
    }
    return true;
}

/* Sets the access of each listed device to every granule of [ptr, ptr + size) (others keep
 * theirs); a device other than a granule's owner only where cuDeviceCanAccessPeer allows. The
 * double's own view of a granule is writable while any device may touch it. A call that only
 * grants access does not wait for queued operations elsewhere (they cannot be using what it
 * adds), as a GPU's does not wait for kernels on other memory; one that takes access away does. */
CUresult cuMemSetAccess(adsm__cu_deviceptr ptr, size_t size, const adsm__cu_mem_access_desc *desc, size_t count) {
    bool exclusive = false;
again:
    if (exclusive) pthread_rwlock_wrlock(&g.maplock);
    else pthread_rwlock_rdlock(&g.maplock);
    lock();
    CUresult r = check_ctx(NULL);
    struct resv *v = NULL;
    if (!r && (!desc || count == 0 || size == 0 || ptr % GRAN || size % GRAN || !(v = resv_containing(ptr, size))))
        r = ADSM__CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; !r && i < count; i++)
        if (desc[i].location.type != ADSM__CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 ||
            desc[i].location.id >= g.ndev || (desc[i].flags != 0 && desc[i].flags != 1 && desc[i].flags != 3))
            r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (r) goto out;
    size_t first = (ptr - v->base) / GRAN, ng = size / GRAN;
    for (size_t i = 0; i < ng; i++) {
        struct mapping *m = v->gm[first + i];
        if (!m) {
            r = ADSM__CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
        for (size_t k = 0; k < count; k++)
            if (desc[k].location.id != m->h->dev && desc[k].flags && !can_access_peer(desc[k].location.id, m->h->dev)) {
                r = ADSM__CUDA_ERROR_INVALID_DEVICE;
                goto out;
            }
        if (!exclusive && !access_only_grows(v, first + i, desc, count)) {
            unlock();
            pthread_rwlock_unlock(&g.maplock);
            exclusive = true;
            goto again;
        }
    }
    for (size_t i = 0; i < ng; i++) {
        unsigned long long *gr = &v->gr[first + i], *gw = &v->gw[first + i];
        for (size_t k = 0; k < count; k++) {
            unsigned long long bit = 1ull << desc[k].location.id;
            *gr = desc[k].flags & 1 ? *gr | bit : *gr & ~bit;
            *gw = desc[k].flags & 2 ? *gw | bit : *gw & ~bit;
        }
        int mprot = v->gw[first + i] ? PROT_READ | PROT_WRITE : v->gr[first + i] ? PROT_READ : PROT_NONE;
        if (mprotect(v->shadow + (first + i) * GRAN, GRAN, mprot) != 0) {
            r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
    }
    g.counters.mem_set_access++;
out:
    unlock();
    pthread_rwlock_unlock(&g.maplock);
    return note(r);
}

/* ---------------------------------------------------------------- modules (PTX parsing) */

struct lexer {
    const char *p;
};

/* Next token into tok (directive/identifier/number, or one punctuation character); false at end. */
static bool lex(struct lexer *lx, char *tok, size_t cap) {
    const char *p = lx->p;
    for (;;) {
        while (*p && isspace((unsigned char)*p)) p++;
        if (p[0] == '/' && p[1] == '/') {
            while (*p && *p != '\n') p++;
        } else if (p[0] == '/' && p[1] == '*') {
            const char *e = strstr(p + 2, "*/");
            p = e ? e + 2 : p + strlen(p);
        } else {
            break;
        }
    }
    if (!*p) {
        lx->p = p;
        return false;
    }
    size_t n = 0;
    if (isalnum((unsigned char)*p) || *p == '_' || *p == '.' || *p == '$' || *p == '%') {
        do {
            if (n + 1 < cap) tok[n++] = *p;
            p++;
        } while (isalnum((unsigned char)*p) || *p == '_' || *p == '$');
    } else {
        tok[n++] = *p++;
    }
    tok[n] = 0;
    lx->p = p;
    return true;
}

static size_t type_size(const char *t) {
    static const struct {
        const char *name;
        size_t size;
    } types[] = {
        {".u8", 1},  {".s8", 1},  {".b8", 1},  {".u16", 2}, {".s16", 2}, {".b16", 2}, {".f16", 2},
        {".u32", 4}, {".s32", 4}, {".b32", 4}, {".f32", 4}, {".u64", 8}, {".s64", 8}, {".b64", 8},
        {".f64", 8},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(types[i].name, t) == 0) return types[i].size;
    return 0;
}

static void func_free(struct adsm__cu_func_st *f) {
    if (!f) return;
    free(f->name);
    free(f->size);
    free(f->offset);
    free(f);
}

static void module_free(struct adsm__cu_mod_st *m) {
    for (size_t i = 0; i < m->nfuncs; i++) func_free(m->funcs[i]);
    free(m->funcs);
    free(m);
}

static bool parse_number(const char *tok, size_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(tok, &end, 0);
    if (errno || *end || !isdigit((unsigned char)tok[0])) return false;
    *out = (size_t)v;
    return true;
}

/* Parses one entry's parameter list, the lexer standing just after its '('. */
static const char *parse_params(struct lexer *lx, struct adsm__cu_func_st *f) {
    char tok[256];
    size_t cap = 0, off = 0, maxalign = 1;
    if (!lex(lx, tok, sizeof tok)) return "unterminated parameter list";
    if (strcmp(tok, ")") == 0) return NULL;
    for (;;) {
        if (strcmp(tok, ".param") != 0) return "expected .param";
        size_t align = 0, elem = 0, count = 1;
        for (;;) {
            if (!lex(lx, tok, sizeof tok)) return "unterminated parameter";
            if (strcmp(tok, ".align") == 0) {
                if (!lex(lx, tok, sizeof tok) || !parse_number(tok, &align) || align == 0 || (align & (align - 1)))
                    return "bad .align";
            } else if (strcmp(tok, ".ptr") == 0 || strcmp(tok, ".global") == 0 || strcmp(tok, ".const") == 0 ||
                       strcmp(tok, ".shared") == 0 || strcmp(tok, ".local") == 0) {
                continue;
            } else if (tok[0] == '.') {
                if (!(elem = type_size(tok))) return "unsupported parameter type";
            } else {
                break; /* the parameter name */
            }
        }
        if (!elem) return "parameter without a type";
        if (!lex(lx, tok, sizeof tok)) return "unterminated parameter list";
        if (strcmp(tok, "[") == 0) {
            if (!lex(lx, tok, sizeof tok) || !parse_number(tok, &count) || count == 0) return "bad array size";
            if (!lex(lx, tok, sizeof tok) || strcmp(tok, "]") != 0) return "expected ]";
            if (!lex(lx, tok, sizeof tok)) return "unterminated parameter list";
        }
        if (!align) align = elem;
        size_t size = elem * count;
        off = (off + align - 1) / align * align;
        if (f->nparams == cap) {
            cap = cap ? 2 * cap : 8;
            size_t *s = realloc(f->size, cap * sizeof *s);
            if (!s) return "out of memory";
            f->size = s;
            size_t *o = realloc(f->offset, cap * sizeof *o);
            if (!o) return "out of memory";
            f->offset = o;
        }
        f->size[f->nparams] = size;
        f->offset[f->nparams] = off;
        f->nparams++;
        off += size;
        if (align > maxalign) maxalign = align;
        if (strcmp(tok, ")") == 0) break;
        if (strcmp(tok, ",") != 0) return "expected , or )";
        if (!lex(lx, tok, sizeof tok)) return "unterminated parameter list";
    }
    f->block_end = off;
    f->block_rounded = (off + maxalign - 1) / maxalign * maxalign;
    return NULL;
}

/* PTX for an architecture newer than the device's (.target sm_XY, XY above its capability) is
 * refused, as the JIT refuses it. */
static const char *check_ptx_target(const char *text, int compute) {
    const char *t = strstr(text, ".target");
    const char *sm = t ? strstr(t, "sm_") : NULL;
    const char *eol = strchr(t, '\n');
    if (!sm || (eol && eol < sm)) return NULL; /* a target the double cannot read: not checked */
    int target = atoi(sm + 3);
    return target > compute ? "PTX .target is newer than the device's compute capability" : NULL;
}

static const char *parse_ptx(const char *text, struct adsm__cu_mod_st *m) {
    if (!strstr(text, ".version") || !strstr(text, ".target")) return "not PTX: no .version or .target directive";
    struct lexer lx = {text};
    char tok[256];
    size_t cap = 0;
    while (lex(&lx, tok, sizeof tok)) {
        if (strcmp(tok, ".entry") != 0) continue;
        if (!lex(&lx, tok, sizeof tok) || !(isalpha((unsigned char)tok[0]) || tok[0] == '_' || tok[0] == '$'))
            return "bad .entry name";
        struct adsm__cu_func_st *f = calloc(1, sizeof *f);
        if (!f || !(f->name = strdup(tok))) {
            free(f);
            return "out of memory";
        }
        f->module = NULL;
        if (m->nfuncs == cap) {
            cap = cap ? 2 * cap : 8;
            struct adsm__cu_func_st **n = realloc(m->funcs, cap * sizeof *n);
            if (!n) {
                func_free(f);
                return "out of memory";
            }
            m->funcs = n;
        }
        m->funcs[m->nfuncs++] = f;
        if (!lex(&lx, tok, sizeof tok) || strcmp(tok, "(") != 0) return "expected ( after .entry name";
        const char *err = parse_params(&lx, f);
        if (err) return err;
    }
    return NULL;
}

CUresult cuModuleLoadDataEx(adsm__cu_module *module, const void *image, unsigned int noptions,
                            adsm__cu_jit_option *options, void **values) {
    lock();
    struct adsm__cu_ctx_st *ctx = NULL;
    CUresult r = check_ctx(&ctx);
    if (!r && (!module || !image || (noptions && (!options || !values)))) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    int compute = ctx ? g.compute[ctx->dev] : 90;
    if (r) {
        unlock();
        return note(r);
    }
    unlock();
    char *log = NULL;
    size_t logsize = 0;
    int logsize_index = -1;
    for (unsigned i = 0; i < noptions; i++) {
        if (options[i] == ADSM__CU_JIT_ERROR_LOG_BUFFER) log = values[i];
        else if (options[i] == ADSM__CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
            logsize = (size_t)(uintptr_t)values[i];
            logsize_index = (int)i;
        }
    }
    struct adsm__cu_mod_st *m = calloc(1, sizeof *m);
    if (!m) return note(ADSM__CUDA_ERROR_OUT_OF_MEMORY);
    const char *err = parse_ptx(image, m);
    if (!err) err = check_ptx_target(image, compute);
    if (err) {
        r = strstr(err, "not PTX") ? ADSM__CUDA_ERROR_INVALID_IMAGE : ADSM__CUDA_ERROR_INVALID_PTX;
        if (strcmp(err, "out of memory") == 0) r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
        if (log && logsize) {
            int n = snprintf(log, logsize, "cudadouble: %s", err);
            if (logsize_index >= 0) {
                size_t used = n < 0 ? 0 : (size_t)n + 1 < logsize ? (size_t)n + 1 : logsize;
                values[logsize_index] = (void *)(uintptr_t)used;
            }
        }
        module_free(m);
        return note(r);
    }
    if (log && logsize) {
        log[0] = 0;
        if (logsize_index >= 0) values[logsize_index] = (void *)(uintptr_t)0;
    }
    lock();
    r = check_ctx(NULL);
    bool ok = !r && reg_add(m, H_MODULE);
    for (size_t i = 0; ok && i < m->nfuncs; i++) {
        m->funcs[i]->module = m;
        if (!reg_add(m->funcs[i], H_FUNC)) ok = false;
    }
    if (!ok) {
        reg_del(m);
        for (size_t i = 0; i < m->nfuncs; i++) reg_del(m->funcs[i]);
        module_free(m);
        if (!r) r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        *module = m;
        g.counters.module_loads++;
    }
    unlock();
    return note(r);
}

CUresult cuModuleUnload(adsm__cu_module module) {
    lock();
    CUresult r = check_init();
    if (!r && (!tl_ctx || tl_ctx->refs == 0)) r = ADSM__CUDA_ERROR_INVALID_CONTEXT;
    if (!r && !reg_has(module, H_MODULE)) r = ADSM__CUDA_ERROR_INVALID_HANDLE;
    if (!r) {
        reg_del(module);
        for (size_t i = 0; i < module->nfuncs; i++) reg_del(module->funcs[i]);
        module_free(module);
        r = tl_ctx->sticky;
    }
    unlock();
    return note(r);
}

CUresult cuModuleGetFunction(adsm__cu_function *function, adsm__cu_module module, const char *name) {
    lock();
    CUresult r = check_ctx(NULL);
    if (!r && (!function || !name)) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r && !reg_has(module, H_MODULE)) r = ADSM__CUDA_ERROR_INVALID_HANDLE;
    if (!r) {
        g.counters.function_lookups++;
        r = ADSM__CUDA_ERROR_NOT_FOUND;
        for (size_t i = 0; i < module->nfuncs; i++)
            if (strcmp(module->funcs[i]->name, name) == 0) {
                *function = module->funcs[i];
                r = ADSM__CUDA_SUCCESS;
                break;
            }
    }
    unlock();
    return note(r);
}

CUresult cuFuncGetParamInfo(adsm__cu_function f, size_t index, size_t *offset, size_t *size) {
    lock();
    CUresult r = check_init();
    if (!r && !reg_has(f, H_FUNC)) r = ADSM__CUDA_ERROR_INVALID_HANDLE;
    if (!r && g.param_info_error) r = g.param_info_error;
    if (!r && (!offset || index >= f->nparams)) r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        *offset = f->offset[index];
        if (size) *size = f->size[index];
    }
    unlock();
    return note(r);
}

/* ---------------------------------------------------------------- launches */

CUresult cuLaunchKernel(adsm__cu_function f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                        unsigned int block_x, unsigned int block_y, unsigned int block_z, unsigned int shared_bytes,
                        adsm__cu_stream stream, void **params, void **extra) {
    lock();
    struct adsm__cu_ctx_st *ctx = NULL;
    struct adsm__cu_stream_st *s = NULL;
    struct launch_rec *l = NULL;
    CUresult r = check_ctx(&ctx);
    if (!r && !reg_has(f, H_FUNC)) r = ADSM__CUDA_ERROR_INVALID_HANDLE;
    if (!r) r = check_stream(stream, ctx, &s);
    if (r) goto out;
    r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (!grid_x || !grid_y || !grid_z || !block_x || !block_y || !block_z) goto out;
    if (grid_x > 2147483647u || grid_y > 65535 || grid_z > 65535) goto out;
    if (block_x > 1024 || block_y > 1024 || block_z > 64 ||
        (unsigned long long)block_x * block_y * block_z > 1024)
        goto out;
    r = ADSM__CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    if ((unsigned long long)block_x * block_y * block_z > g.kernel_max_threads) goto out;
    r = ADSM__CUDA_ERROR_INVALID_VALUE;
    if (shared_bytes > MAX_SHMEM) goto out;
    if (params && extra) goto out;
    const unsigned char *buffer = NULL;
    if (extra) {
        const void *bufp = NULL;
        const size_t *sizep = NULL;
        size_t i = 0;
        for (; i < 64 && extra[i] != (void *)0; i += 2) {
            if (extra[i] == (void *)1) bufp = extra[i + 1];
            else if (extra[i] == (void *)2) sizep = extra[i + 1];
            else goto out;
        }
        if (i >= 64 || !sizep || (f->nparams && !bufp)) goto out;
        if (*sizep != f->block_end && *sizep != f->block_rounded) goto out;
        buffer = bufp;
    } else if (f->nparams) {
        if (!params) goto out;
        for (size_t i = 0; i < f->nparams; i++)
            if (!params[i]) goto out;
    }
    r = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
    l = calloc(1, sizeof *l);
    if (!l) goto out;
    l->name = strdup(f->name);
    l->nparams = f->nparams;
    l->size = malloc((f->nparams ? f->nparams : 1) * sizeof *l->size);
    l->param = malloc((f->nparams ? f->nparams : 1) * sizeof *l->param);
    l->buf = malloc(f->block_rounded ? f->block_rounded : 1);
    if (!l->name || !l->size || !l->param || !l->buf) goto out;
    for (size_t i = 0; i < f->nparams; i++) {
        l->size[i] = f->size[i];
        l->param[i] = l->buf + f->offset[i];
        memcpy(l->param[i], buffer ? buffer + f->offset[i] : (const unsigned char *)params[i], f->size[i]);
    }
    l->grid[0] = grid_x;
    l->grid[1] = grid_y;
    l->grid[2] = grid_z;
    l->block[0] = block_x;
    l->block[1] = block_y;
    l->block[2] = block_z;
    struct op *op = new_op(OP_LAUNCH);
    if (!op) goto out;
    op->launch = l;
    l = NULL;
    g.counters.launches++;
    g.counters.last_launch_thread = (unsigned long long)syscall(SYS_gettid);
    r = submit(ctx, s, op, NULL, NULL);
out:
    if (l) {
        free(l->name);
        free(l->size);
        free(l->param);
        free(l->buf);
        free(l);
    }
    unlock();
    return note(r);
}

/* ---------------------------------------------------------------- test-only API */

EXPORT int cudadouble_register_kernel(const char *name, cudadouble_kernel_fn fn, void *user) {
    if (!name || !fn) return -1;
    lock();
    struct kernel_reg *k = g.kernels;
    while (k && strcmp(k->name, name) != 0) k = k->next;
    if (!k) {
        k = calloc(1, sizeof *k);
        if (!k || !(k->name = strdup(name))) {
            free(k);
            unlock();
            return -1;
        }
        k->next = g.kernels;
        g.kernels = k;
    }
    k->fn = fn;
    k->user = user;
    unlock();
    return 0;
}

EXPORT void *cudadouble_host_view(unsigned long long dptr, size_t n) {
    lock();
    /* a kernel sees what its device may access; a test's own look, what any device may */
    void *p = g.initialized ? dev_view(tl_exec_ctx ? tl_exec_ctx->dev : -1, dptr, n, 3) : NULL;
    unlock();
    return p;
}

EXPORT void cudadouble_kernel_fault(int code) {
    lock();
    if (tl_exec_ctx) set_sticky(tl_exec_ctx, code);
    unlock();
}

EXPORT void cudadouble_set_address_hook(void (*fn)(int reserved, unsigned long long base, size_t size, void *user),
                                        void *user) {
    lock();
    g.address_hook = fn;
    g.address_hook_user = user;
    unlock();
}

EXPORT void cudadouble_release_registers(void) { __atomic_store_n(&g.registers_released, 1, __ATOMIC_RELEASE); }

EXPORT void cudadouble_get_counters(cudadouble_counters *out) {
    if (!out) return;
    lock();
    *out = g.counters;
    out->rejected = __atomic_load_n(&g.counters.rejected, __ATOMIC_RELAXED);
    out->registers_in_flight = __atomic_load_n(&g.counters.registers_in_flight, __ATOMIC_RELAXED);
    unlock();
}
