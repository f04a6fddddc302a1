/* adsm_impl/io.h -- bulk memory and I/O on shared objects: adsm_memset, adsm_memcpy, adsm_read,
 * adsm_write, adsm_pread, adsm_pwrite, adsm_fread, adsm_fwrite, and their opt-in interposition.
 *
 * Ranges are walked piece by piece: a piece never crosses a tracking unit (block or object) of a
 * shared object; memory outside shared objects is plain memory. For each shared piece the
 * protocol hears about the access first, then the bytes move with the runtime lock held, so no
 * eviction races the write and the runtime never faults on its own accesses. Whole units are
 * handled where their valid copy is (memset of an Invalid block on the device only, memcpy between
 * device-valid blocks device to device).
 *
 * System calls never see shared memory: the kernel would return EFAULT on a protected page
 * instead of a fault adsm could resolve, and a half-done read cannot be restarted. Data goes
 * through a bounce buffer in pieces of about a block, so a large read into a rolling object
 * keeps eager eviction busy while the next piece is read. Return values and errno are the libc
 * call's. All of this runs in normal thread context. */
#ifndef ADSM__IO_INCLUDED
#define ADSM__IO_INCLUDED

#include <dlfcn.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

/* The part of [a, a + n) that lies in one tracking unit of o (o may be NULL: plain memory up to
 * the next object). Sets *block and *whole (the piece covers every byte of the unit). */
ADSM__PRIVATE size_t adsm__piece(adsm__runtime *rt, adsm__object *o, uintptr_t a, size_t n, size_t *block,
                                 int *whole) {
    *block = 0;
    *whole = 0;
    if (!o) {
        adsm__tree_node *next = adsm__tree_ceil(&rt->objects, a);
        return next && next->start - a < n ? next->start - a : n;
    }
    size_t first, count;
    *block = adsm__tree_block_index(&o->node, a, rt->cfg.block_shift);
    adsm__unit_of(rt, o, *block, &first, &count);
    uintptr_t ustart = o->host + (first << rt->cfg.block_shift);
    uintptr_t uend = ustart + adsm__blocks_len(first, count, rt->cfg.block_shift, o->span);
    size_t len = ADSM__MIN(n, uend - a);
    uintptr_t data_end = ADSM__MIN(uend, o->host + o->size);
    *whole = a == ustart && a + len >= data_end;
    return len;
}

ADSM__PRIVATE adsm_result adsm__access_failed(void) {
    return adsm__fail(ADSM_ERROR_SYSTEM, "making shared memory accessible failed: %s", strerror(errno));
}

/* memset of one whole unit that is valid on the device (Invalid or ReadOnly) runs there only, and
 * the unit is Invalid afterwards: no byte moves, and the host pages are not touched (zeroing a
 * fresh output before kernels write it, a GPU program's habit, cost a host fill of every page,
 * first touches included). The CPU's next read fetches it. The waits and the memset run with the
 * unit busy and the runtime lock let go (protocol.h); o stays valid (its free waits). Returns 1
 * when done, 0 when the caller should take the CPU path, -1 on error; the lock is held again
 * either way. */
ADSM__PRIVATE int adsm__memset_unit_in_place(adsm__runtime *rt, adsm__object *o, uintptr_t a, int v, size_t len) {
    size_t block = adsm__tree_block_index(&o->node, a, rt->cfg.block_shift), first, count;
    int state = o->blocks[block].state;
    size_t data = ADSM__MIN(len, o->host + o->size - a);
    uintptr_t dev = o->dev + (a - o->host);
    if (state == ADSM__DIRTY) return 0;
    adsm__unit_of(rt, o, block, &first, &count);
    adsm__block *head = &o->blocks[first];
    int rc = 1;
    adsm__busy_begin(rt, o, head, 1);
    if (rt->be->wait(rt->be_ctx, o->writer_seq) != 0) rc = 0; /* device lost: the CPU path still works */
    else if (rt->be->dev_memset(rt->be_ctx, dev, v, data) != 0) rc = -1;
    adsm__busy_end(rt, o, head, 1);
    if (rc == 1 && state == ADSM__READONLY && adsm__set_state(rt, o, first, count, ADSM__INVALID) != 0) rc = -1;
    return rc;
}

ADSM__PRIVATE adsm_result adsm__memset_impl(adsm__runtime *rt, uintptr_t d, int v, size_t n) {
    while (n > 0) {
        size_t block;
        int whole, done = 0;
        adsm__lock(&rt->lock);
        adsm__object *o = adsm__object_of(adsm__tree_find(&rt->objects, d));
        size_t len = adsm__piece(rt, o, d, n, &block, &whole);
        int access = 0;
        if (o && adsm__unit_busy(rt, o, block)) access = adsm__await_copies(rt); /* not while it is copied */
        else if (o && whole && adsm__tracking(rt) && rt->ndev == 1) /* several: the directory's way (CPU) */
            done = adsm__memset_unit_in_place(rt, o, d, v, len);
        if (o && done == 0 && access == 0) access = rt->proto->on_access(rt, o, block, 1, whole);
        if (access == ADSM__AGAIN) { /* the lock was let go: look everything up again */
            adsm__unlock(&rt->lock);
            continue;
        }
        if (access < 0) done = -1;
        if (done < 0) {
            adsm__unlock(&rt->lock);
            return adsm__access_failed();
        }
        if (o && done == 0) memset((void *)d, v, len);
        adsm__unlock(&rt->lock);
        if (!o) memset((void *)d, v, len); /* program memory: outside the lock, as plain memset */
        d += len;
        n -= len;
    }
    return ADSM_OK;
}

/* Whether every block of [s, s + len) in os is valid on the device (Invalid or ReadOnly). */
ADSM__PRIVATE int adsm__device_valid(adsm__runtime *rt, adsm__object *os, uintptr_t s, size_t len) {
    unsigned shift = rt->cfg.block_shift;
    size_t first = adsm__tree_block_index(&os->node, s, shift);
    size_t last = adsm__tree_block_index(&os->node, s + len - 1, shift);
    for (size_t b = first; b <= last; b++)
        if (os->blocks[b].state == ADSM__DIRTY) return 0;
    return 1;
}

/* A whole destination unit (d, len) that is valid on the device, filled from a source range that
 * lies in one object and is valid on the device, is copied device to device; the destination
 * becomes Invalid. 1 done, 0 not applicable, -1 error. */
ADSM__PRIVATE int adsm__memcpy_on_device(adsm__runtime *rt, adsm__object *od, uintptr_t d, uintptr_t s, size_t len) {
    unsigned shift = rt->cfg.block_shift;
    adsm__object *os = adsm__object_of(adsm__tree_find(&rt->objects, s));
    size_t dblock = adsm__tree_block_index(&od->node, d, shift), first, count;
    if (!os || s + len > os->host + os->span || od->blocks[dblock].state == ADSM__DIRTY ||
        !adsm__device_valid(rt, os, s, len))
        return 0;
    size_t data = ADSM__MIN(len, od->host + od->size - d);
    adsm__unit_of(rt, od, dblock, &first, &count);
    /* the wait and the copy run with the destination unit busy and the lock let go; the source
     * object is pinned against a free meanwhile */
    int rc = 1;
    os->busy_units++;
    adsm__busy_begin(rt, od, &od->blocks[first], 1);
    if (rt->be->wait(rt->be_ctx, ADSM__MAX(od->writer_seq, os->writer_seq)) != 0) rc = 0; /* device lost */
    else if (rt->be->dev_copy(rt->be_ctx, od->dev + (d - od->host), os->dev + (s - os->host), data) != 0) rc = -1;
    adsm__busy_end(rt, od, &od->blocks[first], 1);
    os->busy_units--;
    if (rc != 1) return rc;
    ADSM__ADD(&rt->stats.d2d_bytes, data);
    ADSM__ADD(&rt->stats.d2d_copies, 1);
    return adsm__set_state(rt, od, first, count, ADSM__INVALID) == 0 ? 1 : -1;
}

/* Copies n bytes from s to d, either of which may be shared. The destination will be written up
 * to cover_end (>= d + n; larger when an I/O transfer continues in a later call): an Invalid unit
 * that lies entirely below cover_end is not fetched. Under lazy (no eager eviction) such a unit
 * may be left half-written when this call ends; *unfinished_end then gives the end of its data,
 * so a transfer that stops early can fetch the rest (adsm__repair_tail). */
ADSM__PRIVATE adsm_result adsm__copy_range(adsm__runtime *rt, uintptr_t d, uintptr_t s, size_t n, uintptr_t cover_end,
                                           uintptr_t *unfinished_end) {
    while (n > 0) {
        size_t dblock, sblock;
        int dwhole, swhole, done = 0;
        adsm__lock(&rt->lock);
        adsm__object *od = adsm__object_of(adsm__tree_find(&rt->objects, d));
        adsm__object *os = adsm__object_of(adsm__tree_find(&rt->objects, s));
        size_t dunit = adsm__piece(rt, od, d, cover_end - d, &dblock, &dwhole);
        size_t dlen = ADSM__MIN(dunit, n);
        if (od && adsm__unit_busy(rt, od, dblock)) { /* a copy of the destination runs: wait for it */
            adsm__await_copies(rt);
            adsm__unlock(&rt->lock);
            continue;
        }
        if (od && dwhole && dlen < dunit && rt->proto->eager) dwhole = 0; /* rolling: never leave a unit half-filled */
        if (od && os && dwhole && dlen == dunit && adsm__tracking(rt) && rt->ndev == 1)
            done = adsm__memcpy_on_device(rt, od, d, s, dlen);
        size_t len = done ? dlen : adsm__piece(rt, os, s, dlen, &sblock, &swhole);
        if (od && done == 0 && dwhole && dlen < dunit && od->blocks[dblock].state == ADSM__INVALID && unfinished_end)
            *unfinished_end = ADSM__MIN(d + dunit, od->host + od->size);
        int access = 0;
        if (done == 0 && os) access = rt->proto->on_access(rt, os, sblock, 0, 0);
        if (done == 0 && od && access == 0) access = rt->proto->on_access(rt, od, dblock, 1, dwhole);
        if (access == ADSM__AGAIN) { /* the lock was let go: look everything up again */
            adsm__unlock(&rt->lock);
            continue;
        }
        if (access < 0) done = -1;
        if (done < 0) {
            adsm__unlock(&rt->lock);
            return adsm__access_failed();
        }
        int shared = od || os;
        if (shared && done == 0) memmove((void *)d, (const void *)s, len);
        adsm__unlock(&rt->lock);
        if (!shared) memmove((void *)d, (const void *)s, len);
        if (unfinished_end && d + len >= *unfinished_end) *unfinished_end = 0; /* unit completed */
        d += len;
        s += len;
        n -= len;
    }
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__memcpy_impl(adsm__runtime *rt, uintptr_t d, uintptr_t s, size_t n) {
    return adsm__copy_range(rt, d, s, n, d + n, NULL);
}

/* ---- device buffers (adsm_dev_alloc) in adsm_memset / adsm_memcpy ---------------------------- */
/* The CPU cannot touch a device buffer, so bulk memory on one is done by the device, ordered
 * after every launch issued so far like the explicit copies; shared or plain memory on the other
 * side of a copy goes through a bounce buffer. */
enum { ADSM__NOT_DEVICE_BUFFER = 0, ADSM__IN_DEVICE_BUFFER = 1, ADSM__ACROSS_DEVICE_BUFFER = 2 };

/* Whether [a, a + n) lies in one device buffer, touches one partly, or none; *dev: the device
 * the buffer lives on. */
ADSM__PRIVATE int adsm__device_buffer_kind(adsm__runtime *rt, uintptr_t a, size_t n, unsigned *dev) {
    uintptr_t d = adsm__dev_in(rt, a);
    adsm__lock(&rt->lock);
    adsm__tree_node *hit = adsm__tree_find(&rt->safe_dev, d);
    if (!hit) hit = adsm__tree_ceil(&rt->safe_dev, d);
    adsm__object *o = hit ? ADSM__CONTAINER_OF(hit, adsm__object, dev_node) : NULL;
    int kind = ADSM__NOT_DEVICE_BUFFER;
    if (o && o->device_only && o->dev < d + n)
        kind = d >= o->dev && n <= o->size - (d - o->dev) ? ADSM__IN_DEVICE_BUFFER : ADSM__ACROSS_DEVICE_BUFFER;
    *dev = o ? o->home_dev : 0;
    adsm__unlock(&rt->lock);
    return kind;
}

ADSM__PRIVATE adsm_result adsm__device_wait_all(adsm__runtime *rt, const char *fn) {
    if (adsm__wait_all(rt) != 0) return adsm__fail(ADSM_ERROR_DEVICE_LOST, "%s: the device is gone", fn);
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__memset_device_buffer(adsm__runtime *rt, uintptr_t d, int v, size_t n, unsigned dev) {
    adsm_result r = adsm__device_wait_all(rt, "adsm_memset");
    if (r == ADSM_OK && rt->be->dev_memset(rt->dev_ctx[dev], adsm__dev_in(rt, d), v, n) != 0)
        r = adsm__fail(ADSM_ERROR_SYSTEM, "adsm_memset: the device-side memset failed");
    return r;
}

/* A copy involving device buffers, piece by piece through a bounce buffer: the side that is a
 * device buffer (ddev / sdev: its device, -1 when that side is host memory, shared or plain,
 * which adsm__memcpy_impl handles in any state) moves with the backend's copies. Between buffers
 * of two devices this is the device-to-device copy of the explicit path. */
ADSM__PRIVATE adsm_result adsm__memcpy_via_bounce(adsm__runtime *rt, uintptr_t d, uintptr_t s, size_t n, int ddev,
                                                  int sdev) {
    size_t piece = ADSM__MIN(n, (size_t)1 << 20);
    unsigned char *bounce = (unsigned char *)malloc(piece);
    if (!bounce) return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "adsm_memcpy: out of memory");
    adsm_result r = adsm__device_wait_all(rt, "adsm_memcpy");
    for (size_t done = 0; r == ADSM_OK && done < n; done += piece) {
        size_t len = ADSM__MIN(piece, n - done);
        if (sdev < 0) r = adsm__memcpy_impl(rt, (uintptr_t)bounce, s + done, len);
        else if (rt->be->from_device(rt->dev_ctx[sdev], (uintptr_t)bounce, adsm__dev_in(rt, s + done), len) != 0)
            r = adsm__fail(ADSM_ERROR_SYSTEM, "adsm_memcpy: the copy from device %d failed", sdev);
        if (r != ADSM_OK) break;
        if (ddev < 0) r = adsm__memcpy_impl(rt, d + done, (uintptr_t)bounce, len);
        else if (rt->be->to_device(rt->dev_ctx[ddev], adsm__dev_in(rt, d + done), (uintptr_t)bounce, len, 0,
                                   ADSM__EVERY_LAUNCH) != 0)
            r = adsm__fail(ADSM_ERROR_SYSTEM, "adsm_memcpy: the copy to device %d failed", ddev);
    }
    if (r == ADSM_OK && sdev >= 0 && ddev >= 0) adsm__count_to_device(rt, (unsigned)ddev, 1, n);
    free(bounce);
    return r;
}

/* adsm_memcpy when either side may be a device buffer; *handled says whether one was. */
ADSM__PRIVATE adsm_result adsm__memcpy_device_buffers(adsm__runtime *rt, uintptr_t d, uintptr_t s, size_t n,
                                                      int *handled) {
    unsigned ddev, sdev;
    int dk = adsm__device_buffer_kind(rt, d, n, &ddev), sk = adsm__device_buffer_kind(rt, s, n, &sdev);
    *handled = dk != ADSM__NOT_DEVICE_BUFFER || sk != ADSM__NOT_DEVICE_BUFFER;
    if (!*handled) return ADSM_OK;
    if (dk == ADSM__ACROSS_DEVICE_BUFFER || sk == ADSM__ACROSS_DEVICE_BUFFER)
        return adsm__fail(ADSM_ERROR_INVALID_VALUE,
                          "adsm_memcpy(%p, %p, %zu): a range runs across the edge of a device buffer", (void *)d,
                          (void *)s, n);
    if (dk != sk || ddev != sdev) /* host memory on one side, or buffers of two devices */
        return adsm__memcpy_via_bounce(rt, d, s, n, dk == ADSM__IN_DEVICE_BUFFER ? (int)ddev : -1,
                                       sk == ADSM__IN_DEVICE_BUFFER ? (int)sdev : -1);
    adsm_result r = adsm__device_wait_all(rt, "adsm_memcpy");
    if (r == ADSM_OK && rt->be->dev_copy(rt->dev_ctx[ddev], adsm__dev_in(rt, d), adsm__dev_in(rt, s), n) != 0)
        r = adsm__fail(ADSM_ERROR_SYSTEM, "adsm_memcpy: the device-to-device copy failed");
    return r;
}

/* A transfer stopped at `from` inside a unit it had claimed whole (not fetched): the bytes it did
 * not write come from the device, as a fetch would have brought them. */
ADSM__PRIVATE void adsm__repair_tail(adsm__runtime *rt, uintptr_t from, uintptr_t to) {
    adsm__lock(&rt->lock);
    adsm__object *o = adsm__object_of(adsm__tree_find(&rt->objects, from));
    if (o && to <= o->host + o->size) /* the claimed unit is Dirty: writable; its writer holds it */
        (void)adsm__fetch_range(rt, o->writer_dev, from, o->dev + (from - o->host), to - from, PROT_READ | PROT_WRITE);
    adsm__unlock(&rt->lock);
}

/* ---- system calls ------------------------------------------------------------------------- */
/* Whether [p, p + n) touches a live shared object. Never initialises the runtime: before
 * adsm_init nothing is shared. */
ADSM__PRIVATE int adsm__touches_shared(const void *p, size_t n) {
    adsm__runtime *rt = &adsm__rt;
    uintptr_t a = (uintptr_t)p;
    if (n == 0 || !adsm__ready() || adsm__tls_passthrough || adsm__tls_lock_depth > 0) return 0;
    if (n > UINTPTR_MAX - a) n = UINTPTR_MAX - a; /* a wrapping range still starts where it starts */
    if (adsm__outside_reservation(rt, a, n)) return 0;
    adsm__lock(&rt->lock);
    adsm__tree_node *hit = adsm__tree_find(&rt->objects, a);
    if (!hit) hit = adsm__tree_ceil(&rt->objects, a);
    int touches = hit && hit->start < a + n;
    adsm__unlock(&rt->lock);
    return touches;
}

/* The libc functions. With ADSM_INTERPOSE_IO this translation unit defines read, write, ... so
 * adsm must reach the next definition (libc's) through dlsym. */
#ifdef ADSM_INTERPOSE_IO
#define ADSM__REAL(type, name)                                                          \
    static type adsm__real_##name##_fn;                                                 \
    ADSM__PRIVATE type adsm__real_##name(void) {                                        \
        type f = __atomic_load_n(&adsm__real_##name##_fn, __ATOMIC_ACQUIRE);            \
        if (!f) {                                                                       \
            *(void **)&f = dlsym(RTLD_NEXT, #name);                                     \
            __atomic_store_n(&adsm__real_##name##_fn, f, __ATOMIC_RELEASE);             \
        }                                                                               \
        return f;                                                                       \
    }
#else
#define ADSM__REAL(type, name) \
    ADSM__PRIVATE type adsm__real_##name(void) { return name; }
#endif

typedef ssize_t (*adsm__read_fn)(int, void *, size_t);
typedef ssize_t (*adsm__write_fn)(int, const void *, size_t);
typedef ssize_t (*adsm__pread_fn)(int, void *, size_t, off_t);
typedef ssize_t (*adsm__pwrite_fn)(int, const void *, size_t, off_t);
typedef size_t (*adsm__fread_fn)(void *, size_t, size_t, FILE *);
typedef size_t (*adsm__fwrite_fn)(const void *, size_t, size_t, FILE *);
ADSM__REAL(adsm__read_fn, read)
ADSM__REAL(adsm__write_fn, write)
ADSM__REAL(adsm__pread_fn, pread)
ADSM__REAL(adsm__pwrite_fn, pwrite)
ADSM__REAL(adsm__fread_fn, fread)
ADSM__REAL(adsm__fwrite_fn, fwrite)

/* Bytes per system call: at least a block, so eviction of the blocks just filled overlaps the
 * next call and a whole block is filled by one piece; never tiny (4 KiB blocks) nor huge. */
ADSM__PRIVATE size_t adsm__io_piece(const adsm__runtime *rt) {
    return ADSM__MIN(ADSM__MAX(rt->cfg.block_size, (size_t)1 << 20), (size_t)32 << 20);
}

/* Ends a piece on a block boundary when that still leaves a block's worth, so pieces cover
 * whole blocks (which then need no fetch) instead of splitting them. */
ADSM__PRIVATE size_t adsm__align_piece(const adsm__runtime *rt, uintptr_t at, size_t want, size_t remaining) {
    if (want == remaining) return want;
    uintptr_t end = ADSM__ALIGN_DOWN(at + want, rt->cfg.block_size);
    return end > at ? end - at : want;
}

/* ---- bounce buffers ------------------------------------------------------------------------ */
/* One bounce buffer per I/O call in flight, kept for the next call instead of allocated each
 * time. A page longer than a piece: the system call sees the buffer at the same offset within a
 * page as the program's own buffer, so O_DIRECT's alignment rules give what libc would on it. */
typedef struct adsm__bounce {
    unsigned char *base;
    size_t size;
    int pooled;
} adsm__bounce;

/* Bytes of a pooled bounce buffer: one piece, and a page to shift it to the program's offset. */
ADSM__PRIVATE size_t adsm__bounce_pooled_size(const adsm__runtime *rt) { return adsm__io_piece(rt) + rt->page; }

ADSM__PRIVATE int adsm__bounce_take(adsm__runtime *rt, size_t need, adsm__bounce *b) {
    b->pooled = need <= adsm__io_piece(rt);
    b->size = b->pooled ? adsm__bounce_pooled_size(rt) : ADSM__ALIGN_UP(need, rt->page) + rt->page;
    b->base = NULL;
    if (b->pooled) {
        adsm__lock(&rt->lock);
        if (stbds_arrlen(rt->io_bounce) > 0) b->base = (unsigned char *)stbds_arrpop(rt->io_bounce);
        adsm__unlock(&rt->lock);
        if (b->base) return 0;
    }
    void *p = mmap(NULL, b->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return -1;
    b->base = (unsigned char *)p;
    return 0;
}

ADSM__PRIVATE void adsm__bounce_give(adsm__runtime *rt, adsm__bounce *b) {
    if (b->pooled) {
        adsm__lock(&rt->lock);
        int kept = adsm__ready() && (stbds_arrput(rt->io_bounce, b->base), 1);
        adsm__unlock(&rt->lock);
        if (kept) return;
    }
    munmap(b->base, b->size);
}

/* At shutdown: every idle bounce buffer goes. */
ADSM__PRIVATE void adsm__bounce_release_all(adsm__runtime *rt) {
    for (ptrdiff_t i = 0; i < stbds_arrlen(rt->io_bounce); i++) munmap(rt->io_bounce[i], adsm__bounce_pooled_size(rt));
    stbds_arrfree(rt->io_bounce);
}

/* Sockets that keep message boundaries (SOCK_SEQPACKET, SOCK_DGRAM): one read returns one message
 * and drops what does not fit, one write sends one message, so the call cannot be split. */
ADSM__PRIVATE int adsm__keeps_message_boundaries(int fd) {
    int type = 0, saved = errno;
    socklen_t len = sizeof type;
    int message = getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 &&
                  (type == SOCK_SEQPACKET || type == SOCK_DGRAM || type == SOCK_RDM);
    errno = saved;
    return message;
}

/* One transfer in pieces through a bounce buffer. `syscall_piece` moves up to `want` bytes
 * between the bounce buffer and the file, returning the count or -1 with errno. Reading: the
 * piece is copied into shared memory after the call; writing: before. Stops after a short
 * piece, as one big call would have returned there. On pipes and sockets later pieces are only
 * read when data is already waiting, so adsm never blocks where one read() would not. */
typedef struct adsm__xfer {
    int fd;
    int reading;
    int stream_like; /* not a regular file: FIONREAD decides whether to go on */
    int whole;       /* one system call for the whole count (message sockets) */
    ssize_t (*syscall_piece)(struct adsm__xfer *x, void *bounce, size_t want, size_t done);
    void *ctx;
    off_t offset;
} adsm__xfer;

/* The system call of one piece may block for as long as the other end likes (a pipe, a socket):
 * it runs without this thread's uses of the runtime, so adsm_shutdown in another thread does not
 * wait for it. The call only touches the bounce buffer, which is this call's own. Returns the
 * call's result, or ADSM__SHUT_DOWN_MEANWHILE: the shared memory this call was for is gone (the
 * bytes just read are lost, as they would be for a buffer freed during a read). */
#define ADSM__SHUT_DOWN_MEANWHILE ((ssize_t)-2)

ADSM__PRIVATE ssize_t adsm__blocking_piece(adsm__xfer *x, void *bounce, size_t want, size_t done) {
    uint64_t generation = ADSM__LOAD(&adsm__rt.generation);
    int held = adsm__uses_drop();
    uint64_t t0 = adsm__now_ns();
    ssize_t got = x->syscall_piece(x, bounce, want, done);
    int saved_errno = errno;
    adsm__trace(&adsm__rt.trace, ADSM__TR_IO, t0, (uintptr_t)bounce, got > 0 ? (uint64_t)got : 0);
    adsm__uses_take(held);
    errno = saved_errno;
    if (!adsm__ready() || ADSM__LOAD(&adsm__rt.generation) != generation) return ADSM__SHUT_DOWN_MEANWHILE;
    return got;
}

ADSM__PRIVATE ssize_t adsm__transfer(adsm__xfer *x, uintptr_t buf, size_t n) {
    adsm__runtime *rt = &adsm__rt;
    int saved_errno = errno, final_errno = errno;
    size_t piece = x->whole ? n : adsm__io_piece(rt), done = 0;
    uintptr_t unfinished = 0;
    adsm__bounce b;
    if (adsm__bounce_take(rt, piece, &b) != 0) {
        errno = ENOMEM;
        return -1;
    }
    while (done < n) {
        unsigned char *bounce = b.base + (buf + done) % rt->page; /* the program's alignment */
        size_t want = ADSM__MIN(n - done, piece);
        if (x->reading && done > 0 && x->stream_like) {
            int waiting = 0;
            if (ioctl(x->fd, FIONREAD, &waiting) != 0) x->stream_like = 0; /* a device like /dev/zero */
            else if (waiting <= 0) break;
            else want = ADSM__MIN(want, (size_t)waiting);
        }
        if (!x->whole) want = adsm__align_piece(rt, buf + done, want, n - done);
        if (!x->reading && adsm__memcpy_impl(rt, (uintptr_t)bounce, buf + done, want) != ADSM_OK) break;
        errno = saved_errno;
        ssize_t got = adsm__blocking_piece(x, bounce, want, done);
        if (got == ADSM__SHUT_DOWN_MEANWHILE) {
            adsm__bounce_give(rt, &b);
            errno = ECANCELED;
            return done > 0 ? (ssize_t)done : -1;
        }
        /* a short or failed piece ends the call: keep the errno it left (stdio reports errors
         * only through errno and ferror) */
        if (got < 0 || (size_t)got < want) final_errno = errno;
        if (got < 0) {
            if (done == 0) {
                adsm__bounce_give(rt, &b);
                return -1; /* errno from the call itself */
            }
            break;
        }
        if (x->reading && got > 0 &&
            adsm__copy_range(rt, buf + done, (uintptr_t)bounce, (size_t)got, buf + n, &unfinished) != ADSM_OK) {
            adsm__bounce_give(rt, &b);
            errno = EFAULT;
            return done > 0 ? (ssize_t)done : -1;
        }
        done += (size_t)got;
        if ((size_t)got < want) break;
    }
    if (unfinished > buf + done) adsm__repair_tail(rt, buf + done, unfinished);
    adsm__bounce_give(rt, &b);
    errno = final_errno;
    return (ssize_t)done;
}

ADSM__PRIVATE int adsm__is_stream_like(int fd) {
    struct stat st;
    int saved = errno;
    int regular = fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode));
    errno = saved;
    return !regular;
}

ADSM__PRIVATE ssize_t adsm__piece_read(adsm__xfer *x, void *b, size_t want, size_t done) {
    (void)done;
    return adsm__real_read()(x->fd, b, want);
}
ADSM__PRIVATE ssize_t adsm__piece_write(adsm__xfer *x, void *b, size_t want, size_t done) {
    (void)done;
    return adsm__real_write()(x->fd, b, want);
}
ADSM__PRIVATE ssize_t adsm__piece_pread(adsm__xfer *x, void *b, size_t want, size_t done) {
    return adsm__real_pread()(x->fd, b, want, x->offset + (off_t)done);
}
ADSM__PRIVATE ssize_t adsm__piece_pwrite(adsm__xfer *x, void *b, size_t want, size_t done) {
    return adsm__real_pwrite()(x->fd, b, want, x->offset + (off_t)done);
}
ADSM__PRIVATE ssize_t adsm__piece_fread(adsm__xfer *x, void *b, size_t want, size_t done) {
    (void)done;
    return (ssize_t)adsm__real_fread()(b, 1, want, (FILE *)x->ctx);
}
ADSM__PRIVATE ssize_t adsm__piece_fwrite(adsm__xfer *x, void *b, size_t want, size_t done) {
    (void)done;
    return (ssize_t)adsm__real_fwrite()(b, 1, want, (FILE *)x->ctx);
}

#include <sys/uio.h>

/* Whether the page at `a` can be read, asked of the kernel (no fault): the program may have
 * mapped its own memory over a hole in adsm's reservation. */
ADSM__PRIVATE int adsm__page_readable(uintptr_t a) {
    char byte;
    struct iovec local = {&byte, 1}, remote = {(void *)a, 1};
    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == 1;
}

/* How much of [a, a + n) the program may access, counted from a: shared objects (to the end of
 * their pages), memory outside adsm's reservation, and readable pages in its holes count; the
 * first inaccessible page ends it, as it ends what the kernel copies in a system call. */
ADSM__PRIVATE size_t adsm__valid_prefix(adsm__runtime *rt, uintptr_t a, size_t n) {
    uintptr_t pos = a, end = a + n, lo = rt->base, hi = rt->base + 2 * rt->half;
    adsm__lock(&rt->lock);
    while (pos < end) {
        if (pos < lo || pos >= hi) { /* program memory: up to the reservation, if it comes */
            pos = pos < lo ? ADSM__MIN(end, lo) : end;
            continue;
        }
        adsm__object *o = adsm__object_of(adsm__tree_find(&rt->objects, pos));
        if (o) {
            pos = ADSM__MIN(end, o->host + o->span);
            continue;
        }
        if (!adsm__page_readable(pos)) break;
        pos = ADSM__MIN(end, ADSM__ALIGN_DOWN(pos, rt->page) + rt->page);
    }
    adsm__unlock(&rt->lock);
    return pos - a;
}

ADSM__PRIVATE ssize_t adsm__fd_transfer(int fd, uintptr_t buf, size_t n, int reading, off_t offset,
                                        ssize_t (*piece)(adsm__xfer *, void *, size_t, size_t)) {
    adsm__xfer x;
    memset(&x, 0, sizeof x);
    x.fd = fd;
    x.reading = reading;
    x.stream_like = reading && adsm__is_stream_like(fd);
    x.whole = adsm__keeps_message_boundaries(fd);
    x.syscall_piece = piece;
    x.offset = offset;
    if (n > UINTPTR_MAX - buf) {
        errno = EFAULT; /* the kernel refuses a range that wraps the address space */
        return -1;
    }
    if (n > (size_t)SSIZE_MAX) n = (size_t)SSIZE_MAX; /* what the kernel would transfer at most */
    size_t valid = adsm__valid_prefix(&adsm__rt, buf, n);
    if (valid == 0) {
        errno = EFAULT;
        return -1;
    }
    return adsm__transfer(&x, buf, valid); /* the kernel stops at the first bad page too */
}

ADSM__PRIVATE ssize_t adsm__read_unguarded(int fd, void *buf, size_t count) {
    if (!adsm__touches_shared(buf, count)) return adsm__real_read()(fd, buf, count);
    return adsm__fd_transfer(fd, (uintptr_t)buf, count, 1, 0, adsm__piece_read);
}

ADSM__PRIVATE ssize_t adsm__write_unguarded(int fd, const void *buf, size_t count) {
    if (!adsm__touches_shared(buf, count)) return adsm__real_write()(fd, buf, count);
    return adsm__fd_transfer(fd, (uintptr_t)buf, count, 0, 0, adsm__piece_write);
}

ADSM__PRIVATE ssize_t adsm__pread_unguarded(int fd, void *buf, size_t count, off_t offset) {
    if (!adsm__touches_shared(buf, count)) return adsm__real_pread()(fd, buf, count, offset);
    return adsm__fd_transfer(fd, (uintptr_t)buf, count, 1, offset, adsm__piece_pread);
}

ADSM__PRIVATE ssize_t adsm__pwrite_unguarded(int fd, const void *buf, size_t count, off_t offset) {
    if (!adsm__touches_shared(buf, count)) return adsm__real_pwrite()(fd, buf, count, offset);
    return adsm__fd_transfer(fd, (uintptr_t)buf, count, 0, offset, adsm__piece_pwrite);
}

/* fread/fwrite hold the stream's lock across the pieces, so another thread's I/O on the same
 * stream cannot land in the middle of one call. */
ADSM__PRIVATE size_t adsm__stream_transfer(void *ptr, size_t size, size_t nmemb, FILE *stream, int reading) {
    size_t bytes;
    if (size == 0 || nmemb == 0) return 0;
    if (__builtin_mul_overflow(size, nmemb, &bytes)) {
        errno = EOVERFLOW;
        return 0;
    }
    adsm__xfer x;
    memset(&x, 0, sizeof x);
    x.fd = -1;
    x.reading = reading;
    x.syscall_piece = reading ? adsm__piece_fread : adsm__piece_fwrite;
    x.ctx = stream;
    flockfile(stream);
    ssize_t done = adsm__transfer(&x, (uintptr_t)ptr, bytes);
    funlockfile(stream);
    return done > 0 ? (size_t)done / size : 0;
}

/* The bytes an fread/fwrite touches, for deciding whether adsm is involved: an overflowing
 * product is adsm's to refuse (EOVERFLOW) when it starts in shared memory. */
ADSM__PRIVATE int adsm__stream_touches_shared(const void *ptr, size_t size, size_t nmemb) {
    size_t bytes;
    if (__builtin_mul_overflow(size, nmemb, &bytes)) return adsm__touches_shared(ptr, 1);
    if (bytes > UINTPTR_MAX - (uintptr_t)ptr) bytes = UINTPTR_MAX - (uintptr_t)ptr;
    return adsm__touches_shared(ptr, bytes ? bytes : 1);
}

ADSM__PRIVATE size_t adsm__fread_unguarded(void *ptr, size_t size, size_t nmemb, FILE *stream) {
    if (!adsm__stream_touches_shared(ptr, size, nmemb)) return adsm__real_fread()(ptr, size, nmemb, stream);
    return adsm__stream_transfer(ptr, size, nmemb, stream, 1);
}

ADSM__PRIVATE size_t adsm__fwrite_unguarded(const void *ptr, size_t size, size_t nmemb, FILE *stream) {
    if (!adsm__stream_touches_shared(ptr, size, nmemb)) return adsm__real_fwrite()(ptr, size, nmemb, stream);
    return adsm__stream_transfer((void *)ptr, size, nmemb, stream, 0);
}

/* ---- opt-in interposition of the libc names --------------------------------------------- */
#ifdef ADSM_INTERPOSE_IO
ssize_t read(int fd, void *buf, size_t count) { return adsm_read(fd, buf, count); }
ssize_t write(int fd, const void *buf, size_t count) { return adsm_write(fd, buf, count); }
ssize_t pread(int fd, void *buf, size_t count, off_t offset) { return adsm_pread(fd, buf, count, offset); }
ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) { return adsm_pwrite(fd, buf, count, offset); }
size_t fread(void *ptr, size_t size, size_t nmemb, FILE *stream) { return adsm_fread(ptr, size, nmemb, stream); }
size_t fwrite(const void *ptr, size_t size, size_t nmemb, FILE *stream) {
    return adsm_fwrite(ptr, size, nmemb, stream);
}
/* _FORTIFY_SOURCE builds call these checked entry points instead of the plain names. */
ssize_t __read_chk(int fd, void *buf, size_t count, size_t buflen);
ssize_t __read_chk(int fd, void *buf, size_t count, size_t buflen) {
    if (count > buflen) { /* libc's checked version reports the overflow */
        ssize_t (*real)(int, void *, size_t, size_t);
        *(void **)&real = dlsym(RTLD_NEXT, "__read_chk");
        return real(fd, buf, count, buflen);
    }
    return adsm_read(fd, buf, count);
}
size_t __fread_chk(void *ptr, size_t ptrlen, size_t size, size_t nmemb, FILE *stream);
size_t __fread_chk(void *ptr, size_t ptrlen, size_t size, size_t nmemb, FILE *stream) {
    size_t bytes;
    if (__builtin_mul_overflow(size, nmemb, &bytes) || bytes > ptrlen) {
        size_t (*real)(void *, size_t, size_t, size_t, FILE *);
        *(void **)&real = dlsym(RTLD_NEXT, "__fread_chk");
        return real(ptr, ptrlen, size, nmemb, stream);
    }
    return adsm_fread(ptr, size, nmemb, stream);
}
#endif /* ADSM_INTERPOSE_IO */

#ifdef ADSM_INTERPOSE_MEM
/* memset/memcpy on shared memory go through adsm; everything else, and every call adsm makes
 * itself (lock held, DMA thread, kernel workers, the device process), goes to libc's. The
 * compiler may inline calls it can see (small constant sizes): those never reach here. */
typedef void *(*adsm__memcpy_fn)(void *, const void *, size_t);
typedef void *(*adsm__memset_fn)(void *, int, size_t);
static adsm__memcpy_fn adsm__real_memcpy_fn;
static adsm__memset_fn adsm__real_memset_fn;

ADSM__PRIVATE int adsm__mem_is_plain(uintptr_t a, size_t n) {
    adsm__runtime *rt = &adsm__rt;
    return n == 0 || adsm__tls_passthrough || adsm__tls_lock_depth > 0 || !adsm__ready() ||
           adsm__outside_reservation(rt, a, n);
}

/* Used only while dlsym itself is finding libc's versions (it might copy memory too). */
static __thread int adsm__tls_resolving;

ADSM__PRIVATE void *adsm__resolve_next(const char *name) {
    adsm__tls_resolving = 1;
    void *f = dlsym(RTLD_NEXT, name);
    adsm__tls_resolving = 0;
    return f;
}

void *memcpy(void *d, const void *s, size_t n) ADSM__NOEXCEPT {
    if (adsm__mem_is_plain((uintptr_t)d, n) && adsm__mem_is_plain((uintptr_t)s, n)) {
        adsm__memcpy_fn f = __atomic_load_n(&adsm__real_memcpy_fn, __ATOMIC_ACQUIRE);
        if (!f && adsm__tls_resolving) {
            volatile unsigned char *dst = (volatile unsigned char *)d;
            const volatile unsigned char *src = (const volatile unsigned char *)s;
            for (size_t i = 0; i < n; i++) dst[i] = src[i];
            return d;
        }
        if (!f) {
            *(void **)&f = adsm__resolve_next("memcpy");
            __atomic_store_n(&adsm__real_memcpy_fn, f, __ATOMIC_RELEASE);
        }
        return f(d, s, n);
    }
    adsm_memcpy(d, s, n);
    return d;
}

void *memset(void *d, int v, size_t n) ADSM__NOEXCEPT {
    if (adsm__mem_is_plain((uintptr_t)d, n)) {
        adsm__memset_fn f = __atomic_load_n(&adsm__real_memset_fn, __ATOMIC_ACQUIRE);
        if (!f && adsm__tls_resolving) {
            volatile unsigned char *dst = (volatile unsigned char *)d;
            for (size_t i = 0; i < n; i++) dst[i] = (unsigned char)v;
            return d;
        }
        if (!f) {
            *(void **)&f = adsm__resolve_next("memset");
            __atomic_store_n(&adsm__real_memset_fn, f, __ATOMIC_RELEASE);
        }
        return f(d, v, n);
    }
    adsm_memset(d, v, n);
    return d;
}
#endif /* ADSM_INTERPOSE_MEM */

#endif /* ADSM__IO_INCLUDED */
