/* tests/io_common.h -- helpers shared by the I/O and bulk-memory tests (test_io.c,
 * test_io_interpose.c, test_memops.c).
 *
 * Include after "adsm.h", <criterion/criterion.h> and "tests/protocol_common.h". Included by
 * exactly one translation unit per test binary, so it may define static helpers. Every call is
 * made twice: by the reference (libc on malloc'd memory) and by the function under test (on
 * shared memory), from identical inputs; outcomes (return value, errno, file position, feof,
 * ferror) and bytes must be identical. Assertion messages start with io_ctx, which each scenario
 * sets to say what ran. */
#ifndef TESTS_IO_COMMON_H
#define TESTS_IO_COMMON_H

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <sys/types.h>
#include <unistd.h>

static char io_ctx[300] = "";
#define CTX(...) snprintf(io_ctx, sizeof io_ctx, __VA_ARGS__)

/* errno before every call: libc leaves it alone on success, so must adsm */
#define ERRNO_SENTINEL 4242

/* ---- deterministic data ---------------------------------------------------------------------- */
static uint64_t rng_state = 88172645463325252ull;
static inline void rng_seed(uint64_t s) { rng_state = s ? s : 1; }
static inline uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static inline size_t rng_below(size_t n) { return n ? (size_t)(rng_next() % n) : 0; }

static inline unsigned char *xmalloc(size_t n) {
    unsigned char *p = malloc(n ? n : 1);
    cr_assert_not_null(p, "malloc(%zu)", n);
    return p;
}

static inline unsigned char *random_bytes(size_t n) {
    unsigned char *p = xmalloc(n);
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(rng_next() >> 29);
    return p;
}

/* The int32 pattern base + i that k_fill writes, as bytes. */
static inline void pattern_bytes(unsigned char *dst, size_t size, int32_t base) {
    for (size_t i = 0; i < size / sizeof(int32_t); i++) {
        int32_t v = base + (int32_t)i;
        memcpy(dst + i * sizeof v, &v, sizeof v);
    }
}

/* want and got (n bytes) are equal; reports the first difference. */
static inline void expect_same_bytes(const void *want_, const void *got_, size_t n, const char *what) {
    const unsigned char *want = want_, *got = got_;
    if (memcmp(want, got, n) == 0) return;
    size_t i = 0;
    while (want[i] == got[i]) i++;
    cr_assert_fail("%s: %s differ first at byte %zu of %zu: expected 0x%02x, got 0x%02x", io_ctx, what, i, n,
                   want[i], got[i]);
}

/* ---- files, pipes ---------------------------------------------------------------------------- */
static inline void write_all_fd(int fd, const void *data, size_t n) {
    const unsigned char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        cr_assert_gt(w, 0, "%s: write_all_fd: %s", io_ctx, strerror(errno));
        p += w;
        n -= (size_t)w;
    }
}

/* A temporary file (mkstemp under $TEST_TMPDIR or /tmp, unlinked at once) holding n bytes of
 * data; its O_RDWR descriptor, at offset 0. */
static inline int temp_file(const void *data, size_t n) {
    const char *dir = getenv("TEST_TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    char path[4096];
    snprintf(path, sizeof path, "%s/adsm_io_XXXXXX", dir);
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0, "mkstemp(%s): %s", path, strerror(errno));
    unlink(path);
    if (n) write_all_fd(fd, data, n);
    cr_assert_eq(lseek(fd, 0, SEEK_SET), 0);
    return fd;
}

/* Whole contents of a regular file; its length in *len. */
static inline unsigned char *file_contents(int fd, size_t *len) {
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    unsigned char *p = xmalloc((size_t)st.st_size);
    size_t done = 0;
    while (done < (size_t)st.st_size) {
        ssize_t r = pread(fd, p + done, (size_t)st.st_size - done, (off_t)done);
        cr_assert_gt(r, 0, "%s: pread of the result file: %s", io_ctx, strerror(errno));
        done += (size_t)r;
    }
    *len = done;
    return p;
}

/* Everything waiting in a pipe, without blocking. */
static inline unsigned char *pipe_contents(int fd, size_t *len) {
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    size_t cap = 1 << 20, done = 0;
    unsigned char *p = xmalloc(cap);
    for (;;) {
        ssize_t r = read(fd, p + done, cap - done);
        if (r <= 0) break;
        done += (size_t)r;
        cr_assert_lt(done, cap);
    }
    fcntl(fd, F_SETFL, fl);
    *len = done;
    return p;
}

/* Fills a pipe until not one more byte fits. */
static inline void fill_pipe(int wfd) {
    static unsigned char junk[65536];
    int fl = fcntl(wfd, F_GETFL);
    fcntl(wfd, F_SETFL, fl | O_NONBLOCK);
    while (write(wfd, junk, sizeof junk) > 0) {
    }
    while (write(wfd, junk, 1) > 0) {
    }
    fcntl(wfd, F_SETFL, fl);
}

/* ---- signals ----------------------------------------------------------------------------------- */
static volatile sig_atomic_t alarms;
static void on_alarm(int sig) {
    (void)sig;
    alarms++;
}

/* SIGALRM to this thread every `ms` milliseconds until no_interrupt(), with a handler installed
 * WITHOUT SA_RESTART: a blocked read or write returns -1 EINTR. Every `ms`, not once: the call
 * under test may do work of its own before it blocks (a fetch from the device, slow under a
 * sanitizer on a loaded machine), and a single signal spent there would leave it blocked for
 * good (test_io_cuda under ASan timed out so in CI). To this thread, not the process: a signal
 * for the process may go to any thread that does not block it, the backends' among them. */
static timer_t interrupt_timer;
static int interrupt_timer_made;

static inline void set_interrupt_timer(long ms) {
    struct itimerspec it;
    memset(&it, 0, sizeof it);
    it.it_value.tv_sec = ms / 1000;
    it.it_value.tv_nsec = (ms % 1000) * 1000000;
    it.it_interval = it.it_value;
    cr_assert_eq(timer_settime(interrupt_timer, 0, &it, NULL), 0, "timer_settime: %s", strerror(errno));
}

static inline void interrupt_in(long ms) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    cr_assert_eq(sigaction(SIGALRM, &sa, NULL), 0);
    if (!interrupt_timer_made) {
        struct sigevent ev;
        memset(&ev, 0, sizeof ev);
        ev.sigev_notify = SIGEV_THREAD_ID;
        ev.sigev_signo = SIGALRM;
        ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
        cr_assert_eq(timer_create(CLOCK_MONOTONIC, &ev, &interrupt_timer), 0, "timer_create: %s", strerror(errno));
        interrupt_timer_made = 1;
    }
    set_interrupt_timer(ms);
}

static inline void no_interrupt(void) {
    if (interrupt_timer_made) set_interrupt_timer(0);
}

/* ---- threads ----------------------------------------------------------------------------------- */
/* Threads of this process. */
static inline int thread_count(void) {
    FILE *f = fopen("/proc/self/status", "r");
    cr_assert_not_null(f);
    char line[256];
    int n = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1) break;
    fclose(f);
    return n;
}

/* ---- memory next to a shared object -------------------------------------------------------- */
/* Whether [a, a + n) lies inside one inaccessible ("---p") mapping: the unused part of adsm's
 * address reservation. */
static inline int inside_reserved_gap(uintptr_t a, size_t n) {
    FILE *f = fopen("/proc/self/maps", "r");
    cr_assert_not_null(f);
    char line[512];
    int ok = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
        if (lo <= a && a + n <= hi) {
            ok = strcmp(perms, "---p") == 0;
            break;
        }
    }
    fclose(f);
    return ok;
}

/* Maps n bytes (page multiple) of plain read-write memory right after the shared object that
 * ends at `end` (the object's size must be a page multiple), so a buffer can run from the object
 * into unshared memory. The address must be free reserved space, not another object. Never
 * allocate shared objects after this; adsm_shutdown unmaps the whole reservation. */
static inline unsigned char *plain_memory_at(void *end, size_t n) {
    uintptr_t a = (uintptr_t)end;
    cr_assert_eq(adsm_block_state(end), 0, "%s: memory after the object is another object", io_ctx);
    cr_assert_eq(adsm_block_state((char *)end + n - 1), 0, "%s: memory after the object is another object", io_ctx);
    cr_assert(inside_reserved_gap(a, n), "%s: no free reserved space after the object at %p", io_ctx, end);
    void *p = mmap(end, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    cr_assert_eq(p, end, "mmap: %s", strerror(errno));
    return p;
}

/* ---- calls ----------------------------------------------------------------------------------- */
typedef enum { OP_READ, OP_PREAD, OP_FREAD, OP_WRITE, OP_PWRITE, OP_FWRITE } io_op;
static const char *const op_names[] = {"read", "pread", "fread", "write", "pwrite", "fwrite"};
static inline int op_input(io_op op) { return op <= OP_FREAD; }    /* file -> memory */
static inline int op_stream(io_op op) { return op == OP_FREAD || op == OP_FWRITE; }
static inline int op_positioned(io_op op) { return op == OP_PREAD || op == OP_PWRITE; }

typedef struct io_fns {
    const char *name;
    ssize_t (*read)(int, void *, size_t);
    ssize_t (*write)(int, const void *, size_t);
    ssize_t (*pread)(int, void *, size_t, off_t);
    ssize_t (*pwrite)(int, const void *, size_t, off_t);
    size_t (*fread)(void *, size_t, size_t, FILE *);
    size_t (*fwrite)(const void *, size_t, size_t, FILE *);
} io_fns;

/* One end of a call: a descriptor, and for fread/fwrite a stream on it. */
typedef struct io_end {
    int fd;
    FILE *f;
} io_end;

typedef struct io_outcome {
    long long ret;
    int err;
    long long pos; /* file position after the call (-1 where there is none) */
    int eof, error;
} io_outcome;

static inline io_outcome io_call(const io_fns *fns, io_op op, io_end *e, void *buf, size_t item, size_t nmemb,
                                 off_t off) {
    io_outcome o;
    memset(&o, 0, sizeof o);
    size_t count = item * nmemb;
    errno = ERRNO_SENTINEL;
    switch (op) {
    case OP_READ: o.ret = fns->read(e->fd, buf, count); break;
    case OP_PREAD: o.ret = fns->pread(e->fd, buf, count, off); break;
    case OP_FREAD: o.ret = (long long)fns->fread(buf, item, nmemb, e->f); break;
    case OP_WRITE: o.ret = fns->write(e->fd, buf, count); break;
    case OP_PWRITE: o.ret = fns->pwrite(e->fd, buf, count, off); break;
    case OP_FWRITE: o.ret = (long long)fns->fwrite(buf, item, nmemb, e->f); break;
    }
    o.err = errno;
    if (e->f) {
        o.pos = ftell(e->f);
        o.eof = feof(e->f) != 0;
        o.error = ferror(e->f) != 0;
    } else {
        o.pos = e->fd >= 0 ? (long long)lseek(e->fd, 0, SEEK_CUR) : -1;
    }
    return o;
}

static inline void expect_same_outcome(const io_outcome *want, const io_outcome *got) {
    cr_assert_eq(got->ret, want->ret, "%s: returned %lld, libc returned %lld", io_ctx, got->ret, want->ret);
    cr_assert_eq(got->err, want->err, "%s: errno %d (%s), libc left %d (%s)", io_ctx, got->err,
                 got->err == ERRNO_SENTINEL ? "untouched" : strerror(got->err), want->err,
                 want->err == ERRNO_SENTINEL ? "untouched" : strerror(want->err));
    cr_assert_eq(got->pos, want->pos, "%s: file position %lld, libc %lld", io_ctx, got->pos, want->pos);
    cr_assert_eq(got->eof, want->eof, "%s: feof %d, libc %d", io_ctx, got->eof, want->eof);
    cr_assert_eq(got->error, want->error, "%s: ferror %d, libc %d", io_ctx, got->error, want->error);
}

/* A regular file holding `content` (n bytes), ready for op at position fpos: read/write/fread/
 * fwrite start there; pread/pwrite get it as offset and the descriptor sits elsewhere (7), to
 * show they leave it alone. Streams are primed: three bytes before fpos go through the stdio
 * buffer first (fgetc / fputs), so the call must honour buffered state. */
static inline io_end file_end(io_op op, const void *content, size_t n, off_t fpos) {
    io_end e;
    e.fd = temp_file(content, n);
    e.f = NULL;
    if (op_positioned(op)) {
        cr_assert_eq(lseek(e.fd, 7, SEEK_SET), 7);
    } else if (!op_stream(op)) {
        cr_assert_eq(lseek(e.fd, fpos, SEEK_SET), fpos);
    } else {
        e.f = fdopen(e.fd, op == OP_FREAD ? "r" : "r+");
        cr_assert_not_null(e.f);
        if (fpos >= 3) {
            cr_assert_eq(fseek(e.f, fpos - 3, SEEK_SET), 0);
            if (op == OP_FREAD) {
                for (int i = 0; i < 3; i++) fgetc(e.f);
            } else {
                fputs("abc", e.f);
            }
        } else {
            cr_assert_eq(fseek(e.f, fpos, SEEK_SET), 0);
        }
    }
    return e;
}

static inline void end_close(io_end *e) {
    if (e->f) fclose(e->f);
    else if (e->fd >= 0) close(e->fd);
    e->f = NULL;
    e->fd = -1;
}

/* Closes a stream without flushing what it still buffers (it could only fail again). */
static inline void fpurge_and_close(io_end *e) {
    __fpurge(e->f);
    fclose(e->f);
    e->f = NULL;
    e->fd = -1;
}

/* After an output call: the two files hold the same bytes. */
static inline void expect_same_file(io_end *want, io_end *got) {
    if (want->f) cr_assert_eq(fflush(want->f), 0);
    if (got->f) cr_assert_eq(fflush(got->f), 0, "%s: fflush: %s", io_ctx, strerror(errno));
    size_t wl, gl;
    unsigned char *w = file_contents(want->fd, &wl), *g = file_contents(got->fd, &gl);
    cr_assert_eq(gl, wl, "%s: file is %zu bytes, libc's %zu", io_ctx, gl, wl);
    expect_same_bytes(w, g, wl, "file contents");
    free(w);
    free(g);
}

/* ---- block states and bytes moved ------------------------------------------------------------ */
static inline int proto_is(const char *name) { return strcmp(adsm_protocol_name(), name) == 0; }

/* The d2h bytes a transfer of object bytes [a, b) should move, asserting every block's state
 * afterwards. The object (osize bytes) was in state `before` everywhere. `written`: the bytes
 * were stored into the object (read from a file); otherwise they were read from it (written to
 * a file). Rules: batch tracks nothing ('D', nothing moves). Stored bytes make their unit Dirty
 * and fetch an Invalid unit only when they cover part of it. Bytes read from an Invalid unit
 * fetch it and leave it ReadOnly. Lazy's unit is the object, rolling's one block. */
static inline size_t expect_transfer(const void *obj, size_t osize, size_t a, size_t b, int written, char before) {
    const unsigned char *o = obj;
    size_t bs = adsm_block_size(), page = (size_t)sysconf(_SC_PAGESIZE), d2h = 0;
    size_t span = (osize + page - 1) / page * page;
    size_t nblocks = (span + bs - 1) / bs;
    int batch = proto_is("batch"), lazy = proto_is("lazy");
    char lazy_state = before;
    if (lazy && b > a) {
        lazy_state = written ? 'D' : (before == 'I' ? 'R' : before);
        if (before == 'I' && !(written && a == 0 && b >= osize)) d2h = osize;
    }
    for (size_t k = 0; k < nblocks; k++) {
        size_t ks = k * bs, ke = ks + bs < osize ? ks + bs : osize;
        char want = before;
        if (batch) {
            want = 'D';
        } else if (lazy) {
            want = lazy_state;
        } else if (a < ke && b > ks && b > a) {
            int whole = a <= ks && b >= ke;
            if (written) {
                want = 'D';
                if (before == 'I' && !whole) d2h += ke - ks;
            } else if (before == 'I') {
                want = 'R';
                d2h += ke - ks;
            }
        }
        char got = adsm_block_state(o + ks);
        cr_assert_eq(got, want, "%s: block %zu of %zu (bytes [%zu, %zu) moved): state '%c', expected '%c'", io_ctx, k,
                     nblocks, a, b, got ? got : '0', want);
    }
    return batch ? 0 : d2h;
}

#define EXPECT_MOVED(h2d, d2h, d2d)                                                                              \
    do {                                                                                                         \
        adsm_stats s_ = stats();                                                                                 \
        cr_assert_eq(s_.h2d_bytes, (uint64_t)(h2d), "%s: h2d_bytes %llu, expected %llu", io_ctx,                \
                     (unsigned long long)s_.h2d_bytes, (unsigned long long)(h2d));                               \
        cr_assert_eq(s_.d2h_bytes, (uint64_t)(d2h), "%s: d2h_bytes %llu, expected %llu", io_ctx,                \
                     (unsigned long long)s_.d2h_bytes, (unsigned long long)(d2h));                               \
        cr_assert_eq(s_.d2d_bytes, (uint64_t)(d2d), "%s: d2d_bytes %llu, expected %llu", io_ctx,                \
                     (unsigned long long)s_.d2d_bytes, (unsigned long long)(d2d));                               \
    } while (0)

/* Every block of [p, p + size) is in state st (context in the message). */
static inline void expect_states(const void *p, size_t size, char st) {
    size_t bs = adsm_block_size();
    for (size_t off = 0; off < size; off += bs) {
        char got = adsm_block_state((const char *)p + off);
        cr_assert_eq(got, st, "%s: block at offset %zu: state '%c', expected '%c'", io_ctx, off, got ? got : '0', st);
    }
}

/* ---- comparing a call on shared memory with libc on plain memory ---------------------------- */
/* The calls compared: the reference (libc on plain memory) and the one under test (on shared
 * memory); each test file sets them. */
static const io_fns *io_ref, *io_test;

static int32_t *scratch; /* a 4 KiB object: a kernel writing it flushes every Dirty block */

static inline size_t items(size_t bytes, size_t item) { return bytes / item; }

/* Gives the object (osize bytes) the pattern base + i (int32) in state st ('I': written by a
 * kernel, 'R': written by the CPU and flushed by a call, 'D': written by the CPU); the mirror
 * gets the same bytes. */
static inline void prep(void *obj, size_t osize, char st, int32_t base, unsigned char *mirror) {
    int32_t *p = obj;
    size_t n = osize / sizeof(int32_t);
    pattern_bytes(mirror, osize, base);
    if (st == 'I') {
        CALL_OK(k_fill, grid_for(n), p, n, base);
        sync_ok();
    } else {
        for (size_t i = 0; i < n; i++) wr(&p[i], base + (int32_t)i);
        if (st == 'R') {
            CALL_OK(k_fill, grid_for(1), scratch, 1, 0);
            sync_ok();
        }
    }
    expect_states(obj, osize, proto_is("batch") ? 'D' : st);
}

typedef struct obj_at {
    size_t off, size; /* an object at region + off */
    char before;      /* the state of all its blocks before the call */
} obj_at;

/* Bytes [at, at + moved) of the region went through the call: states and d2h of each object. */
static inline void expect_landing(unsigned char *region, const obj_at *objs, int nobjs, size_t at, size_t moved,
                                  int written) {
    size_t d2h = 0;
    for (int i = 0; i < nobjs; i++) {
        size_t lo = objs[i].off, hi = objs[i].off + objs[i].size;
        size_t a = at > lo ? at : lo, b = at + moved < hi ? at + moved : hi;
        if (b <= a) a = b = 0;
        else a -= lo, b -= lo;
        d2h += expect_transfer(region + objs[i].off, objs[i].size, a, b, written, objs[i].before);
    }
    EXPECT_MOVED(0, d2h, 0);
}

/* One call on a regular file holding flen random bytes: io_ref on the mirror, io_test on the region
 * (len bytes each, identical), buffer at offset `at`, nmemb items of `item` bytes, file
 * position fpos. Outcomes, then (check) states and bytes moved, then memory and files. */
static inline void file_case(io_op op, unsigned char *region, unsigned char *mirror, size_t len, const obj_at *objs,
                      int nobjs, size_t at, size_t item, size_t nmemb, off_t fpos, size_t flen, int check) {
    unsigned char *content = random_bytes(flen);
    io_end pe = file_end(op, content, flen, fpos), se = file_end(op, content, flen, fpos);
    io_outcome po = io_call(io_ref, op, &pe, mirror + at, item, nmemb, fpos);
    reset();
    io_outcome so = io_call(io_test, op, &se, region + at, item, nmemb, fpos);
    expect_same_outcome(&po, &so);
    if (check) {
        size_t count = item * nmemb, moved;
        if (op_input(op)) {
            size_t avail = flen > (size_t)fpos ? flen - (size_t)fpos : 0;
            moved = count < avail ? count : avail;
        } else {
            moved = po.ret > 0 ? (size_t)po.ret * (op_stream(op) ? item : 1) : 0;
        }
        expect_landing(region, objs, nobjs, at, moved, op_input(op));
    }
    if (!op_input(op)) expect_same_file(&pe, &se);
    expect_same_bytes(mirror, region, len, "memory");
    end_close(&pe);
    end_close(&se);
    free(content);
}

#endif /* TESTS_IO_COMMON_H */
