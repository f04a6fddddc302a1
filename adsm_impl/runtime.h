/* adsm_impl/runtime.h -- the one runtime struct that holds all of adsm's state.
 *
 * adsm keeps no global state outside `adsm__rt`. Fields are guarded by `lock` (a futex lock the
 * SIGSEGV handler may take) unless marked otherwise; counters are atomics. This file only
 * declares; it runs nowhere by itself. */
#ifndef ADSM__RUNTIME_INCLUDED
#define ADSM__RUNTIME_INCLUDED

struct adsm__backend_vtbl;
struct adsm__protocol_vtbl;

enum { ADSM__RT_OFF = 0, ADSM__RT_READY = 1 };

typedef struct adsm__runtime {
    int state;                  /* ADSM__RT_*, read atomically by the fault handler */
    pthread_mutex_t init_mutex; /* serialises adsm_init / adsm_shutdown */
    pthread_mutex_t launch_mutex; /* serialises launches: release may let the runtime lock go */
    adsm__settings cfg;
    size_t page;

    /* One address reservation: [base, base + half) holds same-address objects and every device
     * address; [base + half, base + 2 * half) holds the host side of "safe" objects. */
    uintptr_t base;
    size_t half;
    intptr_t dev_delta; /* device address the program sees = adsm's device address + dev_delta (cuda
                           when the device range could not be put at the host addresses; else 0) */
    adsm__arena va_shared, va_safe;

    adsm__lock_t lock;
    adsm__tree objects;  /* host ranges of live objects */
    adsm__tree safe_dev; /* device ranges of objects not at their host address (safe, device-only) */
    adsm__tree host_buffers; /* adsm_host_alloc memory (adsm__host_buffer nodes) */
    adsm__object *first_object, *last_object;
    size_t nobjects, object_bytes, device_used;
    size_t tracked_blocks; /* blocks of live shared objects: the most that can ever be Dirty */

    adsm__block *fifo_head, *fifo_tail; /* dirty units, oldest first */
    size_t fifo_len;
    /* adaptive rolling size (protocol.h): the learned limit (0 until it first changes), the count
     * of eager evictions so far (the clock blocks' evicted_at refers to) and its value at the last
     * kernel call; since that call, the evictions regretted and the units newly made Dirty */
    size_t rolling_limit;
    uint64_t evict_clock, epoch_clock, epoch_regrets, epoch_touched;

    const struct adsm__backend_vtbl *be;
    void *be_ctx;
    const struct adsm__protocol_vtbl *proto;

    int copy_gen;        /* bumped (and woken) each time a busy unit is done; futex word */
    uint64_t launch_seq; /* last launch issued */
    adsm__stats stats;
    adsm__filler fill;   /* brings device data into protected host pages (copy.h) */
    void **io_bounce;    /* stb_ds array: idle I/O bounce buffers, reused (io.h); under lock */
    size_t io_bounce_size; /* bytes of each, a page more than an I/O piece */
    struct sigaction prev_segv;
    int handler_installed;
} adsm__runtime;

static adsm__runtime adsm__rt = {
    .init_mutex = PTHREAD_MUTEX_INITIALIZER, .launch_mutex = PTHREAD_MUTEX_INITIALIZER, .fill = {.procmem_fd = -1}};

ADSM__PRIVATE int adsm__ready(void) { return ADSM__LOAD(&adsm__rt.state) == ADSM__RT_READY; }

/* Whether [a, a + n) misses adsm's address reservation entirely (always, before initialisation).
 * Signal-safe. */
ADSM__PRIVATE int adsm__outside_reservation(const adsm__runtime *rt, uintptr_t a, size_t n) {
    return rt->base == 0 || a >= rt->base + 2 * rt->half || a + n <= rt->base;
}

ADSM__PRIVATE void adsm__log(adsm_log_level level, const char *fmt, ...) {
    static const char *names[] = {"", "error", "warn", "info", "debug"};
    adsm_log_level limit = adsm__rt.cfg.log_level ? adsm__rt.cfg.log_level : ADSM_LOG_WARN;
    if (level > limit) return;
    char line[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "adsm %s: %s\n", names[level], line);
}

#endif /* ADSM__RUNTIME_INCLUDED */
