/* adsm_impl/backend_emu.h -- a discrete accelerator emulated by a child process.
 *
 * Device memory is one sparse memfd. The device process (forked at initialisation) maps it over
 * the shared half of the address reservation, so every object lives at the same address on both
 * sides; the parent reaches it only through a second mapping, the DMA window. Host and device
 * memory are really separate: a missing copy is a wrong answer, as on a GPU.
 *
 * Contexts: to_device/from_device/drain/wait are called from the SIGSEGV handler, so they use
 * only memcpy, atomics and futexes. The DMA thread is the worker of a copy_queue.h queue: it
 * runs asynchronous copies, and launches behind the copies queued before them (a stream's
 * order), in queue order. It and the completion thread (launch results, read from the device
 * process's socket) never take the runtime lock. Everything else runs in normal thread context
 * under the runtime lock. The device process runs kernels on a worker pool; each chunk runs under
 * sigsetjmp so a crashing kernel, or one that writes memory it may only read (device memory is
 * read-only outside the kernel's OUT/INOUT objects), fails its launch instead of the program. */
#ifndef ADSM__BACKEND_EMU_INCLUDED
#define ADSM__BACKEND_EMU_INCLUDED

#include "common.h"
#include "os.h"
#include "blocktree.h"
#include "config.h"
#include "copy.h"
#include "copy_queue.h"
#include "trace.h"
#include "runtime.h"
#include "device_error.h"
#include "backend.h"
#include "kernel.h"

#include <setjmp.h>
#include <stdio_ext.h>

#include "emu_streams.h"

#define ADSM__DMA_RING 1024 /* queued DMA jobs */
#define ADSM__EMU_MAX_ARGS 4096

enum { ADSM__EMU_ALLOC = 1, ADSM__EMU_FREE, ADSM__EMU_LAUNCH, ADSM__EMU_QUIT, ADSM__EMU_DONE, ADSM__EMU_READY };

typedef struct adsm__emu_msg {
    uint32_t type;
    int32_t status;
    uint64_t seq;
    uintptr_t addr;
    size_t len;
    const adsm_kernel_desc *kernel; /* valid in the device process: same binary, forked */
    adsm_grid grid;
    uint32_t nwritable, ninputs;
    uint64_t ran_from, ran_to; /* DONE: when the kernel ran in the device process (CLOCK_MONOTONIC is
                                  one clock for both processes), for ADSM_TRACE */
    adsm__range writable[ADSM__MAX_PARAMS];
    adsm__range inputs[ADSM__MAX_PARAMS];
    char text[256];
    ADSM__ALIGNAS(16) unsigned char args[ADSM__EMU_MAX_ARGS];
} adsm__emu_msg;

/* One job of the DMA thread, in queue order: a host->device copy, or a launch to send to the
 * device process once the copies queued before it landed (as a GPU stream orders them). */
typedef struct adsm__dma_job {
    uintptr_t dev, host;
    size_t len;
    uint64_t after_seq; /* launches that may still read the old bytes: the copy waits for them */
    struct adsm__emu_msg *launch; /* a launch message (malloc'd, the DMA thread frees it), or NULL */
} adsm__dma_job;

typedef struct adsm__emu {
    adsm__runtime *rt;
    uintptr_t base;
    size_t half, capacity;
    adsm__own_fd devfd;    /* the memfd of device memory (os.h: never the program's file) */
    unsigned char *window; /* parent's view of device memory: window[addr - base] */
    uint64_t *backed;      /* one bit per 2 MiB granule of device memory the DMA side backed */
    adsm__own_fd sock;     /* the parent's end of the socket to the device process */
    pid_t child;
    unsigned workers;
    pthread_t completion_thread;
    int completion_started;
    struct adsm__emu_msg *completion_msg; /* the completion thread's receive buffer */
    adsm__queue queue; /* DMA jobs, run by the DMA thread (copy_queue.h); not started: copies are
                          synchronous and launches go straight to the device process */

    /* launch completion, published by the completion thread; issued_seq: the last launch sent to
     * this device (launch numbers are the runtime's, shared by every device) */
    uint64_t completed_seq, issued_seq;
    int completion_gen, lost, quitting;
    adsm__device_error errors; /* the first launch error since the last adsm_sync */

    /* device process only */
    adsm__tree device_objects; /* allocated device ranges, to tell a forbidden write from a crash;
                                  under objects_mutex (kernels of several streams may crash) */
    pthread_mutex_t objects_mutex;
    adsm__emu_sched sched;     /* kernels in flight, on streams (emu_streams.h) */
    unsigned streams;
    adsm__emu_msg msg;         /* the main thread's receive buffer */
} adsm__emu;

/* ---- device process ---------------------------------------------------------------------- */
static __thread sigjmp_buf *adsm__tls_kernel_jmp;
static __thread int adsm__tls_kernel_signal, adsm__tls_kernel_write;
static __thread uintptr_t adsm__tls_kernel_addr;

static void adsm__emu_kernel_signal(int sig, siginfo_t *si, void *context) {
    if (!adsm__tls_kernel_jmp) { /* not inside a kernel: a bug in the device process itself */
        adsm__default_action(sig);
        raise(sig);
        return;
    }
    adsm__tls_kernel_signal = sig;
    adsm__tls_kernel_addr = (uintptr_t)si->si_addr;
    adsm__tls_kernel_write = adsm__fault_is_write(context);
    siglongjmp(*adsm__tls_kernel_jmp, 1);
}

ADSM__PRIVATE int adsm__emu_classify(adsm__emu *e, const adsm__emu_msg *m, char *msg, size_t size) {
    uintptr_t a = adsm__tls_kernel_addr;
    const char *kname = m->kernel->name;
    if (adsm__tls_kernel_signal == SIGSEGV && adsm__tls_kernel_write != 0) {
        for (uint32_t i = 0; i < m->ninputs; i++) {
            if (a >= m->inputs[i].addr && a - m->inputs[i].addr < m->inputs[i].len) {
                snprintf(msg, size, "kernel '%s' wrote its IN parameter '%s' (address %p)", kname,
                         m->inputs[i].param, (void *)a);
                return ADSM_ERROR_KERNEL_WROTE_INPUT;
            }
        }
    }
    pthread_mutex_lock(&e->objects_mutex);
    int shared = adsm__tree_find(&e->device_objects, a) != NULL;
    pthread_mutex_unlock(&e->objects_mutex);
    if (adsm__tls_kernel_signal == SIGSEGV && adsm__tls_kernel_write != 0 && shared) {
        snprintf(msg, size, "kernel '%s' wrote shared memory at %p that is not one of its OUT/INOUT parameters",
                 kname, (void *)a);
        return ADSM_ERROR_KERNEL_WROTE_INPUT;
    }
    snprintf(msg, size, "kernel '%s' crashed: %s at address %p", kname, strsignal(adsm__tls_kernel_signal),
             (void *)a);
    return ADSM_ERROR_KERNEL_CRASHED;
}

ADSM__PRIVATE int adsm__emu_run_chunk(adsm__pool *p, unsigned worker, adsm_grid chunk, char *msg, size_t size) {
    adsm__emu *e = (adsm__emu *)adsm__rt.be_ctx;
    sigjmp_buf jb;
    (void)worker;
    if (sigsetjmp(jb, 1) == 0) {
        adsm__tls_kernel_jmp = &jb;
        p->kernel->entry(chunk, p->args);
        adsm__tls_kernel_jmp = NULL;
        return 0;
    }
    adsm__tls_kernel_jmp = NULL;
    return adsm__emu_classify(e, (const adsm__emu_msg *)adsm__emu_pool_launch(p), msg, size);
}

/* Each worker gets an alternate signal stack, so a kernel that overflows its stack still fails
 * its launch cleanly. Called on the worker thread before its first chunk. */
ADSM__PRIVATE void adsm__emu_ensure_altstack(void) {
    static __thread void *stack;
    if (stack) return;
    stack = malloc(1 << 16);
    if (!stack) return;
    stack_t ss;
    ss.ss_sp = stack;
    ss.ss_size = 1 << 16;
    ss.ss_flags = 0;
    sigaltstack(&ss, NULL);
}

ADSM__PRIVATE int adsm__emu_run_chunk_guarded(adsm__pool *p, unsigned worker, adsm_grid chunk, char *msg,
                                              size_t size) {
    adsm__emu_ensure_altstack();
    return adsm__emu_run_chunk(p, worker, chunk, msg, size);
}

ADSM__PRIVATE void adsm__emu_set_ranges(const adsm__range *r, uint32_t n, int prot) {
    for (uint32_t i = 0; i < n; i++) adsm__protect(r[i].addr, r[i].len, prot);
}

/* What kernel bodies print is flushed when the kernel ends, so it is out before adsm_sync
 * returns (the device process leaves with _exit, which would drop it). */
ADSM__PRIVATE void adsm__emu_flush_kernel_output(void) {
    fflush(stdout);
    fflush(stderr);
}

/* A stream runs one launch's kernel: its OUT/INOUT objects writable meanwhile (kernels that
 * overlap write disjoint objects: emu_streams.h). */
ADSM__PRIVATE void adsm__emu_device_run(void *ctx, adsm__pool *pool, adsm__emu_task *t) {
    (void)ctx;
    adsm__emu_msg *m = (adsm__emu_msg *)t->launch;
    adsm__emu_set_ranges(m->writable, m->nwritable, PROT_READ | PROT_WRITE);
    t->ran_from = adsm__now_ns();
    t->status = adsm__pool_run(pool, m->kernel, m->grid, m->args, t->text, sizeof t->text);
    t->ran_to = adsm__now_ns();
    adsm__emu_set_ranges(m->writable, m->nwritable, PROT_READ);
    adsm__emu_flush_kernel_output();
}

/* A launch is done, and so are every earlier one: DONE to the parent, in the launch's message. */
ADSM__PRIVATE void adsm__emu_device_report(void *ctx, adsm__emu_task *t) {
    adsm__emu *e = (adsm__emu *)ctx;
    adsm__emu_msg *reply = (adsm__emu_msg *)t->launch;
    reply->type = ADSM__EMU_DONE;
    reply->ran_from = t->ran_from;
    reply->ran_to = t->ran_to;
    reply->status = t->status;
    snprintf(reply->text, sizeof reply->text, "%s", t->status ? t->text : "");
    send(e->sock.fd, reply, offsetof(adsm__emu_msg, args), MSG_NOSIGNAL);
}

/* A launch message arrived (n bytes in e->msg): a task of its own, run when it may. */
ADSM__PRIVATE void adsm__emu_device_launch(adsm__emu *e, size_t n) {
    adsm__emu_msg *m = (adsm__emu_msg *)malloc(sizeof *m);
    if (!m) _exit(5); /* the parent sees the device lost */
    memcpy(m, &e->msg, n);
    adsm__emu_submit(&e->sched, m, m->writable, m->nwritable, m->inputs, m->ninputs);
}

ADSM__PRIVATE void adsm__emu_device_alloc(adsm__emu *e, uintptr_t addr, size_t len) {
    adsm__tree_node *n = (adsm__tree_node *)calloc(1, sizeof *n);
    adsm__protect(addr, len, PROT_READ);
    if (!n) return; /* only costs the precise error message of a forbidden write */
    n->start = addr;
    n->end = addr + len;
    pthread_mutex_lock(&e->objects_mutex);
    if (adsm__tree_insert(&e->device_objects, n) != 0) free(n);
    pthread_mutex_unlock(&e->objects_mutex);
}

ADSM__PRIVATE void adsm__emu_device_free(adsm__emu *e, uintptr_t addr, size_t len) {
    pthread_mutex_lock(&e->objects_mutex);
    adsm__tree_node *n = adsm__tree_find(&e->device_objects, addr);
    if (n) adsm__tree_remove(&e->device_objects, n);
    pthread_mutex_unlock(&e->objects_mutex);
    adsm__protect(addr, len, PROT_NONE);
    free(n);
}

/* The device process keeps only its socket and the standard descriptors, and drops what the
 * program had buffered in stdio before the fork (the program prints that itself). */
ADSM__PRIVATE void adsm__emu_device_hygiene(int sock) {
    adsm__close_fds_except(sock);
    __fpurge(stdout);
    __fpurge(stderr);
}

/* The device process: owns device memory at the objects' addresses and serves commands from the
 * parent in order until told to quit or the parent goes away. Never returns. */
ADSM__PRIVATE void adsm__emu_device_main(adsm__emu *e, int sock) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = adsm__emu_kernel_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    int crash_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof crash_signals / sizeof *crash_signals; i++)
        adsm__real_sigaction()(crash_signals[i], &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sa.sa_flags = 0;
    adsm__real_sigaction()(SIGINT, &sa, NULL); /* the parent decides when the device goes away */
    adsm__rt.state = ADSM__RT_OFF; /* this process is the device: interposed calls pass through */
    e->sock.fd = sock; /* its own end: stream threads report on it */
    /* Device memory replaces the host view of the shared half; safe host addresses vanish. */
    if (mmap((void *)e->base, e->half, PROT_NONE, MAP_SHARED | MAP_FIXED, e->devfd.fd, 0) == MAP_FAILED ||
        mmap((void *)(e->base + e->half), e->half, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
             -1, 0) == MAP_FAILED)
        _exit(3);
    munmap(e->window, e->half);
    adsm__emu_device_hygiene(sock);
    adsm__tree_init(&e->device_objects);
    pthread_mutex_init(&e->objects_mutex, NULL);
    e->sched.nstreams = e->streams;
    e->sched.workers = e->workers;
    e->sched.runner = adsm__emu_run_chunk_guarded;
    e->sched.ctx = e;
    e->sched.run = adsm__emu_device_run;
    e->sched.report = adsm__emu_device_report;
    if (adsm__emu_sched_start(&e->sched) != 0) _exit(4);
    adsm__emu_msg *m = &e->msg;
    m->type = ADSM__EMU_READY;
    if (send(sock, m, offsetof(adsm__emu_msg, args), MSG_NOSIGNAL) < 0) _exit(0);
    for (;;) {
        ssize_t n = recv(sock, m, sizeof *m, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) _exit(0);
        switch (m->type) {
        case ADSM__EMU_ALLOC: adsm__emu_device_alloc(e, m->addr, m->len); break;
        case ADSM__EMU_FREE: adsm__emu_device_free(e, m->addr, m->len); break;
        case ADSM__EMU_LAUNCH: adsm__emu_device_launch(e, (size_t)n); break;
        default: _exit(0);
        }
    }
}

ADSM__PRIVATE int adsm__emu_wait(void *ctx, uint64_t seq);

/* ---- parent: backing device memory ---------------------------------------------------------- */
/* Device memory is backed 2 MiB at a time, the first time a copy or a memset writes there: a
 * copy into pages the kernel must still find runs at a tenth of the speed of one into backed
 * pages here, and backing whole objects at allocation made adsm_alloc slow (and held the runtime
 * lock). Kernels write into their OUT objects in the device process and back what they touch
 * themselves. Signal-safe: one atomic bit per granule, then fallocate (a system call); a copy
 * that races with another thread's backing of the same granule just finds some pages itself. */
#define ADSM__EMU_GRANULE ((size_t)2 << 20)

ADSM__PRIVATE void adsm__emu_back(adsm__emu *e, uintptr_t dev, size_t n) {
    if (!e->backed || n == 0) return;
    size_t first = (dev - e->base) / ADSM__EMU_GRANULE, last = (dev - e->base + n - 1) / ADSM__EMU_GRANULE;
    for (size_t g = first; g <= last; g++) {
        uint64_t bit = (uint64_t)1 << (g % 64);
        int fd = adsm__own_fd_get(&e->devfd); /* without it, the copy finds the pages itself */
        if (__atomic_fetch_or(&e->backed[g / 64], bit, __ATOMIC_ACQ_REL) & bit || fd < 0) continue;
        (void)fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)(g * ADSM__EMU_GRANULE), (off_t)ADSM__EMU_GRANULE);
    }
}

/* The granules of a freed range may be backed again (a neighbour in the same granule only
 * costs one more fallocate of pages that are still there). */
ADSM__PRIVATE void adsm__emu_unback(adsm__emu *e, uintptr_t dev, size_t n) {
    if (!e->backed || n == 0) return;
    size_t first = (dev - e->base) / ADSM__EMU_GRANULE, last = (dev - e->base + n - 1) / ADSM__EMU_GRANULE;
    for (size_t g = first; g <= last; g++)
        __atomic_fetch_and(&e->backed[g / 64], ~((uint64_t)1 << (g % 64)), __ATOMIC_ACQ_REL);
}

/* ---- parent: DMA thread ------------------------------------------------------------------- */
ADSM__PRIVATE adsm_result adsm__emu_send(adsm__emu *e, const struct adsm__emu_msg *m, size_t len);
ADSM__PRIVATE void adsm__emu_record_error(adsm__emu *e, adsm_result r, const char *text);

ADSM__PRIVATE void adsm__emu_copy_job(adsm__emu *e, const adsm__dma_job *job) {
    adsm__emu_wait(e, job->after_seq); /* stream order: after the kernels issued before it */
    adsm__emu_back(e, job->dev, job->len);
    uint64_t t0 = adsm__now_ns();
    adsm__copy_out(e->window + (job->dev - e->base), (const void *)job->host, job->len);
    adsm__copy_timed(e->rt, 1, t0, job->dev, job->len);
}

/* A launch that cannot reach the device is reported at the next adsm_sync, as a GPU would. */
ADSM__PRIVATE void adsm__emu_send_launch(adsm__emu *e, adsm__emu_msg *m) {
    if (adsm__emu_send(e, m, offsetof(adsm__emu_msg, args) + m->kernel->args_size) != ADSM_OK)
        adsm__emu_record_error(e, ADSM_ERROR_DEVICE_LOST, "a launch could not reach the emulated device");
    free(m);
}

/* DMA thread: one job in queue order. */
ADSM__PRIVATE int adsm__emu_dma_job_run(void *ctx, void *slot) {
    adsm__emu *e = (adsm__emu *)ctx;
    adsm__dma_job *job = (adsm__dma_job *)slot;
    if (job->launch) adsm__emu_send_launch(e, job->launch);
    else adsm__emu_copy_job(e, job);
    return 0;
}

ADSM__PRIVATE void adsm__emu_dma_begin(void *ctx) {
    adsm__emu *e = (adsm__emu *)ctx;
    adsm__trace_on(&e->rt->trace, 0, ADSM__TR_NAME, adsm__now_ns(), 0, (uintptr_t) "emu copy engine", 0);
}

/* Signal-safe: every queued job ran (copies landed, launches sent). */
ADSM__PRIVATE void adsm__emu_drain(void *ctx) { adsm__queue_drain(&((adsm__emu *)ctx)->queue); }

ADSM__PRIVATE int adsm__emu_to_device(void *ctx, uintptr_t dev, uintptr_t host, size_t n, int async,
                                      uint64_t after) {
    adsm__emu *e = (adsm__emu *)ctx;
    if (dev < e->base || dev - e->base + n > e->half) return -1;
    /* the launches sent to this device so far at most: a later one is queued behind this copy, so
     * the copy must not wait for it */
    uint64_t issued = ADSM__LOAD(&e->issued_seq);
    if (after > issued) after = issued;
    if (!async || !e->queue.started) {
        adsm__emu_drain(ctx); /* keep copies to the same block in order */
        adsm__emu_wait(ctx, after); /* a running kernel may read it */
        adsm__emu_back(e, dev, n);
        uint64_t t0 = adsm__now_ns();
        adsm__copy_out(e->window + (dev - e->base), (const void *)host, n);
        adsm__copy_timed(e->rt, 1, t0, dev, n);
        return 0;
    }
    adsm__dma_job job = {dev, host, n, after, NULL};
    adsm__queue_push(&e->queue, &job, sizeof job, NULL);
    return 0;
}

ADSM__PRIVATE int adsm__emu_from_device(void *ctx, uintptr_t host, uintptr_t dev, size_t n) {
    adsm__emu *e = (adsm__emu *)ctx;
    if (dev < e->base || dev - e->base + n > e->half) return -1;
    const unsigned char *src = e->window + (dev - e->base);
    uint64_t t0 = adsm__now_ns();
    memcpy((void *)host, src, n); /* writable memory: copy.h places protected pages */
    adsm__copy_timed(e->rt, 0, t0, dev, n);
    return 0;
}

ADSM__PRIVATE int adsm__emu_in_window(const adsm__emu *e, uintptr_t dev, size_t n) {
    return dev >= e->base && n <= e->half && dev - e->base <= e->half - n;
}

/* The DMA window: small fetches go through /proc/self/mem straight from it. */
ADSM__PRIVATE const void *adsm__emu_device_view(void *ctx, uintptr_t dev, size_t n) {
    adsm__emu *e = (adsm__emu *)ctx;
    return adsm__emu_in_window(e, dev, n) ? e->window + (dev - e->base) : NULL;
}

ADSM__PRIVATE int adsm__emu_dev_memset(void *ctx, uintptr_t dev, int value, size_t n) {
    adsm__emu *e = (adsm__emu *)ctx;
    if (!adsm__emu_in_window(e, dev, n)) return -1;
    adsm__emu_drain(ctx);
    adsm__emu_wait(ctx, ADSM__LOAD(&e->rt->launch_seq)); /* a running kernel may read it */
    adsm__emu_back(e, dev, n);
    memset(e->window + (dev - e->base), value, n);
    return 0;
}

ADSM__PRIVATE int adsm__emu_dev_copy(void *ctx, uintptr_t dst, uintptr_t src, size_t n) {
    adsm__emu *e = (adsm__emu *)ctx;
    if (!adsm__emu_in_window(e, dst, n) || !adsm__emu_in_window(e, src, n)) return -1;
    adsm__emu_drain(ctx); /* evictions in flight may be the source's latest bytes */
    adsm__emu_wait(ctx, ADSM__LOAD(&e->rt->launch_seq)); /* a running kernel may read it */
    adsm__emu_back(e, dst, n);
    memmove(e->window + (dst - e->base), e->window + (src - e->base), n);
    return 0;
}

/* ---- parent: completion thread ------------------------------------------------------------ */
ADSM__PRIVATE void adsm__emu_record_error(adsm__emu *e, adsm_result r, const char *text) {
    adsm__device_error_record(&e->errors, r, text);
}

/* The device cannot be reached any more: every wait for it ends, and later calls say why. */
ADSM__PRIVATE void adsm__emu_lose(adsm__emu *e, const char *why) {
    if (why) adsm__emu_record_error(e, ADSM_ERROR_DEVICE_LOST, why);
    ADSM__STORE(&e->lost, 1);
    ADSM__ADD(&e->completion_gen, 1);
    adsm__futex_wake_all(&e->completion_gen);
}

ADSM__PRIVATE void *adsm__emu_completion_main(void *arg) {
    adsm__emu *e = (adsm__emu *)arg;
    adsm__emu_msg *m = e->completion_msg;
    for (;;) {
        int fd = adsm__own_fd_get(&e->sock); /* never reads from a socket of the program's */
        ssize_t n = m && fd >= 0 ? recv(fd, m, sizeof *m, 0) : 0;
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (m->type != ADSM__EMU_DONE) continue;
        adsm__trace_on(&e->rt->trace, ADSM__TRACE_DEVICE_TID, ADSM__TR_KERNEL, m->ran_from, m->ran_to, 0, m->seq);
        if (m->status != 0) adsm__emu_record_error(e, (adsm_result)m->status, m->text);
        ADSM__STORE(&e->completed_seq, m->seq);
        ADSM__ADD(&e->completion_gen, 1);
        adsm__futex_wake_all(&e->completion_gen);
    }
    adsm__emu_lose(e, ADSM__LOAD(&e->quitting) ? NULL : "the emulated device process exited");
    return NULL;
}

/* A launch that completed before the device process died still counts as done (its results
 * are readable); only later ones report the loss. */
ADSM__PRIVATE int adsm__emu_wait(void *ctx, uint64_t seq) {
    adsm__emu *e = (adsm__emu *)ctx;
    /* with several devices, launch `seq` may have gone elsewhere: this device's launches up to it
     * are done once the last one it was sent is (they run in order) */
    uint64_t issued = ADSM__LOAD(&e->issued_seq);
    if (seq > issued) seq = issued;
    if (ADSM__LOAD(&e->completed_seq) >= seq) return 0;
    return adsm__wait_launch(&e->completed_seq, &e->completion_gen, &e->lost, seq);
}

ADSM__PRIVATE adsm_result adsm__emu_synchronize(void *ctx) {
    adsm__emu *e = (adsm__emu *)ctx;
    adsm__emu_wait(ctx, ADSM__LOAD(&e->rt->launch_seq));
    return adsm__device_error_take(&e->errors, ADSM__LOAD(&e->lost), "the emulated device process exited");
}

/* ---- parent: commands ------------------------------------------------------------------- */
ADSM__PRIVATE adsm_result adsm__emu_send(adsm__emu *e, const struct adsm__emu_msg *m, size_t len) {
    if (ADSM__LOAD(&e->lost)) return adsm__fail(ADSM_ERROR_DEVICE_LOST, "the emulated device process exited");
    int fd = adsm__own_fd_get(&e->sock);
    if (fd < 0) { /* the program closed it (a daemon closing every descriptor after adsm_init) */
        static const char closed[] = "the program closed the emulated device's socket";
        adsm__emu_lose(e, closed);
        return adsm__fail(ADSM_ERROR_DEVICE_LOST, "%s", closed);
    }
    for (;;) {
        ssize_t n = send(fd, m, len, MSG_NOSIGNAL);
        if (n == (ssize_t)len) return ADSM_OK;
        if (n < 0 && errno == EINTR) continue;
        adsm__emu_lose(e, "cannot reach the emulated device");
        return adsm__fail(ADSM_ERROR_DEVICE_LOST, "cannot reach the emulated device: %s", strerror(errno));
    }
}

ADSM__PRIVATE adsm_result adsm__emu_range_cmd(adsm__emu *e, uint32_t type, uintptr_t addr, size_t len) {
    adsm__emu_msg m;
    memset(&m, 0, offsetof(adsm__emu_msg, args));
    m.type = type;
    m.addr = addr;
    m.len = len;
    return adsm__emu_send(e, &m, offsetof(adsm__emu_msg, args));
}

ADSM__PRIVATE size_t adsm__emu_capacity(void *ctx) { return ((adsm__emu *)ctx)->capacity; }

/* Capacity is accounted by the runtime (emu_memory); the memory itself is backed at the first
 * copy into it (adsm__emu_back). */
ADSM__PRIVATE adsm_result adsm__emu_dev_alloc(void *ctx, uintptr_t dev, size_t span) {
    adsm__emu *e = (adsm__emu *)ctx;
    return adsm__emu_range_cmd(e, ADSM__EMU_ALLOC, dev, span);
}

/* The pages behind [dev, dev + n) go back, leaving zeros (punched; written over if the hole cannot
 * be punched), and may be backed again. No kernel or copy uses the range (the callers waited). */
ADSM__PRIVATE void adsm__emu_dev_discard(void *ctx, uintptr_t dev, size_t n) {
    adsm__emu *e = (adsm__emu *)ctx;
    adsm__emu_unback(e, dev, n);
    int fd = adsm__own_fd_get(&e->devfd);
    if (fd < 0 || fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(dev - e->base), (off_t)n) != 0)
        memset(e->window + (dev - e->base), 0, n);
}

/* The caller waited for every launch, so no kernel uses the range any more; the next object at
 * this address starts zeroed. */
ADSM__PRIVATE void adsm__emu_dev_free(void *ctx, uintptr_t dev, size_t span) {
    adsm__emu_range_cmd((adsm__emu *)ctx, ADSM__EMU_FREE, dev, span);
    adsm__emu_dev_discard(ctx, dev, span); /* an evicted object's pages go the same way (capacity.h) */
}

ADSM__PRIVATE adsm_result adsm__emu_launch(void *ctx, const adsm__launch *l) {
    adsm__emu *e = (adsm__emu *)ctx;
    adsm__emu_msg *m = (adsm__emu_msg *)calloc(1, sizeof *m);
    if (!m) return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "launch: out of memory");
    if (l->kernel->args_size > sizeof m->args) {
        free(m);
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "kernel '%s': %zu bytes of arguments, the limit is %d",
                          l->kernel->name, l->kernel->args_size, ADSM__EMU_MAX_ARGS);
    }
    m->type = ADSM__EMU_LAUNCH;
    m->seq = l->seq;
    m->kernel = l->kernel;
    m->grid = l->grid;
    m->nwritable = (uint32_t)l->nwritable;
    m->ninputs = (uint32_t)l->ninputs;
    memcpy(m->writable, l->writable, sizeof m->writable);
    memcpy(m->inputs, l->inputs, sizeof m->inputs);
    memcpy(m->args, l->args, l->kernel->args_size);
    if (ADSM__LOAD(&e->lost)) {
        free(m);
        return adsm__fail(ADSM_ERROR_DEVICE_LOST, "the emulated device process exited");
    }
    ADSM__STORE(&e->issued_seq, l->seq);
    if (e->queue.started) { /* behind the copies queued before it (release queues its flushes) */
        adsm__dma_job job = {0, 0, 0, 0, m};
        adsm__queue_push(&e->queue, &job, sizeof job, NULL);
        return ADSM_OK;
    }
    adsm_result r = adsm__emu_send(e, m, offsetof(adsm__emu_msg, args) + l->kernel->args_size);
    free(m);
    return r;
}

/* ---- parent: lifetime ----------------------------------------------------------------------- */
ADSM__PRIVATE void adsm__emu_shutdown(void *ctx) {
    adsm__emu *e = (adsm__emu *)ctx;
    ADSM__STORE(&e->quitting, 1);
    adsm__queue_stop(&e->queue); /* runs the jobs still queued first */
    int sock = adsm__own_fd_get(&e->sock);
    if (sock >= 0) shutdown(sock, SHUT_RDWR);
    else if (e->child > 0) kill(e->child, SIGKILL); /* ends the completion thread's recv */
    if (e->completion_started) pthread_join(e->completion_thread, NULL);
    if (e->child > 0) {
        kill(e->child, SIGKILL);
        while (waitpid(e->child, NULL, 0) < 0 && errno == EINTR) {}
    }
    adsm__own_fd_close(&e->sock);
    if (e->window) munmap(e->window, e->half);
    adsm__own_fd_close(&e->devfd);
    free(e->backed);
    free(e->completion_msg);
    adsm__device_error_destroy(&e->errors);
    free(e);
}

/* Waits for the device process to say it is set up: until then it still holds the program's
 * descriptors, and a program that closes a pipe or a locked file right after adsm_init must
 * find it closed. */
ADSM__PRIVATE int adsm__emu_device_ready(adsm__emu *e) {
    for (;;) {
        ssize_t n = recv(e->sock.fd, &e->msg, sizeof e->msg, 0);
        if (n < 0 && errno == EINTR) continue;
        return n > 0 && e->msg.type == ADSM__EMU_READY;
    }
}

ADSM__PRIVATE adsm_result adsm__emu_init(adsm__runtime *rt, void **ctx) {
    adsm__emu *e = (adsm__emu *)calloc(1, sizeof *e);
    int sv[2];
    if (!e) return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "emu backend: out of memory");
    e->rt = rt;
    e->base = rt->base;
    e->half = rt->half;
    e->capacity = rt->cfg.emu_memory;
    e->backed = (uint64_t *)calloc(e->half / ADSM__EMU_GRANULE / 64 + 1, sizeof *e->backed); /* NULL: pages found on touch */
    e->workers = rt->cfg.emu_workers;
    /* one device: kernels may follow stored pointers into objects they do not name, so they keep
     * their issue order unless the program asks for streams (emu_streams.h) */
    e->streams = rt->cfg.streams ? rt->cfg.streams : rt->cfg.emu_devices > 1 ? ADSM__DEFAULT_STREAMS : 1;
    e->sock.fd = -1;
    adsm__device_error_init(&e->errors);
    adsm__own_fd_set(&e->devfd, adsm__memfd("adsm-emu-device", e->half));
    if (e->devfd.fd < 0) {
        adsm__emu_shutdown(e);
        return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE, "emu backend: memfd_create failed: %s", strerror(errno));
    }
    e->window = (unsigned char *)adsm__map_shared_unlocked(e->half, PROT_READ | PROT_WRITE, e->devfd.fd);
    if (e->window == MAP_FAILED) {
        e->window = NULL;
        adsm__emu_shutdown(e);
        return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE, "emu backend: cannot map a %zu MiB view of device memory: "
                          "%s (address space limited? a smaller ADSM_EMU_MEMORY needs less)",
                          e->half >> 20, strerror(errno));
    }
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        adsm__emu_shutdown(e);
        return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE, "emu backend: socketpair failed: %s", strerror(errno));
    }
    rt->be_ctx = e; /* the device process finds its state here */
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        adsm__emu_device_main(e, sv[1]);
    }
    close(sv[1]);
    adsm__own_fd_set(&e->sock, sv[0]);
    if (pid < 0) {
        adsm__emu_shutdown(e);
        return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE, "emu backend: fork failed: %s", strerror(errno));
    }
    e->child = pid;
    if (!adsm__emu_device_ready(e)) {
        adsm__emu_shutdown(e);
        return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE, "emu backend: the device process failed to start");
    }
    *ctx = e;
    return ADSM_OK;
}

/* The DMA and completion threads, once every device process is forked (backend.h, start). Until
 * then copies are synchronous and nothing is launched. */
/* ADSM_EMU_DEVICES: the device processes the runtime starts. */
ADSM__PRIVATE unsigned adsm__emu_device_count(void *ctx) { return ((adsm__emu *)ctx)->rt->cfg.emu_devices; }

ADSM__PRIVATE adsm_result adsm__emu_start(void *ctx) {
    adsm__emu *e = (adsm__emu *)ctx;
    adsm__queue_start(&e->queue, sizeof(adsm__dma_job), ADSM__DMA_RING, adsm__emu_dma_job_run, adsm__emu_dma_begin,
                      e);
    e->completion_msg = (adsm__emu_msg *)malloc(sizeof *e->completion_msg);
    e->completion_started =
        e->completion_msg && pthread_create(&e->completion_thread, NULL, adsm__emu_completion_main, e) == 0;
    if (!e->completion_started) return adsm__fail(ADSM_ERROR_SYSTEM, "emu backend: cannot start its threads");
    return ADSM_OK;
}

static const adsm__backend_vtbl adsm__backend_emu = {
    .name = "emu",
    .moves_data = 1,
    .max_args = ADSM__EMU_MAX_ARGS,
    .init = adsm__emu_init,
    .start = adsm__emu_start,
    .device_count = adsm__emu_device_count,
    .shutdown = adsm__emu_shutdown,
    .capacity = adsm__emu_capacity,
    .dev_alloc = adsm__emu_dev_alloc,
    .dev_free = adsm__emu_dev_free,
    .dev_discard = adsm__emu_dev_discard,
    .to_device = adsm__emu_to_device,
    .from_device = adsm__emu_from_device,
    .drain = adsm__emu_drain,
    .launch = adsm__emu_launch,
    .wait = adsm__emu_wait,
    .synchronize = adsm__emu_synchronize,
    .dev_memset = adsm__emu_dev_memset,
    .dev_copy = adsm__emu_dev_copy,
    .device_view = adsm__emu_device_view,
};

#endif /* ADSM__BACKEND_EMU_INCLUDED */
