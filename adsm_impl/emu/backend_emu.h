/* adsm_impl/emu/backend_emu.h -- a discrete accelerator emulated by a process of its own.
 *
 * Device memory is one sparse memfd. The device process (forked at initialisation, and not the
 * program's child: see "lifetime" below) maps it over the shared half of the address
 * reservation, so every object lives at the same address on both sides; the parent reaches it
 * only through a second mapping, the DMA window. Host and device memory are really separate: a
 * missing copy is a wrong answer, as on a GPU.
 *
 * The device process's side (its command loop, kernels on a worker pool, the messages and
 * struct adsm__emu it shares with this side) is emu_device.h; its streams are emu_streams.h.
 *
 * Contexts: to_device/from_device/drain/wait are called from the SIGSEGV handler, so they use
 * only memcpy, atomics and futexes. The DMA thread is the worker of a copy_queue.h queue: it
 * runs asynchronous copies, and launches behind the copies queued before them (a stream's
 * order), in queue order. It and the completion thread (launch results, read from the device
 * process's socket) never take the runtime lock. Everything else runs in normal thread context
 * under the runtime lock. The device process runs kernels on a worker pool; each chunk runs under
 * sigsetjmp so a crashing kernel, or one that writes memory it may only read (device memory is
 * read-only outside the kernel's OUT/INOUT objects), fails its launch instead of the program.
 *
 * ADSM_EMU_CHECK_BOUNDS=1: adsm__emu_init makes the shared half's arena leave a guard page after
 * every allocation (and keep its first huge page), so objects' device copies never touch; launch
 * messages go whole, with the sizes of the objects they name after the arguments; the device
 * process names the object a kernel ran past (emu_device.h, "the bounds check"). Off, the layout,
 * the messages and every path are as before. */
#ifndef ADSM__BACKEND_EMU_INCLUDED
#define ADSM__BACKEND_EMU_INCLUDED

#include "../common.h"
#include "../os.h"
#include "../config.h"
#include "../object.h"
#include "../copy.h"
#include "../copy_queue.h"
#include "../trace.h"
#include "../runtime.h"
#include "../device_error.h"
#include "../backend.h"
#include "../kernel.h"
#include "emu_device.h"

#include <dlfcn.h>
#include <link.h>
#include <poll.h>

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

/* A launch message's length: up to its arguments; whole under ADSM_EMU_CHECK_BOUNDS (the
 * objects' sizes follow the arguments). */
ADSM__PRIVATE size_t adsm__emu_launch_len(const adsm__emu *e, const adsm__emu_msg *m) {
    return e->check_bounds ? sizeof *m : offsetof(adsm__emu_msg, args) + m->kernel->args_size;
}

/* A launch that cannot reach the device is reported at the next adsm_sync, as a GPU would. */
ADSM__PRIVATE void adsm__emu_send_launch(adsm__emu *e, adsm__emu_msg *m) {
    if (adsm__emu_send(e, m, adsm__emu_launch_len(e, m)) != ADSM_OK)
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
    adsm__trace_name_track(&e->rt->trace, "emu copy engine");
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

/* ... and written in place (translate.h: declared pointer fields, the device idle). */
ADSM__PRIVATE void *adsm__emu_device_window(void *ctx, uintptr_t dev, size_t n) {
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

/* This device's number among the runtime's (ADSM_TRACE's kernel track). */
ADSM__PRIVATE unsigned adsm__emu_index(const adsm__emu *e) {
    for (unsigned d = 0; d < ADSM__MAX_DEVICES; d++)
        if (e->rt->dev_ctx[d] == e) return d;
    return 0;
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
        adsm__trace_on(&e->rt->trace, adsm__trace_kernel_tid(adsm__emu_index(e), m->stream), ADSM__TR_KERNEL,
                       m->ran_from, m->ran_to, 0, m->seq);
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

/* Nothing queued for the DMA thread and every launch sent finished. */
ADSM__PRIVATE int adsm__emu_idle(void *ctx) {
    adsm__emu *e = (adsm__emu *)ctx;
    return adsm__queue_idle(&e->queue) && ADSM__LOAD(&e->completed_seq) >= ADSM__LOAD(&e->issued_seq);
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
    m.addr = addr + (uintptr_t)e->delta; /* the device's address */
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

/* ADSM_EMU_CHECK_BOUNDS: the bytes of a launch range's last page past its object's end (the
 * object's size is what the device process names). Runtime lock held (the launch's). */
ADSM__PRIVATE uint32_t adsm__emu_slack(adsm__runtime *rt, const adsm__range *r) {
    adsm__tree_node *n = adsm__tree_find(&rt->safe_dev, r->addr); /* safe objects, device buffers */
    adsm__object *o = n ? ADSM__CONTAINER_OF(n, adsm__object, dev_node)
                        : adsm__object_of(adsm__tree_find(&rt->objects, r->addr));
    return o && o->dev == r->addr && o->size <= r->len ? (uint32_t)(r->len - o->size) : 0;
}

/* ADSM_EMU_SAME_ADDRESS=0: a launch's pointer arguments and ranges in the device's addresses. */
ADSM__PRIVATE void adsm__emu_to_device_addresses(adsm__emu *e, const adsm_kernel_desc *k, adsm__emu_msg *m) {
    for (uint32_t i = 0; i < m->nwritable; i++) m->writable[i].addr += (uintptr_t)e->delta;
    for (uint32_t i = 0; i < m->ninputs; i++) m->inputs[i].addr += (uintptr_t)e->delta;
    adsm__args_to_device(e->rt, k, m->args, e->base, e->half, e->delta);
}

ADSM__PRIVATE intptr_t adsm__emu_address_delta(void *ctx) { return ((adsm__emu *)ctx)->delta; }

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
    if (e->check_bounds) {
        for (uint32_t i = 0; i < m->nwritable; i++) m->wslack[i] = adsm__emu_slack(e->rt, &m->writable[i]);
        for (uint32_t i = 0; i < m->ninputs; i++) m->islack[i] = adsm__emu_slack(e->rt, &m->inputs[i]);
    }
    memcpy(m->args, l->args, l->kernel->args_size);
    if (e->delta) adsm__emu_to_device_addresses(e, l->kernel, m);
    if (ADSM__LOAD(&e->lost)) {
        free(m);
        return adsm__fail(ADSM_ERROR_DEVICE_LOST, "the emulated device process exited");
    }
    ADSM__STORE(&e->issued_seq, l->seq);
    /* behind the copies queued before it (release queues its flushes); with none queued it goes
     * from this thread, which saves waking the DMA thread (dear on a VM) */
    if (e->queue.started) {
        adsm__dma_job job = {0, 0, 0, 0, m};
        int unused;
        if (!adsm__queue_run_if_idle(&e->queue, &job, &unused)) adsm__queue_push(&e->queue, &job, sizeof job, NULL);
        return ADSM_OK;
    }
    adsm_result r = adsm__emu_send(e, m, adsm__emu_launch_len(e, m));
    free(m);
    return r;
}

/* ---- parent: lifetime ----------------------------------------------------------------------- */
/* The device process is not a child of the program: adsm_init forks a go-between, which forks the
 * device and exits, so the device is an orphan that the system's reaper (init, or the nearest
 * child subreaper above the program) adopts. A program that reaps every child (`while (wait(&st)
 * > 0)`) never waits for it, and its SIGCHLD handler never hears of it (only of the go-between's
 * exit, inside adsm_init; adsm reaps the go-between itself). adsm needs no parent's
 * rights over it: the device's death is seen on the socket (the completion thread's end of file),
 * and a pidfd, taken while the go-between still holds the device's number, signals it at shutdown
 * without the risk of a number reused by then. Where the program is itself the reaper (PID 1 of a
 * container, a child subreaper) the orphan comes back to it as a child: adsm notes that and reaps
 * it at shutdown, as before. */
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434 /* the same number on every architecture (Linux 5.3) */
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

ADSM__PRIVATE void adsm__emu_kill(adsm__emu *e) {
    int pidfd = adsm__own_fd_get(&e->pidfd);
    if (pidfd >= 0) (void)syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0u);
    else if (e->child > 0) kill(e->child, SIGKILL); /* no pidfd (before Linux 5.3): by number */
}

/* Waits until the device process is gone: reaped if it is the program's child, else until its
 * pidfd says it exited (its reaper collects it). */
ADSM__PRIVATE void adsm__emu_await_exit(adsm__emu *e) {
    int pidfd = adsm__own_fd_get(&e->pidfd);
    if (e->child <= 0) return;
    if (e->child_is_ours) {
        while (waitpid(e->child, NULL, 0) < 0 && errno == EINTR) {}
    } else if (pidfd >= 0) {
        struct pollfd p = {pidfd, POLLIN, 0};
        while (poll(&p, 1, -1) < 0 && errno == EINTR) {}
    }
}

/* ---- kernels the device process has ----------------------------------------------------------
 * The device process is a copy of the program made at adsm_init: a kernel whose code a library
 * loaded later (dlopen) holds is not in it, and its launch made the device process fault and die
 * (every later launch then failed, saying only that the device was lost). So the executable
 * segments of the program and its libraries are noted before the fork, and a kernel whose entry
 * lies in none of them is refused at its launch (adsm_kernel_prepare too), saying why. Normal
 * thread context. */
ADSM__PRIVATE int adsm__emu_note_code(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    adsm__emu *e = (adsm__emu *)arg;
    for (unsigned i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
        adsm__emu_code c = {info->dlpi_addr + ph->p_vaddr, info->dlpi_addr + ph->p_vaddr + ph->p_memsz};
        stbds_arrput(e->code, c);
    }
    return 0;
}

ADSM__PRIVATE adsm_result adsm__emu_prepare(void *ctx, const adsm_kernel_desc *k) {
    adsm__emu *e = (adsm__emu *)ctx;
    uintptr_t entry = (uintptr_t)k->entry;
    for (ptrdiff_t i = 0; i < stbds_arrlen(e->code); i++) /* a few segments: no cache needed */
        if (entry >= e->code[i].lo && entry < e->code[i].hi) return ADSM_OK;
    Dl_info where;
    const char *library = dladdr((void *)entry, &where) && where.dli_fname ? where.dli_fname : "code";
    return adsm__fail(ADSM_ERROR_UNSUPPORTED, "kernel '%s': its body is in %s, loaded after adsm_init; the emulated "
                      "device, a process made at adsm_init, does not have it (load the library before adsm_init)",
                      k->name, library);
}

ADSM__PRIVATE void adsm__emu_shutdown(void *ctx) {
    adsm__emu *e = (adsm__emu *)ctx;
    ADSM__STORE(&e->quitting, 1);
    adsm__queue_stop(&e->queue); /* runs the jobs still queued first */
    int sock = adsm__own_fd_get(&e->sock);
    if (sock >= 0) shutdown(sock, SHUT_RDWR);
    else adsm__emu_kill(e); /* ends the completion thread's recv */
    if (e->completion_started) pthread_join(e->completion_thread, NULL);
    adsm__emu_kill(e);
    adsm__emu_await_exit(e);
    adsm__own_fd_close(&e->pidfd);
    adsm__own_fd_close(&e->sock);
    if (e->window) munmap(e->window, e->half);
    if (e->dev_base) munmap((void *)e->dev_base, e->half);
    adsm__own_fd_close(&e->devfd);
    free(e->backed);
    free(e->completion_msg);
    stbds_arrfree(e->code);
    adsm__device_error_destroy(&e->errors);
    free(e);
}

/* Reads a whole value from a pipe; 0 on success. */
ADSM__PRIVATE int adsm__emu_read_all(int fd, void *buf, size_t n) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = read(fd, (char *)buf + done, n - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        done += (size_t)r;
    }
    return 0;
}

/* Starts the device process through a go-between (above). The go-between forks the device, tells
 * the program its number on `report`, and waits for end of file on `hold` before it exits: until
 * then the device's number cannot be given to another process, so the pidfd the program takes
 * meanwhile is the device's. Returns the device's pid, or -1 with errno. */
ADSM__PRIVATE pid_t adsm__emu_spawn(adsm__emu *e, int sv[2]) {
    int report[2], hold[2];
    if (pipe2(report, O_CLOEXEC) != 0) return -1;
    if (pipe2(hold, O_CLOEXEC) != 0) {
        close(report[0]);
        close(report[1]);
        return -1;
    }
    pid_t between = fork();
    if (between == 0) { /* the go-between: one thread, a copy of the program */
        close(report[0]);
        close(hold[1]);
        close(sv[0]);
        pid_t device = fork();
        if (device == 0) {
            close(report[1]);
            close(hold[0]);
            adsm__emu_device_main(e, sv[1]);
        }
        int answer = device > 0 ? (int)device : -errno;
        if (write(report[1], &answer, sizeof answer) != (ssize_t)sizeof answer) _exit(1);
        char c;
        while (read(hold[0], &c, 1) < 0 && errno == EINTR) {}
        _exit(0);
    }
    int saved = errno, answer = -1;
    close(report[1]);
    close(hold[0]);
    if (between > 0 && adsm__emu_read_all(report[0], &answer, sizeof answer) != 0) answer = -ECHILD;
    if (answer > 0) adsm__own_fd_set(&e->pidfd, (int)syscall(SYS_pidfd_open, (pid_t)answer, 0u));
    /* the go-between's work is done: killed rather than let exit, since an exit under valgrind
     * runs its leak check over a copy of the whole program, device memory window included (about
     * a minute per adsm_init on 2 cores, where the suites under valgrind had 2.5 minutes in all) */
    if (between > 0) kill(between, SIGKILL);
    close(hold[1]); /* the device is adopted */
    close(report[0]);
    if (between < 0) {
        errno = saved;
        return -1;
    }
    while (waitpid(between, NULL, 0) < 0 && errno == EINTR) {}
    if (answer <= 0) {
        errno = -answer;
        return -1;
    }
    /* adopted by the program itself (PID 1, a child subreaper): its child now, reaped by adsm */
    e->child_is_ours = waitpid((pid_t)answer, NULL, WNOHANG) == 0;
    return (pid_t)answer;
}

/* Waits for the device process to say it is set up: until then it still holds the program's
 * descriptors, and a program that closes a pipe or a locked file right after adsm_init must
 * find it closed. */
ADSM__PRIVATE int adsm__emu_device_ready(adsm__emu *e) {
    for (;;) {
        ssize_t n = recv(e->sock.fd, &e->msg, sizeof e->msg, 0);
        if (n < 0 && errno == EINTR) continue;
        return n > 0 && e->msg.type == ADSM__EMU_READY && e->msg.status == 0;
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
    e->pidfd.fd = -1;
    e->check_bounds = rt->cfg.emu_check_bounds;
    if (e->check_bounds && rt->va_shared.guard == 0) { /* the first device's init, before any object */
        /* the half's first huge page (or block) kept free, guard included, so that the first
         * objects still start on a huge page as without the check */
        size_t first = ADSM__MAX(rt->cfg.block_size, ADSM__EMU_GRANULE);
        rt->va_shared.guard = rt->page;
        (void)adsm__arena_alloc(&rt->va_shared, first - rt->page, rt->page);
    }
    adsm__device_error_init(&e->errors);
    if (!rt->cfg.emu_same_address) { /* device memory at addresses of its own (emu_device.h) */
        void *at = adsm__map_aligned(e->half, ADSM__EMU_GRANULE, PROT_NONE, MAP_NORESERVE);
        if (at == MAP_FAILED) {
            adsm__emu_shutdown(e);
            return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE, "emu backend: no address range for device memory of "
                              "its own (ADSM_EMU_SAME_ADDRESS=0): %s", strerror(errno));
        }
        e->dev_base = (uintptr_t)at;
        e->delta = (intptr_t)(e->dev_base - e->base);
        if (rt->ndev == 0) rt->dev_delta = e->delta; /* adsm_safe and adsm_dev_alloc hand out device 0's */
        adsm__log(ADSM_LOG_INFO, "emu: device %u's addresses differ from host addresses by %+lld bytes",
                  rt->ndev, (long long)e->delta);
    }
    adsm__own_fd_set(&e->devfd, adsm__memfd("adsm-emu-device", e->half));
    if (e->devfd.fd < 0) {
        int why = errno;
        size_t gib = e->half >> 30;
        adsm__emu_shutdown(e); /* frees e */
        if (why == EFBIG)
            return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE, "emu backend: its device memory is a %zu GiB memory "
                              "file (sparse), above the file-size limit (ulimit -f, RLIMIT_FSIZE); raise the limit "
                              "(ulimit -f unlimited)", gib);
        return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE, "emu backend: its device memory file: %s", strerror(why));
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
    stbds_arrsetcap(e->code, 64); /* one allocation for the usual program (fewer sizes churned) */
    dl_iterate_phdr(adsm__emu_note_code, e); /* what the device process will have */
    pid_t pid = adsm__emu_spawn(e, sv);
    close(sv[1]);
    adsm__own_fd_set(&e->sock, sv[0]);
    if (pid < 0) {
        adsm__emu_shutdown(e);
        return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE, "emu backend: starting the device process (its pipes, "
                          "then fork) failed: %s", strerror(errno)); /* EMFILE here is a pipe's */
    }
    e->child = pid;
    if (!adsm__emu_device_ready(e)) {
        char why[sizeof e->msg.text + 2] = ""; /* what the device process said, if it could */
        if (e->msg.type == ADSM__EMU_READY && e->msg.status != 0) snprintf(why, sizeof why, ": %s", e->msg.text);
        adsm__emu_shutdown(e); /* frees e */
        return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE, "emu backend: the device process failed to start%s", why);
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
        e->completion_msg && adsm__thread_start(&e->completion_thread, adsm__emu_completion_main, e) == 0;
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
    .idle = adsm__emu_idle,
    .synchronize = adsm__emu_synchronize,
    .dev_memset = adsm__emu_dev_memset,
    .dev_copy = adsm__emu_dev_copy,
    .prepare = adsm__emu_prepare,
    .device_view = adsm__emu_device_view,
    .device_window = adsm__emu_device_window,
    .address_delta = adsm__emu_address_delta,
};

#endif /* ADSM__BACKEND_EMU_INCLUDED */
