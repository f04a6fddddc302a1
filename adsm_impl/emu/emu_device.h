/* adsm_impl/emu/emu_device.h -- the emulated device itself: the process that holds device
 * memory and runs kernels, and what it shares with its parent (the command messages, the DMA
 * jobs, struct adsm__emu). The parent's side, the backend, is backend_emu.h, whose top comment
 * describes the whole.
 *
 * Contexts: the device process only, for the functions here (forked at initialisation; its
 * main thread reads commands from the socket, a worker pool runs kernels). Each kernel chunk runs
 * under sigsetjmp, so a crashing kernel, or one that writes memory it may only read (device
 * memory is read-only outside the kernel's OUT/INOUT objects), fails its launch instead of the
 * program; under ADSM_EMU_CHECK_BOUNDS one that runs off an object's end, or before its start,
 * fails it naming the object (below, "the bounds check"). The signal handler only records the
 * fault and jumps; everything else runs in the worker's normal context. */
#ifndef ADSM__EMU_DEVICE_INCLUDED
#define ADSM__EMU_DEVICE_INCLUDED

#include "../common.h"
#include "../os.h"
#include "../blocktree.h"
#include "../copy_queue.h"
#include "../runtime.h"
#include "../device_error.h"
#include "../backend.h"
#include "../kernel.h"
#include "emu_streams.h"

#include <setjmp.h>
#include <stdio_ext.h>
#include <sys/prctl.h>

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
    uint32_t stream;           /* DONE: the device's stream that ran it (ADSM_TRACE's track) */
    adsm__range writable[ADSM__MAX_PARAMS];
    adsm__range inputs[ADSM__MAX_INPUTS];
    char text[256];
    ADSM__ALIGNAS(16) unsigned char args[ADSM__EMU_MAX_ARGS];
    /* ADSM_EMU_CHECK_BOUNDS only, whose launches are sent whole (others end with their arguments,
     * and these are then never read): the bytes between each range's object's end and the end of
     * its last page (a range is whole pages; the object's size is len - slack) */
    uint32_t wslack[ADSM__MAX_PARAMS], islack[ADSM__MAX_INPUTS];
} adsm__emu_msg;

/* One job of the DMA thread, in queue order: a host->device copy, or a launch to send to the
 * device process once the copies queued before it landed (as a GPU stream orders them). */
typedef struct adsm__dma_job {
    uintptr_t dev, host;
    size_t len;
    uint64_t after_seq; /* launches that may still read the old bytes: the copy waits for them */
    struct adsm__emu_msg *launch; /* a launch message (malloc'd, the DMA thread frees it), or NULL */
} adsm__dma_job;

/* A range of executable code (backend_emu.h, "kernels the device process has"). */
typedef struct adsm__emu_code {
    uintptr_t lo, hi;
} adsm__emu_code;

typedef struct adsm__emu {
    adsm__runtime *rt;
    uintptr_t base;        /* device addresses: the shared half's (the device process's: its own) */
    size_t half, capacity;
    /* ADSM_EMU_SAME_ADDRESS=0: device memory sits in the device process at dev_base, a range
     * reserved in the program (so free in the forked device too); kernels see adsm's device
     * address a at a + delta (pointer arguments and launch ranges are moved on, as cuda does) */
    uintptr_t dev_base;
    intptr_t delta;
    adsm__own_fd devfd;    /* the memfd of device memory (os.h: never the program's file) */
    unsigned char *window; /* parent's view of device memory: window[addr - base] */
    uint64_t *backed;      /* one bit per 2 MiB granule of device memory the DMA side backed */
    adsm__own_fd sock;     /* the parent's end of the socket to the device process */
    pid_t child;           /* the device process: not the program's child (backend_emu.h) */
    adsm__own_fd pidfd;    /* a pidfd of it (-1: the kernel has none): signals that cannot reach
                              another process once the device is gone and its number reused */
    int child_is_ours;     /* the program reaps orphans itself (PID 1, a child subreaper): the device
                              came back to it as a child, and adsm reaps it */
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
    int check_bounds;          /* ADSM_EMU_CHECK_BOUNDS: name the object a kernel ran past (below) */
    adsm__emu_sched sched;     /* kernels in flight, on streams (emu_streams.h) */
    unsigned streams;
    adsm__emu_msg msg;         /* the main thread's receive buffer */
    adsm__emu_code *code;      /* stb_ds: the program's code when the device process was forked
                                  (backend_emu.h: a kernel elsewhere it lacks) */
} adsm__emu;

/* ---- device process ---------------------------------------------------------------------- */
static __thread sigjmp_buf *adsm__tls_kernel_jmp;
static __thread int adsm__tls_kernel_signal, adsm__tls_kernel_write;
static __thread int adsm__tls_kernel_addressed; /* the signal carries a fault's address (not abort's, kill's) */
static __thread uintptr_t adsm__tls_kernel_addr;

static void adsm__emu_kernel_signal(int sig, siginfo_t *si, void *context) {
    if (!adsm__tls_kernel_jmp) { /* not inside a kernel: a bug in the device process itself */
        adsm__default_action(sig);
        raise(sig);
        return;
    }
    adsm__tls_kernel_signal = sig;
    adsm__tls_kernel_addr = (uintptr_t)si->si_addr;
    adsm__tls_kernel_addressed = si->si_code > 0 && sig != SIGABRT; /* sent by the kernel for a fault */
    adsm__tls_kernel_write = adsm__fault_is_write(context);
    siglongjmp(*adsm__tls_kernel_jmp, 1);
}

/* ---- the bounds check (ADSM_EMU_CHECK_BOUNDS) ----------------------------------------------
 * With the check on, every allocation of the shared half leaves a guard page free after it, and
 * the half's first huge page stays free too (backend_emu.h): in this process memory no live object or
 * buffer holds is PROT_NONE, so an access that runs off either end of one by less than a page
 * faults instead of reading or writing its neighbour. The fault is classified after the chunk's
 * siglongjmp (normal context): the object it ran past (or before) is the nearest one, named with
 * its size and, when the kernel was given it, its parameter. Objects are page granular, so what
 * runs past an object's end into the rest of its last page cannot fault: a write there is found
 * after the kernel instead, in the bytes from the object's end to its page's end of its OUT/INOUT
 * objects, which stay zero (left alone if they were not zero before the kernel: CPU code wrote
 * there). Reads there, and writes of zeros, are not seen. Off, none of this runs. */

/* The launch's parameter whose object starts at `start`, and that object's size (else the
 * object's pages and NULL). */
ADSM__PRIVATE const char *adsm__emu_param_at(const adsm__emu_msg *m, uintptr_t start, size_t span, size_t *size) {
    *size = span;
    for (uint32_t i = 0; i < m->nwritable; i++)
        if (m->writable[i].addr == start) {
            *size = m->writable[i].len - m->wslack[i];
            return m->writable[i].param;
        }
    for (uint32_t i = 0; i < m->ninputs; i++)
        if (m->inputs[i].addr == start) {
            *size = m->inputs[i].len - m->islack[i];
            return m->inputs[i].param;
        }
    return NULL;
}

/* How an object is named in a message: its address, size and parameter. */
ADSM__PRIVATE void adsm__emu_name_object(const adsm__emu_msg *m, uintptr_t start, size_t span, char *out,
                                         size_t n) {
    size_t bytes;
    const char *param = adsm__emu_param_at(m, start, span, &bytes);
    if (param) snprintf(out, n, "object %p (%zu bytes, its parameter '%s')", (void *)start, bytes, param);
    else snprintf(out, n, "object %p (%zu bytes of pages, not one of its parameters)", (void *)start, bytes);
}

/* A fault at `a`, in no live object of the shared half: which object the kernel ran past or
 * before. 0 with the message written, -1 when the address lies elsewhere. */
ADSM__PRIVATE int adsm__emu_out_of_bounds(adsm__emu *e, const adsm__emu_msg *m, uintptr_t a, int write, char *msg,
                                          size_t size) {
    if (a < e->base || a - e->base >= e->half) return -1;
    uintptr_t below_start = 0, below_end = 0, above_start = 0, above_end = 0;
    pthread_mutex_lock(&e->objects_mutex);
    adsm__tree_node *below = adsm__tree_floor(&e->device_objects, a), *above = adsm__tree_ceil(&e->device_objects, a);
    if (below) below_start = below->start, below_end = below->end;
    if (above) above_start = above->start, above_end = above->end;
    pthread_mutex_unlock(&e->objects_mutex);
    if (below && below_end > a) return -1; /* inside one: not a bounds fault */
    const char *verb = write > 0 ? "wrote" : write == 0 ? "read" : "accessed";
    char object[160];
    if (below && (!above || a - below_end <= above_start - a)) {
        adsm__emu_name_object(m, below_start, below_end - below_start, object, sizeof object);
        snprintf(msg, size, "kernel '%s' %s past the end of %s at offset %zu (address %p)", m->kernel->name, verb,
                 object, (size_t)(a - below_start), (void *)a);
        return 0;
    }
    if (!above) return -1;
    adsm__emu_name_object(m, above_start, above_end - above_start, object, sizeof object);
    snprintf(msg, size, "kernel '%s' %s before the start of %s at offset -%zu (address %p)", m->kernel->name, verb,
             object, (size_t)(above_start - a), (void *)a);
    return 0;
}

/* Bit i: writable range i has slack (its object ends inside its last page) that is all zero now. */
ADSM__PRIVATE uint32_t adsm__emu_clean_slack(const adsm__emu_msg *m) {
    uint32_t clean = 0;
    for (uint32_t i = 0; i < m->nwritable; i++) {
        const unsigned char *p = (const unsigned char *)(m->writable[i].addr + m->writable[i].len - m->wslack[i]);
        uint32_t k = 0;
        while (k < m->wslack[i] && p[k] == 0) k++;
        if (m->wslack[i] > 0 && k == m->wslack[i]) clean |= (uint32_t)1 << i;
    }
    return clean;
}

/* After the kernel (its OUT/INOUT objects still writable): a clean slack it wrote into fails the
 * launch, naming the first byte written, and is cleared again for the next kernel. */
ADSM__PRIVATE int adsm__emu_check_slack(const adsm__emu_msg *m, uint32_t clean, char *msg, size_t size) {
    int status = 0;
    for (uint32_t i = 0; i < m->nwritable; i++) {
        if (!(clean & ((uint32_t)1 << i))) continue;
        size_t object = m->writable[i].len - m->wslack[i];
        unsigned char *p = (unsigned char *)(m->writable[i].addr + object);
        uint32_t k = 0;
        while (k < m->wslack[i] && p[k] == 0) k++;
        if (k == m->wslack[i]) continue;
        if (status == 0) {
            char name[160];
            adsm__emu_name_object(m, m->writable[i].addr, m->writable[i].len, name, sizeof name);
            snprintf(msg, size, "kernel '%s' wrote past the end of %s at offset %zu (address %p; within its last "
                     "page, seen after the kernel)", m->kernel->name, name, object + k, (void *)(p + k));
            status = ADSM_ERROR_KERNEL_CRASHED;
        }
        memset(p, 0, m->wslack[i]);
    }
    return status;
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
    if (e->check_bounds && adsm__tls_kernel_signal == SIGSEGV && !shared &&
        adsm__emu_out_of_bounds(e, m, a, adsm__tls_kernel_write, msg, size) == 0)
        return ADSM_ERROR_KERNEL_CRASHED;
    if (adsm__tls_kernel_addressed)
        snprintf(msg, size, "kernel '%s' crashed: %s at address %p", kname, strsignal(adsm__tls_kernel_signal),
                 (void *)a);
    else /* abort(), raise(): si_addr holds no address (the sender's pid) */
        snprintf(msg, size, "kernel '%s' crashed: %s", kname, strsignal(adsm__tls_kernel_signal));
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
        return adsm__chunk_threw(p->kernel, msg, size);
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

/* The pages of ranges r[0..n) get `prot`. Ranges that touch (the next starts on or before the
 * page after the last one ends) change in one call: a kernel's objects are mostly allocated side
 * by side, and each change of a mapping costs a TLB flush, a few microseconds on a VM. 0, or the
 * errno of the first change the kernel refused (the rest are still made). */
ADSM__PRIVATE int adsm__emu_set_ranges(const adsm__range *r, uint32_t n, int prot, size_t page) {
    adsm__range sorted[ADSM__MAX_PARAMS];
    uint32_t k = 0;
    for (uint32_t i = 0; i < n && i < ADSM__MAX_PARAMS; i++) { /* by address, insertion */
        uint32_t j = k++;
        for (; j > 0 && sorted[j - 1].addr > r[i].addr; j--) sorted[j] = sorted[j - 1];
        sorted[j] = r[i];
    }
    int refused = 0;
    for (uint32_t i = 0; i < k;) {
        uintptr_t lo = sorted[i].addr, hi = lo + sorted[i].len;
        for (i++; i < k && sorted[i].addr <= ADSM__ALIGN_UP(hi, page); i++)
            hi = ADSM__MAX(hi, sorted[i].addr + sorted[i].len);
        if (adsm__protect(lo, hi - lo, prot) != 0 && !refused) refused = errno;
    }
    return refused;
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
    adsm__emu *e = (adsm__emu *)ctx;
    adsm__emu_msg *m = (adsm__emu_msg *)t->launch;
    int refused = adsm__emu_set_ranges(m->writable, m->nwritable, PROT_READ | PROT_WRITE, e->rt->page);
    if (refused) { /* the kernel would die writing its own outputs, blamed for writing an input */
        t->status = ADSM_ERROR_SYSTEM;
        /* short, for t->text's 256 bytes: the name capped, the hint without the block-size way */
        snprintf(t->text, sizeof t->text, "kernel '%.64s' did not run: the device process could not make its outputs "
                 "writable (%s)%s", m->kernel->name, strerror(refused), refused == ENOMEM ? ": it has reached "
                 "vm.max_map_count mappings; raise it (sysctl vm.max_map_count)" : "");
        adsm__emu_set_ranges(m->writable, m->nwritable, PROT_READ, e->rt->page);
        t->ran_from = t->ran_to = adsm__now_ns();
        return;
    }
    uint32_t clean = e->check_bounds ? adsm__emu_clean_slack(m) : 0;
    t->ran_from = adsm__now_ns();
    t->status = adsm__pool_run(pool, m->kernel, m->grid, m->args, t->text, sizeof t->text);
    t->ran_to = adsm__now_ns();
    if (clean) {
        int status = adsm__emu_check_slack(m, clean, t->text, t->status ? 0 : sizeof t->text);
        if (t->status == 0) t->status = status;
    }
    /* refused, the outputs stay writable: only the check for stray writes into them is lost */
    (void)adsm__emu_set_ranges(m->writable, m->nwritable, PROT_READ, e->rt->page);
    adsm__emu_flush_kernel_output();
}

/* A launch is done, and so are every earlier one: DONE to the parent, in the launch's message. */
ADSM__PRIVATE void adsm__emu_device_report(void *ctx, adsm__emu_task *t) {
    adsm__emu *e = (adsm__emu *)ctx;
    adsm__emu_msg *reply = (adsm__emu_msg *)t->launch;
    reply->type = ADSM__EMU_DONE;
    reply->ran_from = t->ran_from;
    reply->ran_to = t->ran_to;
    reply->stream = t->stream;
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

/* Start-up failed: the parent hears why (a READY message carrying an error and its text, which
 * adsm__emu_init reports), then the device process ends. */
__attribute__((noreturn)) ADSM__PRIVATE void adsm__emu_device_failed(int sock, adsm__emu_msg *m, const char *fmt,
                                                                    const char *detail) {
    m->type = ADSM__EMU_READY;
    m->status = ADSM_ERROR_BACKEND_UNAVAILABLE;
    snprintf(m->text, sizeof m->text, fmt, detail);
    (void)send(sock, m, offsetof(adsm__emu_msg, args), MSG_NOSIGNAL);
    _exit(3);
}

/* The device process: owns device memory at the objects' addresses and serves commands from the
 * parent in order until told to quit or the parent goes away. Never returns. */
ADSM__PRIVATE void adsm__emu_device_main(adsm__emu *e, int sock) {
    prctl(PR_SET_NAME, "adsm-emu-device", 0, 0, 0); /* what ps and top show */
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
    /* Device memory replaces the host view of the shared half (or, with addresses of its own,
     * takes its reserved range, and host addresses of the shared half vanish too, so that a kernel
     * following an untranslated host pointer faults as on a GPU); safe host addresses vanish. */
    uintptr_t device_at = e->delta ? e->dev_base : e->base;
    if (mmap((void *)device_at, e->half, PROT_NONE, MAP_SHARED | MAP_FIXED, e->devfd.fd, 0) == MAP_FAILED ||
        (e->delta && mmap((void *)e->base, e->half, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
                          -1, 0) == MAP_FAILED) ||
        mmap((void *)(e->base + e->half), e->half, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
             -1, 0) == MAP_FAILED)
        adsm__emu_device_failed(sock, &e->msg, "it could not map device memory (%s)", strerror(errno));
    e->base = device_at; /* this process's copy: every address it is sent is a device address */
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
    if (adsm__emu_sched_start(&e->sched) != 0)
        adsm__emu_device_failed(sock, &e->msg, "it could not start its kernel threads (%s)",
                                "the thread limit, ulimit -u, or memory is exhausted");
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

#endif /* ADSM__EMU_DEVICE_INCLUDED */
