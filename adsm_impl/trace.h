/* adsm_impl/trace.h -- ADSM_TRACE: a timeline of what adsm did, in the Chrome trace-event JSON
 * format that Perfetto (ui.perfetto.dev) and chrome://tracing open.
 *
 * Events: CPU faults, fetches into host pages, copies to and from the device and between devices,
 * evictions, kernel runs on the devices, I/O pieces, making and freeing objects, each with its
 * address and bytes (a kernel: its launch number), one named track per thread (the program's
 * threads, the copy engines, the host-page preparers) and one per device and kernel stream, so
 * that the spans on a track nest, as Perfetto requires. Recording runs in any context, the
 * SIGSEGV handler included: one atomic add claims a slot in a buffer mapped at initialisation,
 * nothing allocates or locks; when the buffer is full, events are dropped and counted. The file
 * is written at adsm_shutdown, or at exit for a program that ends without it (lifecycle.h), in
 * normal context. */
#ifndef ADSM__TRACE_INCLUDED
#define ADSM__TRACE_INCLUDED

#include "common.h"
#include "os.h"

enum {
    ADSM__TR_FAULT_READ,
    ADSM__TR_FAULT_WRITE,
    ADSM__TR_FETCH,  /* device data into host pages (a fault's, an I/O call's, a sync's) */
    ADSM__TR_H2D,    /* a copy to the device (flush at a call, eviction, explicit copy) */
    ADSM__TR_D2H,    /* a copy from the device */
    ADSM__TR_EVICT,  /* rolling decides to evict a unit (instant) */
    ADSM__TR_KERNEL, /* a kernel on the device, as the device timed it */
    ADSM__TR_IO,     /* one system call of adsm_read and friends */
    ADSM__TR_ALLOC,  /* adsm_alloc / adsm_safe_alloc: making an object (its pages page-locked on cuda) */
    ADSM__TR_FREE,   /* adsm_free: waiting for its users, its copies, and giving its memory back */
    ADSM__TR_D2D,    /* a copy from one device's memory to another's */
    /* the parts of making and freeing an object (cuda's cost on a GPU: the third GPU run found
     * 0.6-1.1 ms per 1 MiB object, without saying where): its host pages made inside its alloc
     * span, or at its first use (inside the fault or call that first used it, on the preparer's
     * track: host_pages.h); its device memory inside alloc; the rest inside its free span */
    ADSM__TR_HUGE_PAGES,  /* an object's host pages made: the alias collapsed into 2 MiB pages, or its own
                             pages populated on several threads (prepare.h) */
    ADSM__TR_PAGE_LOCK,   /* the host pages page-locked with the driver */
    ADSM__TR_VIEW_MAP,    /* the program's view mapped onto the alias's pages ahead */
    ADSM__TR_DEV_MEMORY,  /* device memory given to or taken from an object */
    ADSM__TR_PAGE_UNLOCK, /* the host pages unlocked and given back */
    /* the program's calls into adsm around its kernels: the CPU's cost of a launch (binding,
     * flushes queued, protection, translation), and of a sync (waiting, then the protocol's
     * acquire), so a trace shows the time between a step's faults and its kernels */
    ADSM__TR_CALL,   /* adsm_launch / ADSM_CALL, from entry to return */
    ADSM__TR_SYNC,   /* adsm_sync, from entry to return */
    /* one protection change the protocol made (mprotect, or the userfaultfd engine's ioctl) over
     * `bytes`: its cost grows with the page-table entries it changes, 4 KiB or 2 MiB ones, and is
     * otherwise hidden inside the call, sync or fault around it */
    ADSM__TR_PROTECT,
    ADSM__TR_NAME,   /* names the calling thread's track: addr is a string literal */
    ADSM__TR_KINDS
};

static const char *const adsm__trace_names[ADSM__TR_KINDS] = {
    "fault (read)", "fault (write)", "fetch", "copy to device", "copy from device", "evict", "kernel", "I/O",
    "alloc", "free", "copy between devices", "host pages: made", "host pages: page-lock",
    "host pages: view mapped",
    "device memory", "free: page-unlock", "call", "sync", "protection change", ""};

#define ADSM__TRACE_EVENTS ((size_t)1 << 20) /* 32 MiB of events; beyond that, dropped and counted */
/* Kernels: a track per device and kernel stream, ADSM__TRACE_DEVICE_TID + device * 32 + stream */
#define ADSM__TRACE_DEVICE_TID 999000
#define ADSM__TRACE_STREAMS 32
#define ADSM__TRACE_DEVICES 8

ADSM__PRIVATE int32_t adsm__trace_kernel_tid(unsigned device, unsigned stream) {
    return ADSM__TRACE_DEVICE_TID + (int32_t)((device % ADSM__TRACE_DEVICES) * ADSM__TRACE_STREAMS +
                                              stream % ADSM__TRACE_STREAMS);
}

/* Set around a copy the runtime makes from one device's memory to another's through a backend's
 * host-to-device verb (directory.h, emu): the copy's span is then labelled as between devices. */
static __thread int adsm__tls_copy_between_devices;

typedef struct adsm__trace_event {
    uint64_t t0, t1; /* CLOCK_MONOTONIC ns; equal for an instant */
    uint64_t addr, bytes;
    int32_t tid;
    uint32_t kind;
} adsm__trace_event;

typedef struct adsm__tracer {
    adsm__trace_event *events; /* NULL: not tracing */
    uint64_t next;             /* slots claimed so far (atomic); past ADSM__TRACE_EVENTS: dropped */
    pid_t pid;                 /* the process tracing (a forked child that exits writes nothing) */
    char path[512];
} adsm__tracer;

static __thread int32_t adsm__tls_tid;

ADSM__PRIVATE int32_t adsm__trace_tid(void) {
    if (!adsm__tls_tid) adsm__tls_tid = (int32_t)syscall(SYS_gettid);
    return adsm__tls_tid;
}

/* Records one event on the calling thread's track (tid 0), or on `tid`. Signal-safe. */
ADSM__PRIVATE void adsm__trace_on(adsm__tracer *t, int32_t tid, unsigned kind, uint64_t t0, uint64_t t1,
                                  uintptr_t addr, uint64_t bytes) {
    if (!t->events) return;
    uint64_t i = __atomic_fetch_add(&t->next, 1, __ATOMIC_RELAXED);
    if (i >= ADSM__TRACE_EVENTS) return;
    adsm__trace_event *e = &t->events[i];
    e->t0 = t0;
    e->t1 = t1 > t0 ? t1 : t0;
    e->addr = addr;
    e->bytes = bytes;
    e->tid = tid ? tid : adsm__trace_tid();
    e->kind = kind;
}

/* Names the calling thread's track (name: a string literal). Signal-safe. */
ADSM__PRIVATE void adsm__trace_name_track(adsm__tracer *t, const char *name) {
    adsm__trace_on(t, 0, ADSM__TR_NAME, adsm__now_ns(), 0, (uintptr_t)name, 0);
}

ADSM__PRIVATE void adsm__trace(adsm__tracer *t, unsigned kind, uint64_t t0, uintptr_t addr, uint64_t bytes) {
    if (t->events) adsm__trace_on(t, 0, kind, t0, adsm__now_ns(), addr, bytes);
}

/* At initialisation: ADSM_TRACE (or adsm_config.trace) names the file; "" means no trace. */
ADSM__PRIVATE int adsm__trace_open(adsm__tracer *t, const char *path) {
    memset(t, 0, sizeof *t);
    if (!path || !*path) return 0;
    if (strlen(path) >= sizeof t->path) return -1;
    void *p = mmap(NULL, ADSM__TRACE_EVENTS * sizeof(adsm__trace_event), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return -1;
    memcpy(t->path, path, strlen(path) + 1);
    t->events = (adsm__trace_event *)p;
    t->pid = getpid();
    adsm__trace_name_track(t, "program (first adsm call)");
    return 0;
}

ADSM__PRIVATE int adsm__trace_is_kernel_track(int32_t tid) {
    return tid >= ADSM__TRACE_DEVICE_TID && tid < ADSM__TRACE_DEVICE_TID + ADSM__TRACE_DEVICES * ADSM__TRACE_STREAMS;
}

/* The kernel tracks' names, for those that hold events (seen: one flag per track). */
ADSM__PRIVATE void adsm__trace_name_kernel_tracks(FILE *f, const unsigned char *seen) {
    for (int i = 0; i < ADSM__TRACE_DEVICES * ADSM__TRACE_STREAMS; i++) {
        if (!seen[i]) continue;
        fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":"
                   "\"device %d: kernels, stream %d\"}}",
                ADSM__TRACE_DEVICE_TID + i, i / ADSM__TRACE_STREAMS, i % ADSM__TRACE_STREAMS);
    }
}

ADSM__PRIVATE void adsm__trace_write_event(FILE *f, const adsm__trace_event *e, uint64_t origin, int first) {
    double ts = (double)(e->t0 - (e->t0 >= origin ? origin : e->t0)) / 1e3, dur = (double)(e->t1 - e->t0) / 1e3;
    if (!first) fputs(",\n", f);
    if (e->kind == ADSM__TR_NAME) {
        fprintf(f, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":\"%s\"}}", e->tid,
                (const char *)(uintptr_t)e->addr);
        return;
    }
    fprintf(f, "{\"ph\":\"%s\",\"name\":\"%s\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,", e->t1 > e->t0 ? "X" : "i",
            adsm__trace_names[e->kind], e->tid, ts);
    if (e->t1 > e->t0) fprintf(f, "\"dur\":%.3f,", dur);
    else fputs("\"s\":\"t\",", f);
    if (e->kind == ADSM__TR_KERNEL) /* a kernel's event carries its launch number in `bytes` */
        fprintf(f, "\"args\":{\"launch\":%llu}}", (unsigned long long)e->bytes);
    else
        fprintf(f, "\"args\":{\"address\":\"0x%llx\",\"bytes\":%llu}}", (unsigned long long)e->addr,
                (unsigned long long)e->bytes);
}

/* Names the tracks of the threads that recorded events without naming themselves: the program's
 * threads past the first (adsm's own threads name themselves as they start). Normal context. */
ADSM__PRIVATE void adsm__trace_name_program_tracks(FILE *f, const adsm__trace_event *ev, uint64_t n) {
    typedef struct { int32_t key; char value; } adsm__trace_track; /* value: named */
    adsm__trace_track *tracks = NULL; /* stb_ds map: tid -> whether named */
    for (uint64_t i = 0; i < n; i++) {
        if (adsm__trace_is_kernel_track(ev[i].tid)) continue;
        ptrdiff_t at = stbds_hmgeti(tracks, ev[i].tid);
        if (at < 0) stbds_hmput(tracks, ev[i].tid, ev[i].kind == ADSM__TR_NAME);
        else if (ev[i].kind == ADSM__TR_NAME) tracks[at].value = 1;
    }
    for (ptrdiff_t i = 0; i < stbds_hmlen(tracks); i++)
        if (!tracks[i].value)
            fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":"
                       "\"program thread %d\"}}",
                    tracks[i].key, tracks[i].key);
    stbds_hmfree(tracks);
}

/* Writes the file from the events recorded so far. Returns 0, or the errno of a file that could
 * not be opened; *dropped says how many events did not fit. Normal context. */
ADSM__PRIVATE int adsm__trace_write(const adsm__tracer *t, uint64_t *dropped) {
    uint64_t next = __atomic_load_n(&t->next, __ATOMIC_ACQUIRE);
    uint64_t n = ADSM__MIN(next, (uint64_t)ADSM__TRACE_EVENTS), origin = UINT64_MAX;
    unsigned char seen[ADSM__TRACE_DEVICES * ADSM__TRACE_STREAMS] = {0};
    *dropped = next - n;
    for (uint64_t i = 0; i < n; i++) {
        if (t->events[i].kind != ADSM__TR_NAME && t->events[i].t0 < origin) origin = t->events[i].t0;
        if (adsm__trace_is_kernel_track(t->events[i].tid)) seen[t->events[i].tid - ADSM__TRACE_DEVICE_TID] = 1;
    }
    FILE *f = fopen(t->path, "we");
    if (!f) return errno;
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", f);
    for (uint64_t i = 0; i < n; i++) adsm__trace_write_event(f, &t->events[i], origin, i == 0);
    adsm__trace_name_kernel_tracks(f, seen);
    adsm__trace_name_program_tracks(f, t->events, n);
    /* origin_ns: CLOCK_MONOTONIC at ts 0, so a program's own timestamps can be set beside the events */
    fprintf(f, "\n],\"otherData\":{\"dropped_events\":%llu,\"origin_ns\":%llu}}\n", (unsigned long long)*dropped,
            (unsigned long long)(n ? origin : 0));
    /* a full disk fails the writes or the last flush: the file is cut short, so say so */
    int err = ferror(f) ? (errno ? errno : EIO) : 0;
    if (fclose(f) != 0 && !err) err = errno ? errno : EIO;
    return err;
}

/* Whether the trace file can be written later (0, or why not): the file itself where it exists,
 * else its directory. Checked at initialisation so a mistyped path is said at once, not only
 * when the run is over. Normal context. */
ADSM__PRIVATE int adsm__trace_writable(const char *path) {
    if (access(path, W_OK) == 0) return 0;
    if (errno != ENOENT) return errno;
    char dir[sizeof ((adsm__tracer *)0)->path];
    size_t n = strnlen(path, sizeof dir - 1); /* fits: adsm__trace_open refused longer paths */
    memcpy(dir, path, n);
    dir[n] = 0;
    char *slash = strrchr(dir, '/');
    if (!slash) memcpy(dir, ".", 2);
    else if (slash == dir) dir[1] = 0; /* a file at the root */
    else *slash = 0;
    return access(dir, W_OK | X_OK) == 0 ? 0 : errno;
}

/* At shutdown, every recording thread stopped: writes the file and lets the buffer go. Returns 0,
 * or the errno of a file that could not be opened; *dropped says how many events did not fit.
 * The caller reports both (the logger lives a layer up, in runtime.h). */
ADSM__PRIVATE int adsm__trace_close(adsm__tracer *t, uint64_t *dropped) {
    *dropped = 0;
    if (!t->events) return 0;
    int err = adsm__trace_write(t, dropped);
    munmap(t->events, ADSM__TRACE_EVENTS * sizeof(adsm__trace_event));
    t->events = NULL;
    return err;
}

#endif /* ADSM__TRACE_INCLUDED */
