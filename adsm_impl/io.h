/* adsm_impl/io.h -- I/O on shared objects: adsm_read, adsm_write, adsm_pread, adsm_pwrite,
 * adsm_fread, adsm_fwrite, and the opt-in interposition of the libc names (memcpy and memset
 * included, which go to memops.h).
 *
 * System calls never see shared memory: the kernel would return EFAULT on a protected page
 * instead of a fault adsm could resolve, and a half-done read cannot be restarted. Data goes
 * through a bounce buffer in pieces of about a block, so a large read into a rolling object
 * keeps eager eviction busy while the next piece is read; on cuda's host alias a regular file's
 * bytes go straight between the file and the alias instead. Return values and errno are the libc
 * call's. All of this runs in normal thread context. */
#ifndef ADSM__IO_INCLUDED
#define ADSM__IO_INCLUDED

#include "common.h"
#include "os.h"
#include "blocktree.h"
#include "object.h"
#include "trace.h"
#include "runtime.h"
#include "protocol.h"
#include "memops.h"
#include "bounce.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

/* A transfer stopped at `from` inside a unit it had claimed whole (not fetched): the bytes it did
 * not write come from the device, as a fetch would have brought them, and the unit goes into the
 * FIFO (adsm__fill_end). A claim whose unit never became Dirty (its access failed) is no claim. */
ADSM__PRIVATE void adsm__repair_tail(adsm__runtime *rt, uintptr_t from, uintptr_t to) {
    adsm__lock(&rt->lock);
    adsm__object *o = adsm__object_of(adsm__tree_find(&rt->objects, from));
    if (o && o->io_filling && to <= o->host + o->size) { /* Dirty: writable; its writer holds it */
        (void)adsm__fetch_range(rt, o->writer_dev, from, o->dev + (from - o->host), to - from, PROT_READ | PROT_WRITE);
        adsm__fill_end(rt, o);
    }
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
    if (!rt->proto->managed && adsm__outside_reservation(rt, a, n)) return 0; /* managed: anywhere */
    adsm__lock(&rt->lock);
    adsm__tree_node *hit = adsm__tree_find(&rt->objects, a);
    if (!hit) hit = adsm__tree_ceil(&rt->objects, a);
    int touches = hit && hit->start < a + n;
    adsm__unlock(&rt->lock);
    return touches;
}

/* The libc functions. With ADSM_INTERPOSE_IO this translation unit defines read, write, ... so
 * adsm must reach the next definition (libc's) through dlsym. A fully static program has no
 * dynamic symbols for dlsym to find: there (glibc) the same work is reached another way, the
 * system call itself or the name glibc also exports the function under (`fallback`); before, the
 * first interposed call jumped to address 0. */
#ifdef ADSM_INTERPOSE_IO
#define ADSM__REAL(type, name, fallback)                                                \
    static type adsm__real_##name##_fn;                                                 \
    ADSM__PRIVATE type adsm__real_##name(void) {                                        \
        type f = __atomic_load_n(&adsm__real_##name##_fn, __ATOMIC_ACQUIRE);            \
        if (!f) {                                                                       \
            *(void **)&f = dlsym(RTLD_NEXT, #name);                                     \
            if (!f) f = fallback;                                                       \
            __atomic_store_n(&adsm__real_##name##_fn, f, __ATOMIC_RELEASE);             \
        }                                                                               \
        return f;                                                                       \
    }
#else
#define ADSM__REAL(type, name, fallback) \
    ADSM__PRIVATE type adsm__real_##name(void) { return name; }
#endif

#if defined(ADSM_INTERPOSE_IO) && defined(__GLIBC__)
ADSM__PRIVATE ssize_t adsm__sys_read(int fd, void *b, size_t n) { return syscall(SYS_read, fd, b, n); }
ADSM__PRIVATE ssize_t adsm__sys_write(int fd, const void *b, size_t n) { return syscall(SYS_write, fd, b, n); }
ADSM__PRIVATE ssize_t adsm__sys_pread(int fd, void *b, size_t n, off_t at) { return syscall(SYS_pread64, fd, b, n, at); }
ADSM__PRIVATE ssize_t adsm__sys_pwrite(int fd, const void *b, size_t n, off_t at) {
    return syscall(SYS_pwrite64, fd, b, n, at);
}
ADSM__PRIVATE ssize_t adsm__sys_readv(int fd, const struct iovec *v, int n) { return syscall(SYS_readv, fd, v, n); }
ADSM__PRIVATE ssize_t adsm__sys_writev(int fd, const struct iovec *v, int n) { return syscall(SYS_writev, fd, v, n); }
/* glibc's own names for stdio's functions and its overflow report (exported since 2.2.5 / 2.3.4;
 * no header declares the first two any more) */
#ifdef __cplusplus
extern "C" {
#endif
extern size_t _IO_fread(void *, size_t, size_t, FILE *);
extern size_t _IO_fwrite(const void *, size_t, size_t, FILE *);
extern void __chk_fail(void) __attribute__((noreturn));
#ifdef __cplusplus
}
#endif
#define ADSM__STATIC_FALLBACK(f) f
#else
#define ADSM__STATIC_FALLBACK(f) NULL
#endif

typedef ssize_t (*adsm__read_fn)(int, void *, size_t);
typedef ssize_t (*adsm__write_fn)(int, const void *, size_t);
typedef ssize_t (*adsm__pread_fn)(int, void *, size_t, off_t);
typedef ssize_t (*adsm__pwrite_fn)(int, const void *, size_t, off_t);
typedef size_t (*adsm__fread_fn)(void *, size_t, size_t, FILE *);
typedef size_t (*adsm__fwrite_fn)(const void *, size_t, size_t, FILE *);
ADSM__REAL(adsm__read_fn, read, ADSM__STATIC_FALLBACK(adsm__sys_read))
ADSM__REAL(adsm__write_fn, write, ADSM__STATIC_FALLBACK(adsm__sys_write))
ADSM__REAL(adsm__pread_fn, pread, ADSM__STATIC_FALLBACK(adsm__sys_pread))
ADSM__REAL(adsm__pwrite_fn, pwrite, ADSM__STATIC_FALLBACK(adsm__sys_pwrite))
ADSM__REAL(adsm__fread_fn, fread, ADSM__STATIC_FALLBACK(_IO_fread))
ADSM__REAL(adsm__fwrite_fn, fwrite, ADSM__STATIC_FALLBACK(_IO_fwrite))
typedef ssize_t (*adsm__readv_fn)(int, const struct iovec *, int);
typedef ssize_t (*adsm__writev_fn)(int, const struct iovec *, int);
ADSM__REAL(adsm__readv_fn, readv, ADSM__STATIC_FALLBACK(adsm__sys_readv))
ADSM__REAL(adsm__writev_fn, writev, ADSM__STATIC_FALLBACK(adsm__sys_writev))

/* Ends a piece on a block boundary when that still leaves a block's worth, so pieces cover
 * whole blocks (which then need no fetch) instead of splitting them. */
ADSM__PRIVATE size_t adsm__align_piece(const adsm__runtime *rt, uintptr_t at, size_t want, size_t remaining) {
    if (want == remaining) return want;
    uintptr_t end = ADSM__ALIGN_DOWN(at + want, rt->cfg.block_size);
    return end > at ? end - at : want;
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

/* Bytes waiting to be read on a pipe or socket (FIONREAD), or -1 where the descriptor cannot say
 * (a device like /dev/zero, whose reads never wait). */
ADSM__PRIVATE int adsm__bytes_waiting(int fd) {
    int waiting = 0;
    return ioctl(fd, FIONREAD, &waiting) != 0 ? -1 : waiting;
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
    int regular;     /* a regular file (or block device): its calls never wait on another party */
    int positioned;  /* pread, pwrite: at offset, the file position untouched */
    FILE *stream;    /* fread, fwrite: the stream (its position is the one to move back) */
    int failed;      /* adsm itself ended the call (not the system call): EFAULT, ENOMEM, ECANCELED */
    ssize_t (*syscall_piece)(struct adsm__xfer *x, void *bounce, size_t want, size_t done);
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

/* ---- straight through the host alias -------------------------------------------------------
 * Under cuda's shared addresses an object's host pages have a second view that is always
 * writable, the alias (reservation.h), so a regular file's bytes can move between it and the file
 * in the system call itself: no bounce buffer, no copy, none of the bounce buffer's first-touch
 * faults (on the GPU machine a process's first 1 MiB fread into an object took 0.6 ms, the next
 * 0.15, plus a memcpy each). Piece by piece, each within one tracking unit: the protocol hears of
 * the access as adsm_memcpy's would (a read that covers a unit overwrites it: nothing fetched),
 * and the system call runs with the runtime lock held, as adsm_memcpy's copy does, so no eviction,
 * fetch or invalidation touches the unit's host bytes meanwhile; hence regular files only, whose
 * calls do not wait on another party, and at most a piece's bytes per call. Units under 256 KiB
 * (rolling's small blocks) leave the rest of the transfer to the bounce buffer: a system call per
 * unit would cost more than the copy it saves. Returns the bytes moved; *stop is 0 where the
 * bounce buffer takes the rest, else the transfer is over: 1 (everything moved, or a short call),
 * 2 (a failed call, or the protocol failed); *call_errno is the errno a short or failed call left. */
#define ADSM__DIRECT_IO_MIN_UNIT ((size_t)256 << 10)

/* The bytes a read from a regular file finds before its end, from where this transfer reads;
 * SIZE_MAX where that cannot be told. The direct path reads no further: the protocol hears of a
 * unit before its bytes come, and a read past the end must leave the blocks it did not fill as
 * they were, as the bounce buffer's copy after the call does. */
ADSM__PRIVATE size_t adsm__file_remaining(const adsm__xfer *x) {
    FILE *stream = x->stream;
    int fd = stream ? fileno(stream) : x->fd, saved = errno;
    struct stat st;
    off_t at = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        at = stream ? ftello(stream) : x->positioned ? x->offset : lseek(fd, 0, SEEK_CUR);
    errno = saved;
    if (at < 0) return SIZE_MAX;
    return st.st_size > at ? (size_t)(st.st_size - at) : 0;
}

ADSM__PRIVATE size_t adsm__transfer_direct(adsm__xfer *x, uintptr_t buf, size_t n, int *stop, int *call_errno,
                                           uintptr_t *unfinished) {
    adsm__runtime *rt = &adsm__rt;
    size_t done = 0, piece = adsm__bounce_piece(rt);
    *stop = 0;
    if (!rt->host_alias || !x->regular || x->whole) return 0;
    size_t all = n;
    if (x->reading) n = ADSM__MIN(n, adsm__file_remaining(x)); /* the rest (end of file) is the bounce path's */
    while (done < n) {
        uintptr_t a = buf + done;
        size_t block;
        int whole;
        adsm__lock(&rt->lock);
        adsm__object *o = adsm__object_of(adsm__tree_find(&rt->objects, a));
        uintptr_t alias = o ? adsm__host_dma(rt, a) : a;
        size_t unit = o ? adsm__piece(rt, o, a, n - done, &block, &whole) : 0;
        if (!o || alias == a || (unit < ADSM__DIRECT_IO_MIN_UNIT && unit < n - done)) {
            adsm__unlock(&rt->lock);
            return done; /* plain memory, no alias, or small units: the bounce buffer's */
        }
        if (adsm__unit_busy(rt, o, block)) { /* a copy of it runs: wait, then look again */
            adsm__await_copies(rt);
            adsm__unlock(&rt->lock);
            continue;
        }
        size_t len = ADSM__MIN(unit, piece);
        if (whole && len < unit && rt->proto->eager) whole = 0; /* rolling: never leave a unit half-filled */
        if (x->reading && whole && len < unit && o->blocks[block].state == ADSM__INVALID)
            *unfinished = ADSM__MIN(a + unit, o->host + o->size);
        adsm__tls_io_by_alias = 1; /* the transfer reads or writes the alias, not the program's view */
        int access = adsm__runtime_access(rt, o, block, x->reading, x->reading && whole);
        adsm__tls_io_by_alias = 0;
        int next = adsm__after_access(rt, access, 0);
        if (next > 0) continue;
        if (next < 0) {
            *stop = 2;
            *call_errno = EFAULT;
            return done;
        }
        if (*unfinished > a) adsm__fill_claimed(rt, o, block); /* no flush until it is filled */
        uint64_t t0 = adsm__now_ns();
        ssize_t got = x->syscall_piece(x, (void *)alias, len, done);
        *call_errno = errno;
        adsm__trace(&rt->trace, ADSM__TR_IO, t0, a, got > 0 ? (uint64_t)got : 0);
        if (got > 0 && *unfinished && a + (size_t)got >= *unfinished) { /* the claimed unit is complete */
            *unfinished = 0;
            adsm__fill_end(rt, o);
        }
        adsm__unlock(&rt->lock);
        if (got > 0) done += (size_t)got;
        if (got < 0 || (size_t)got < len) {
            *stop = got < 0 ? 2 : 1;
            return done;
        }
    }
    *stop = done == all; /* else the end of the file, as libc's own call will find */
    return done;
}

/* A piece read that the object could not take (adsm__copy_range failed: the kernel refused a
 * protection change, at vm.max_map_count): a regular file's position goes back over it, so the
 * next read returns those bytes again. A pipe or socket cannot take bytes back: they are lost, as
 * bytes read into a buffer that then faults are (misuse.md). */
ADSM__PRIVATE void adsm__unread(adsm__xfer *x, size_t got) {
    if (x->positioned || !x->regular) return;
    int saved = errno;
    if (x->stream) (void)fseeko(x->stream, -(off_t)got, SEEK_CUR);
    else (void)lseek(x->fd, -(off_t)got, SEEK_CUR);
    errno = saved;
}

ADSM__PRIVATE ssize_t adsm__transfer(adsm__xfer *x, uintptr_t buf, size_t n) {
    adsm__runtime *rt = &adsm__rt;
    int saved_errno = errno, final_errno = errno;
    size_t piece = x->whole ? n : adsm__bounce_piece(rt), done = 0;
    uintptr_t unfinished = 0;
    int stop = 0, call_errno = saved_errno;
    done = adsm__transfer_direct(x, buf, n, &stop, &call_errno, &unfinished);
    if (stop) {
        if (unfinished > buf + done) adsm__repair_tail(rt, buf + done, unfinished);
        errno = done < n ? call_errno : saved_errno; /* as a short or failed piece below leaves it */
        return stop == 2 && done == 0 ? -1 : (ssize_t)done;
    }
    adsm__bounce b;
    if (adsm__bounce_take(rt, piece, &b) != 0) {
        x->failed = 1;
        errno = ENOMEM;
        return -1;
    }
    while (done < n) {
        unsigned char *bounce = b.base + (buf + done) % rt->page; /* the program's alignment */
        size_t want = ADSM__MIN(n - done, piece);
        if (x->reading && done > 0 && x->stream_like) {
            int waiting = adsm__bytes_waiting(x->fd);
            if (waiting < 0) x->stream_like = 0;
            else if (waiting == 0) break;
            else want = ADSM__MIN(want, (size_t)waiting);
        }
        if (!x->whole) want = adsm__align_piece(rt, buf + done, want, n - done);
        if (!x->reading && adsm__memcpy_impl(rt, (uintptr_t)bounce, buf + done, want) != ADSM_OK) {
            adsm__bounce_give(rt, &b); /* the protocol could not bring the bytes: the read's EFAULT */
            x->failed = 1;
            errno = EFAULT;
            return done > 0 ? (ssize_t)done : -1; /* 0 made a caller's write loop spin */
        }
        errno = saved_errno;
        ssize_t got = adsm__blocking_piece(x, bounce, want, done);
        if (got == ADSM__SHUT_DOWN_MEANWHILE) {
            adsm__bounce_give(rt, &b);
            x->failed = 1;
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
            if (unfinished > buf + done) adsm__repair_tail(rt, buf + done, unfinished);
            adsm__unread(x, (size_t)got);
            adsm__bounce_give(rt, &b);
            x->failed = 1;
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
    return (ssize_t)adsm__real_fread()(b, 1, want, x->stream);
}
ADSM__PRIVATE ssize_t adsm__piece_fwrite(adsm__xfer *x, void *b, size_t want, size_t done) {
    (void)done;
    return (ssize_t)adsm__real_fwrite()(b, 1, want, x->stream);
}

/* Whether the page at `a` can be read, asked of the kernel (no fault): the program may have
 * mapped its own memory over a hole in adsm's reservation. process_vm_readv says so directly
 * (EFAULT: not readable), but it can be refused outright: seccomp profiles that keep it behind
 * CAP_SYS_PTRACE (Docker's default did until 2021) answer EPERM, gVisor ENOSYS. Then
 * rt_sigprocmask asks instead: the kernel (and gVisor) copies the new mask in before it looks at
 * `how`, so with an invalid `how` the call fails with EFAULT where the page cannot be read and
 * with EINVAL where it can, and changes no mask either way. */
ADSM__PRIVATE int adsm__page_readable(uintptr_t a) {
    int saved = errno, readable;
    char byte;
    struct iovec local = {&byte, 1}, remote = {(void *)a, 1};
    if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == 1) {
        readable = 1;
    } else if (errno == EFAULT) {
        readable = 0;
    } else {
        enum { NO_SUCH_HOW = 0x7fff };
        uintptr_t mask = ADSM__ALIGN_DOWN(a, 8); /* the kernel's mask: 8 bytes, within a's page */
        readable = syscall(SYS_rt_sigprocmask, NO_SUCH_HOW, (void *)mask, NULL, (size_t)(_NSIG / 8)) == -1 &&
                   errno == EINVAL;
    }
    errno = saved;
    return readable;
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
    x.regular = !adsm__is_stream_like(fd);
    x.positioned = piece == adsm__piece_pread || piece == adsm__piece_pwrite;
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

/* readv/writev where a buffer is shared: buffer after buffer through adsm_read/adsm_write, as a
 * call the kernel ended short would: a short piece ends it. Reading a pipe or socket, the next
 * buffer is read only while data waits (what readv would have taken at once), so the call never
 * blocks once it has bytes. Not one system call any more: a writer beside it on the same pipe
 * may land between two buffers. */
#define ADSM__IOV_MAX 1024 /* Linux's UIO_MAXIOV: more buffers are EINVAL */

/* Whether a valid count of buffers holds a shared one (a count the kernel refuses goes to libc,
 * which says so). */
ADSM__PRIVATE int adsm__iov_touches_shared(const struct iovec *iov, int n) {
    for (int i = 0; n <= ADSM__IOV_MAX && i < n; i++)
        if (iov[i].iov_len > 0 && adsm__touches_shared(iov[i].iov_base, iov[i].iov_len)) return 1;
    return 0;
}

ADSM__PRIVATE ssize_t adsm__vector_transfer(int fd, const struct iovec *iov, int n, int reading) {
    size_t total = 0, sum = 0;
    for (int i = 0; i < n; i++)
        if (__builtin_add_overflow(sum, iov[i].iov_len, &sum) || sum > (size_t)SSIZE_MAX) {
            errno = EINVAL; /* as the kernel refuses it */
            return -1;
        }
    int stream = reading && adsm__is_stream_like(fd);
    for (int i = 0; i < n; i++) {
        size_t len = iov[i].iov_len;
        if (len == 0) continue;
        if (total > 0 && stream && adsm__bytes_waiting(fd) == 0) break;
        ssize_t got = reading ? adsm__read_unguarded(fd, iov[i].iov_base, len)
                              : adsm__write_unguarded(fd, iov[i].iov_base, len);
        if (got < 0) return total > 0 ? (ssize_t)total : -1;
        total += (size_t)got;
        if ((size_t)got < len) break;
    }
    return (ssize_t)total;
}

ADSM__PRIVATE ssize_t adsm__readv_unguarded(int fd, const struct iovec *iov, int n) {
    if (!adsm__iov_touches_shared(iov, n)) return adsm__real_readv()(fd, iov, n);
    return adsm__vector_transfer(fd, iov, n, 1);
}

ADSM__PRIVATE ssize_t adsm__writev_unguarded(int fd, const struct iovec *iov, int n) {
    if (!adsm__iov_touches_shared(iov, n)) return adsm__real_writev()(fd, iov, n);
    return adsm__vector_transfer(fd, iov, n, 0);
}

/* Sets the stream's error indicator, as libc's fread/fwrite do when their system call fails, so
 * that a program's ferror() check sees a failure adsm found (glibc: the flag ferror reads; with
 * another libc, errno alone tells). Stream lock held. */
ADSM__PRIVATE void adsm__stream_mark_error(FILE *stream) {
#if defined(__GLIBC__) && defined(_IO_ERR_SEEN)
    stream->_flags |= _IO_ERR_SEEN;
#else
    (void)stream;
#endif
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
    x.stream = stream;
    x.regular = fileno(stream) >= 0 && !adsm__is_stream_like(fileno(stream)); /* not fmemopen's */
    flockfile(stream);
    ssize_t done = adsm__transfer(&x, (uintptr_t)ptr, bytes);
    if (x.failed) adsm__stream_mark_error(stream);
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
/* Each libc name is the symbol of a function of adsm's own (adsm__libc_read for read, ...), made
 * an alias of it by the assembler; the compiler never sees a function called read here. With
 * _FORTIFY_SOURCE, glibc's headers define read, pread, fread, memcpy and memset as inline
 * wrappers in this translation unit already: C++ does not let it define them again ("redefinition
 * of 'read'", clang++), clang takes a later C definition for an inline one (-Wstatic-in-inline),
 * and clang calls its private copies of the wrappers (memcpy.inline) without emitting them when
 * the symbol is defined here under the same name, even through an asm label. A plain definition
 * would also replace the wrappers, and with them fortify's checks, in the whole translation unit.
 * The adsm__libc_* names carry C linkage and their own name as symbol in C++ too. ELF only
 * (Linux), as adsm is. */
#if defined(ADSM_INTERPOSE_IO) || defined(ADSM_INTERPOSE_MEM)
#define ADSM__EXPORT_AS(name, fn) \
    __asm__(".globl " #name "\n\t.type " #name ", %function\n\t.set " #name ", " #fn);
#define ADSM__INTERPOSER __attribute__((used, visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif
/* A checked call (_FORTIFY_SOURCE) that would overflow its buffer: libc's own report ("buffer
 * overflow detected"), which ends the process, as libc's checked version would have. */
#ifdef __GLIBC__
void __chk_fail(void) __attribute__((noreturn));
#endif
ADSM__PRIVATE void adsm__overflow_reported(void) {
#ifdef __GLIBC__
    __chk_fail();
#else
    abort();
#endif
}
#endif

#ifdef ADSM_INTERPOSE_IO
ADSM__INTERPOSER ssize_t adsm__libc_read(int fd, void *buf, size_t count) { return adsm_read(fd, buf, count); }
ADSM__INTERPOSER ssize_t adsm__libc_write(int fd, const void *buf, size_t count) { return adsm_write(fd, buf, count); }
ADSM__INTERPOSER ssize_t adsm__libc_pread(int fd, void *buf, size_t count, off_t offset) {
    return adsm_pread(fd, buf, count, offset);
}
ADSM__INTERPOSER ssize_t adsm__libc_pwrite(int fd, const void *buf, size_t count, off_t offset) {
    return adsm_pwrite(fd, buf, count, offset);
}
ADSM__INTERPOSER size_t adsm__libc_fread(void *ptr, size_t size, size_t nmemb, FILE *stream) {
    return adsm_fread(ptr, size, nmemb, stream);
}
ADSM__INTERPOSER size_t adsm__libc_fwrite(const void *ptr, size_t size, size_t nmemb, FILE *stream) {
    return adsm_fwrite(ptr, size, nmemb, stream);
}
ADSM__EXPORT_AS(read, adsm__libc_read)
ADSM__EXPORT_AS(write, adsm__libc_write)
ADSM__EXPORT_AS(pread, adsm__libc_pread)
ADSM__EXPORT_AS(pwrite, adsm__libc_pwrite)
ADSM__EXPORT_AS(fread, adsm__libc_fread)
ADSM__EXPORT_AS(fwrite, adsm__libc_fwrite)
ADSM__INTERPOSER ssize_t adsm__libc_readv(int fd, const struct iovec *iov, int iovcnt) {
    return adsm_readv(fd, iov, iovcnt);
}
ADSM__INTERPOSER ssize_t adsm__libc_writev(int fd, const struct iovec *iov, int iovcnt) {
    return adsm_writev(fd, iov, iovcnt);
}
ADSM__EXPORT_AS(readv, adsm__libc_readv)
ADSM__EXPORT_AS(writev, adsm__libc_writev)

/* _FORTIFY_SOURCE builds call the checked entry points instead of the plain names wherever the
 * compiler knows the buffer's size (at level 3 also sizes known only at run time), so a
 * fortified read into shared memory would reach libc and fail with EFAULT: adsm defines them
 * too, checks the size as libc does, and does the call itself. */
ADSM__INTERPOSER ssize_t adsm__libc_read_chk(int fd, void *buf, size_t count, size_t buflen) {
    if (count > buflen) adsm__overflow_reported();
    return adsm_read(fd, buf, count);
}
ADSM__INTERPOSER ssize_t adsm__libc_pread_chk(int fd, void *buf, size_t count, off_t offset, size_t buflen) {
    if (count > buflen) adsm__overflow_reported();
    return adsm_pread(fd, buf, count, offset);
}
ADSM__INTERPOSER size_t adsm__libc_fread_chk(void *ptr, size_t ptrlen, size_t size, size_t nmemb, FILE *stream) {
    size_t bytes;
    if (__builtin_mul_overflow(size, nmemb, &bytes) || bytes > ptrlen) adsm__overflow_reported();
    return adsm_fread(ptr, size, nmemb, stream);
}
ADSM__EXPORT_AS(__read_chk, adsm__libc_read_chk)
ADSM__EXPORT_AS(__pread_chk, adsm__libc_pread_chk)
ADSM__EXPORT_AS(__fread_chk, adsm__libc_fread_chk)

/* With _FILE_OFFSET_BITS=64 the program's pread and pwrite are glibc's pread64 and pwrite64 (the
 * same functions where off_t has 64 bits, as on x86-64 and aarch64). */
#if defined(__GLIBC__) && defined(__LP64__)
ADSM__EXPORT_AS(pread64, adsm__libc_pread)
ADSM__EXPORT_AS(pwrite64, adsm__libc_pwrite)
ADSM__EXPORT_AS(__pread64_chk, adsm__libc_pread_chk)
#endif
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

ADSM__INTERPOSER void *adsm__libc_memcpy(void *d, const void *s, size_t n) ADSM__NOEXCEPT {
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

ADSM__INTERPOSER void *adsm__libc_memset(void *d, int v, size_t n) ADSM__NOEXCEPT {
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

/* The checked versions a _FORTIFY_SOURCE build calls where it knows the destination's size but
 * not the count: the same check as libc's, then the above (libc's would copy into shared memory
 * without adsm, a fault per page, and an Invalid block's memset would fetch it first). */
ADSM__INTERPOSER void *adsm__libc_memcpy_chk(void *d, const void *s, size_t n, size_t dlen) ADSM__NOEXCEPT {
    if (n > dlen) adsm__overflow_reported();
    return adsm__libc_memcpy(d, s, n);
}
ADSM__INTERPOSER void *adsm__libc_memset_chk(void *d, int v, size_t n, size_t dlen) ADSM__NOEXCEPT {
    if (n > dlen) adsm__overflow_reported();
    return adsm__libc_memset(d, v, n);
}
ADSM__EXPORT_AS(memcpy, adsm__libc_memcpy)
ADSM__EXPORT_AS(memset, adsm__libc_memset)
ADSM__EXPORT_AS(__memcpy_chk, adsm__libc_memcpy_chk)
ADSM__EXPORT_AS(__memset_chk, adsm__libc_memset_chk)
#endif /* ADSM_INTERPOSE_MEM */

#if defined(ADSM_INTERPOSE_IO) || defined(ADSM_INTERPOSE_MEM)
#ifdef __cplusplus
}
#endif
#endif

#endif /* ADSM__IO_INCLUDED */
