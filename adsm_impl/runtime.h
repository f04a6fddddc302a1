/* adsm_impl/runtime.h -- the one runtime struct that holds all of adsm's state.
 *
 * adsm keeps no global state outside `adsm__rt`. Fields are guarded by `lock` (a futex lock the
 * SIGSEGV handler may take) unless marked otherwise; counters are atomics. This file only
 * declares; it runs nowhere by itself. */
#ifndef ADSM__RUNTIME_INCLUDED
#define ADSM__RUNTIME_INCLUDED

#include "common.h"
#include "os.h"
#include "blocktree.h"
#include "arena.h"
#include "stats.h"
#include "config.h"
#include "object.h"
#include "protection.h"
#include "copy.h"
#include "trace.h"

struct adsm__backend_vtbl;
struct adsm__protocol_vtbl;

/* OFF: not running (adsm_init may start it). READY: running. FORKED: this process is a fork of
 * one where it was running; its threads, device contexts and device process stayed with the
 * parent, so nothing here may use it or start another (lifecycle.h, adsm__forked). */
enum { ADSM__RT_OFF = 0, ADSM__RT_READY = 1, ADSM__RT_FORKED = 2 };

/* A module image NVRTC made (cuda): PTX (NUL-terminated) or a cubin, size bytes. */
typedef struct adsm__image {
    size_t size;
    unsigned char *bytes; /* right after the struct, in the same allocation */
} adsm__image;

/* A compiled single-source kernel: descriptor key -> its image (cuda). */
typedef struct adsm__kernel_image {
    uint64_t key;
    adsm__image *value;
} adsm__kernel_image;

/* A compiled adsm_module_load_source: architecture, options and CUDA C -> its image (cuda). */
typedef struct adsm__source_image {
    char *key;
    adsm__image *value;
} adsm__source_image;

/* Threads that make objects' host pages on first use (host_pages.h): several, so that a small
 * object's first use does not wait behind a large one's page-locking (seconds in the driver). */
#define ADSM__PREPARERS 4
#define ADSM__FREED_OUTSIDE 64 /* um and hmm objects given back that the fault handler remembers */

/* One of them. It takes one request at a time: an asker claims an idle one (state 0 -> 1,
 * waiting on the runtime's preparer_freed while none is), hands it the object and waits; asked
 * and answered are futex words (requests made and done), and a request without an object ends
 * the thread. */
typedef struct adsm__preparer {
    struct adsm__runtime *rt;
    pthread_t thread;
    int state, asked, answered;
    adsm__object *object;
} adsm__preparer;

typedef struct adsm__runtime {
    int state;                  /* ADSM__RT_*, read atomically by the fault handler */
    int atfork_registered;      /* adsm__forked is registered with pthread_atfork (once per process) */
    int trace_exit_registered; /* adsm__trace_at_exit is registered with atexit */
    pthread_mutex_t init_mutex; /* serialises adsm_init / adsm_shutdown */
    int lifecycle_busy;         /* a start or stop holds init_mutex: a fork now leaves it held in the
                                   child, which is told it is a forked child (adsm__forked) */
    pthread_mutex_t launch_mutex; /* serialises launches: release may let the runtime lock go */
    adsm__settings cfg;
    size_t page;

    /* One address reservation: [base, base + half) holds same-address objects and every device
     * address; [base + half, base + 2 * half) holds the host side of "safe" objects. */
    uintptr_t base;
    size_t half;
    /* 0, or a second, always writable view of the shared half's host pages (one memfd mapped
     * twice): cuda under shared addresses page-locks and fills objects through it (reservation.h) */
    uintptr_t host_alias;
    /* the alias's page size (reservation.h): ADSM__ALIAS_SMALL (4 KiB pages; alias_refusal says
     * why, an errno), ADSM__ALIAS_HUGE_BY_SETTING (shmem_enabled gives huge pages) or
     * ADSM__ALIAS_HUGE_BY_COLLAPSE (each new object's pages collapsed into 2 MiB pages);
     * view_small_pages: the program's view maps them 4 KiB at a time (rolling, blocks under 2 MiB) */
    int alias_pages, alias_refusal, view_small_pages;
    /* one bit per 2 MiB region of the alias, set once an object made there claimed it for its
     * collapse (reservation.h, "2 MiB pages that objects share"); how many such collapses took */
    uint64_t *alias_regions;
    uint64_t shared_regions_collapsed;
    /* threads that helped prepare host memory so far (prepare.h; the tests read it): any thread
     * making an object or a host buffer adds to it */
    uint64_t prepare_helpers;
    /* ADSM_HOST_ON_FIRST_USE (host_pages.h): the threads that make objects' host pages ready when
     * the CPU or a copy first needs them, for the fault handler, which may not */
    adsm__preparer preparers[ADSM__PREPARERS];
    unsigned preparers_running;
    int preparer_freed;
    uint64_t first_uses; /* objects whose host pages were made on first use (the tests read it) */
    int sparse_first_use; /* 1: small accesses to a large object do not make its pages (protocol.h) */
    uint64_t sparse_stores; /* CPU stores that went on without making their object's pages (the tests read it) */
    uint64_t view_populates; /* calls mapping the view onto blocks opened after that (the tests read it) */
    intptr_t dev_delta; /* device address the program sees = adsm's device address + dev_delta (cuda
                           when the device range could not be put at the host addresses; else 0) */
    size_t dev_granule; /* device memory comes in units this large (cuda's granule); 0: pages */
    adsm__arena va_shared, va_safe;

    adsm__lock_t lock;
    adsm__tree objects;  /* host ranges of live objects */
    adsm__tree safe_dev; /* device ranges of objects not at their host address (safe, device-only) */
    adsm__tree host_buffers; /* adsm_host_alloc memory (adsm__host_buffer nodes) */
    /* the last objects um and hmm gave back, outside the reservation: the fault handler says that a
     * fault there touched a freed object (adsm__note_freed_outside); atomics, a ring */
    struct { uintptr_t start, end; } freed_outside[ADSM__FREED_OUTSIDE];
    unsigned freed_outside_next;
    adsm__object *first_object, *last_object;
    size_t nobjects, object_bytes, device_used;
    size_t tracked_blocks; /* blocks of live shared objects: the most that can ever be Dirty */

    adsm__block *fifo_head, *fifo_tail; /* dirty units, oldest first */
    size_t fifo_len;
    /* adaptive rolling size (protocol_rolling.h): the learned limit (0 until it first changes), the count
     * of eager evictions so far (the clock blocks' evicted_at refers to) and its value at the last
     * kernel call; since that call, the evictions regretted and the units newly made Dirty */
    size_t rolling_limit;
    uint64_t evict_clock, epoch_clock, epoch_regrets, epoch_touched;
    /* rolling write-ahead (protocol_rolling.h): kernel calls so far (objects' runs made before the last
     * one are over), and the blocks the objects' current runs were meant to hold, together */
    uint64_t ahead_epoch;
    size_t ahead_sum;
    /* rolling's costs (protocol_rolling.h, "what faults, evictions and copies cost"): running averages
     * of a fault's and an eviction's own time on the thread that took them (ns) and of a copy to
     * the device per byte (ps), measured as they happen, or fixed by a test (cost_pinned); and the
     * copy counters (stats.h2d_ns, h2d_bytes) where the copy cost was last sampled */
    uint64_t cost_fault_ns, cost_evict_ns, cost_copy_ps;
    uint64_t cost_seen_ns, cost_seen_bytes;
    int cost_pinned;
    /* asynchronous flushes queued so far (under the lock), and the most of them known to be done
     * (a drain that started after them returned): blocks' flush_ticket refer to these */
    uint64_t flushes_queued, flushes_settled;
    /* with one device, flushes_queued when the last launch was queued: stream order runs them
     * before it, so a sync that saw that launch done settles them (launch.h) */
    uint64_t flushes_before_launch;
    uint64_t drains; /* waits for every queued copy (directory.h, adsm__drain_all; the tests read it) */

    const struct adsm__backend_vtbl *be;
    void *be_ctx; /* device 0's context (the explicit path, modules and single-device code use it) */
    /* every device the runtime drives, all of one backend (emu: ADSM_EMU_DEVICES processes);
     * directory.h keeps which of them holds a current copy of each unit */
    unsigned ndev;
    void *dev_ctx[ADSM__MAX_DEVICES];
    adsm_device_stats dev_stats[ADSM__MAX_DEVICES]; /* atomics */
    /* several devices: bytes of the objects each device holds, and the clock of their last uses
     * (capacity.h; device_used then counts adsm_dev_alloc buffers, device 0's); under lock */
    size_t dev_bytes[ADSM__MAX_DEVICES];
    uint64_t lru_clock;
    uint64_t dev_done_seq[ADSM__MAX_DEVICES]; /* launches on each device up to this one are known
                                                  finished (capacity.h waited for them); under lock */
    uint64_t objects_dealt; /* shared objects given an affinity by ADSM_AFFINITY_BLOCK so far */
    uint8_t dev_lost; /* devices found lost, when there are several (atomic): reported once at a
                         sync, then left alone; the others keep working (directory.h) */
    uint8_t dev_loss_reported; /* those of them a sync has reported (atomic): a loss found by an
                                  allocation or a launch is still the next sync's to report */
    int release_dev; /* during a launch's release: its device, where flushes go (-1 otherwise:
                        rolling's evictions go to each object's home device) */
    const struct adsm__protocol_vtbl *proto;

    int copy_gen;        /* bumped (and woken) each time a busy unit is done; futex word */
    int copy_waiters;    /* threads waiting on copy_gen (runtime lock held to change or read it) */
    uint64_t generation; /* bumped at each initialisation: a call that waited without a use can
                            tell whether the runtime it started with is still there */
    int users;           /* calls (and fault handlers) using the runtime now; futex word: shutdown
                            waits for it to reach 0 before tearing anything down */
    uint64_t launch_seq; /* last launch issued */
    uint64_t dev_last_launch[ADSM__MAX_DEVICES]; /* the last launch sent to each device */
    size_t typed_objects; /* live objects with a declared type (translate.h) */
    size_t typed_bytes;   /* the bytes they hold (whether a patch kernel pays: translate.h) */
    uint64_t reach_marks; /* walks for what a launch reaches so far (translate.h, adsm__reach) */
    size_t safe_objects;  /* live adsm_safe_alloc objects (their device address is their own) */
    uintptr_t xlate_fault; /* cuda: the patch kernel's fault record, a device buffer (adsm's device
                              address), once the kernel is ready (translate.h); 0: staged passes */
    int xlate_patch_refused; /* the patch kernel could not be readied: passes stay staged */
    /* the first error a translation back to host addresses found after a kernel (translate.h),
       reported again by the next adsm_sync; ADSM_OK when none */
    adsm_result translate_error;
    char translate_message[512];
    adsm__stats stats;
    adsm__filler fill;   /* brings device data into protected host pages (copy.h) */
    adsm__tracer trace;  /* ADSM_TRACE's event buffer (trace.h); events NULL when not tracing */
    adsm__kernel_image *kernel_images; /* stb_ds map: single-source kernels NVRTC compiled, per
                                          architecture, kept for the life of the process (another GPU
                                          of the same generation or a new adsm_init does not compile
                                          them again); under lock */
    adsm__source_image *source_images; /* stb_ds string map: the same for adsm_module_load_source */
    void **io_bounce;    /* stb_ds array: idle I/O bounce buffers, reused (io.h); under lock */
    struct adsm__xlate_stage_buf *xlate_stages; /* stb_ds array: the translation's staging buffers,
                                               page-locked once and kept (translate.h); under lock */
    struct adsm__object **through; /* stb_ds array: objects kernels wrote, to bring home before the
                                      next call or sync (ADSM_WRITE_THROUGH, directory.h); under lock */
    struct adsm__object **home_at_sync; /* stb_ds array: small outputs of the kernels since the last
                                           sync that it brings home (protocol.h); under lock */
    struct adsm__object **twins; /* stb_ds array: objects a sync brought home Dirty beside a twin of
                                    their bytes (protocol.h); under lock */
    int bringing_home;   /* a sync is bringing small outputs home: no CPU read, no habit learnt */
    int send_source_always; /* tests: adsm_memcpy sends a Dirty source of any size first (memops.h) */
    struct adsm__object **batch_sends; /* stb_ds array: batch's objects to send at a call, kept
                                          for reuse (protocol_batch.h); under rt->launch_mutex */
    adsm__protection protection; /* how block states become page protection (protection.h) */
    struct sigaction prev_segv, prev_bus; /* handlers adsm passes foreign faults to (fault.h) */
    int handler_installed, bus_installed;
    int decode_as_read; /* tests: every SIGSEGV is decoded as a read, as gVisor's ptrace platform
                           reports them (fault.h, adsm__checked_is_write) */
} adsm__runtime;

static adsm__runtime adsm__rt = {
    .init_mutex = PTHREAD_MUTEX_INITIALIZER, .launch_mutex = PTHREAD_MUTEX_INITIALIZER,
    .fill = {.procmem = {.fd = -1}}, .protection = {.uffd = -1}};

ADSM__PRIVATE int adsm__ready(void) { return ADSM__LOAD(&adsm__rt.state) == ADSM__RT_READY; }
ADSM__PRIVATE int adsm__in_forked_child(void) { return ADSM__LOAD(&adsm__rt.state) == ADSM__RT_FORKED; }

/* Why adsm cannot start in a program whose libc it cannot reach through dlsym. */
#define ADSM__NO_DLSYM_TEXT                                                                           \
    "cannot find libc's sigaction with dlsym: a fully static program (linked with -static) cannot " \
    "use adsm, whose fault handler and emulated device need libc's own sigaction; link dynamically " \
    "(the default), or define ADSM_NO_INTERPOSE_SIGNALS"

/* What a forked child is told, from a call or (signal-safe) from the fault handler. */
#define ADSM__FORKED_TEXT                                                                              \
    "this process is a fork of one where adsm was running: adsm's threads and devices stayed with " \
    "the parent, so a forked child may only exec or _exit (the parent's data is untouched)"

/* ---- uses of the runtime -------------------------------------------------------------------
 * Every public call, and the fault handler, holds a use from its first look at the runtime to its
 * return. adsm_shutdown marks the runtime off (later calls behave as after shutdown) and waits
 * for the uses in flight before it frees anything, so a call racing with it either finishes
 * first or sees it shut down, never freed state. Signal-safe: atomics and a futex wake. */
static __thread int adsm__tls_uses; /* uses this thread holds (calls nest) */

ADSM__PRIVATE void adsm__use_begin(void) {
    adsm__tls_uses++;
    __atomic_add_fetch(&adsm__rt.users, 1, __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST); /* pairs with shutdown's: it sees us, or we see it off */
}

ADSM__PRIVATE void adsm__use_end(void) {
    adsm__tls_uses--;
    if (__atomic_sub_fetch(&adsm__rt.users, 1, __ATOMIC_SEQ_CST) != 0) return;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (adsm__ready()) return; /* nobody waits: no system call on the common path */
    int saved_errno = errno;
    adsm__futex_wake_all(&adsm__rt.users);
    errno = saved_errno;
}

/* Lets go of this thread's uses while it waits for something shutdown holds (initialisation);
 * returns how many to take back with adsm__uses_take. */
ADSM__PRIVATE int adsm__uses_drop(void) {
    int held = adsm__tls_uses;
    while (adsm__tls_uses > 0) adsm__use_end();
    return held;
}

ADSM__PRIVATE void adsm__uses_take(int held) {
    while (held-- > 0) adsm__use_begin();
}

/* Shutdown, runtime already marked off: waits until no call but the caller's own uses it. */
ADSM__PRIVATE void adsm__await_no_users(void) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST); /* after marking the runtime off */
    for (;;) {
        int n = __atomic_load_n(&adsm__rt.users, __ATOMIC_SEQ_CST);
        if (n <= adsm__tls_uses) return;
        adsm__futex_wait(&adsm__rt.users, n);
    }
}

/* Whether [a, a + n) misses adsm's address reservation entirely (always, before initialisation).
 * Signal-safe. */
ADSM__PRIVATE int adsm__outside_reservation(const adsm__runtime *rt, uintptr_t a, size_t n) {
    return rt->base == 0 || a >= rt->base + 2 * rt->half || a + n <= rt->base;
}

/* um and hmm objects lie outside the reservation, in the driver's or the kernel's memory: once
 * given back, a fault there is the program's use after adsm_free, which the fault handler can name
 * only if it knows the range. The last ADSM__FREED_OUTSIDE are kept; an older one dies as any
 * fault outside adsm's memory does. Normal context, with or without the runtime lock (a free
 * gives memory back without it): each call claims its slot atomically. */
ADSM__PRIVATE void adsm__note_freed_outside(adsm__runtime *rt, uintptr_t start, size_t span) {
    unsigned i = __atomic_fetch_add(&rt->freed_outside_next, 1, __ATOMIC_RELAXED) % ADSM__FREED_OUTSIDE;
    ADSM__STORE(&rt->freed_outside[i].end, (uintptr_t)0); /* a reader meanwhile matches nothing */
    ADSM__STORE(&rt->freed_outside[i].start, start);
    ADSM__STORE(&rt->freed_outside[i].end, start + span);
}

/* A new um or hmm object at [start, start + span): what it covers of freed ones is live again
 * (the driver or the kernel hands the addresses out anew). Normal context. */
ADSM__PRIVATE void adsm__forget_freed_outside(adsm__runtime *rt, uintptr_t start, size_t span) {
    for (unsigned i = 0; i < ADSM__FREED_OUTSIDE; i++)
        if (ADSM__LOAD(&rt->freed_outside[i].start) < start + span && ADSM__LOAD(&rt->freed_outside[i].end) > start)
            ADSM__STORE(&rt->freed_outside[i].end, (uintptr_t)0);
}

/* Whether a lies in one of those ranges. Signal-safe. */
ADSM__PRIVATE int adsm__freed_outside(const adsm__runtime *rt, uintptr_t a) {
    for (unsigned i = 0; i < ADSM__FREED_OUTSIDE; i++)
        if (a >= ADSM__LOAD(&rt->freed_outside[i].start) && a < ADSM__LOAD(&rt->freed_outside[i].end)) return 1;
    return 0;
}

/* Whether messages of this level are shown (ADSM_LOG; warnings and errors before it is read).
 * Signal-safe: the fault handler decides with it before it writes. */
ADSM__PRIVATE int adsm__logs(adsm_log_level level) {
    adsm_log_level limit = adsm__rt.cfg.log_level ? adsm__rt.cfg.log_level : ADSM_LOG_WARN;
    return level <= limit;
}

/* Normal context (a preparer thread included): the line is composed in a local buffer and written
 * with one write(2), not through stdio. A thread adsm makes wait (a preparer, a copy worker) may
 * log while the thread it serves sits in the fault handler, interrupted inside the program's own
 * fprintf(stderr, ...): stdio's lock on stderr would then never be let go. One write also keeps
 * lines from several threads whole. */
ADSM__PRIVATE void adsm__log(adsm_log_level level, const char *fmt, ...) {
    static const char *names[] = {"", "error", "warn", "info", "debug"};
    if (!adsm__logs(level)) return;
    char msg[600], line[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(line, sizeof line, "adsm %s: %s\n", names[level], msg);
    adsm__write_stderr(line);
}

#endif /* ADSM__RUNTIME_INCLUDED */
