/* adsm_impl/os.h -- the thin layer over Linux: page size, protection, futex locks, time, memfd,
 * /proc/self/mem and thread-local error text.
 *
 * Everything named *_sigsafe here (and adsm__lock/unlock, adsm__now_ns, adsm__protect,
 * adsm__futex_*) is async-signal-safe: raw system calls and atomics only, so the SIGSEGV handler
 * may use it. The rest (error text, logging) runs in normal thread context only. */
#ifndef ADSM__OS_INCLUDED
#define ADSM__OS_INCLUDED

#include "common.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__GLIBC__) && !defined(__USE_GNU)
#error "adsm: define ADSM_IMPLEMENTATION and include adsm.h before any system header (or build with -D_GNU_SOURCE)"
#endif

#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif
#ifndef FALLOC_FL_KEEP_SIZE
#define FALLOC_FL_KEEP_SIZE 0x01
#endif
#ifndef FALLOC_FL_PUNCH_HOLE
#define FALLOC_FL_PUNCH_HOLE 0x02
#endif

/* What ENOMEM from mprotect means for adsm (each run of pages with its own protection is a
 * mapping) and the way out: one text, for every message that meets it (a string literal, so the
 * fault handler can append it). */
#define ADSM__MAP_LIMIT_HINT                                                                       \
    "the process has reached vm.max_map_count mappings; raise it (sysctl vm.max_map_count) or use " \
    "larger blocks (ADSM_BLOCK_SIZE)"

#define ADSM__LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define ADSM__STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define ADSM__ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_RELAXED)

/* ---- ThreadSanitizer ----------------------------------------------------------------------- */
/* Host->device copies read a block that page protection (mprotect READ before the copy; a later
 * store faults and waits under the runtime lock) orders against CPU stores. TSan cannot see that
 * ordering, so under TSan those reads are not recorded: adsm__copy_out is memcpy otherwise. */
#if defined(__SANITIZE_THREAD__)
#define ADSM__TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ADSM__TSAN 1
#endif
#endif
#ifdef ADSM__TSAN
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
ADSM__PRIVATE void adsm__copy_out(void *dst, const void *block, size_t n) {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    memcpy(dst, block, n);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
}
#else
#define adsm__copy_out memcpy
#endif

/* ---- time ---------------------------------------------------------------------------------- */
ADSM__PRIVATE uint64_t adsm__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- futex: waits that a signal handler may do ------------------------------------------ */
ADSM__PRIVATE void adsm__futex_wait(int *addr, int expected) {
    syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

ADSM__PRIVATE void adsm__futex_wake_all(int *addr) {
    syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* A mutex a signal handler may take (no pthread state): 0 free, 1 held, 2 held with waiters.
 * Not recursive: the fault engine checks adsm__tls_lock_depth before taking it, so a fault in a
 * thread that already holds it is reported instead of deadlocking. */
typedef struct adsm__lock_t {
    int state;
} adsm__lock_t;

static __thread int adsm__tls_lock_depth;
/* Set on threads whose memory operations must never be routed through adsm (the DMA thread,
 * kernel workers): interposed memcpy/memset/read/... pass straight to libc there. */
static __thread int adsm__tls_passthrough;
/* Set on adsm's copy threads (emu DMA thread, cuda engine): a fault there is adsm's own bug. */
static __thread int adsm__tls_copy_thread;

/* adsm__tls_lock_depth counts the locks this thread holds, for a signal handler on it to read:
 * it is raised before the lock can be taken and lowered only once it is let go, so a handler never
 * finds the lock held with the depth at 0 (it would wait for itself); while the thread waits for
 * another's hold it is 0. errno is the program's: the futex calls leave it as it was. */
ADSM__PRIVATE void adsm__lock(adsm__lock_t *l) {
    int expected = 0;
    adsm__tls_lock_depth++;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (__atomic_compare_exchange_n(&l->state, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return;
    int saved_errno = errno;
    while (__atomic_exchange_n(&l->state, 2, __ATOMIC_ACQUIRE) != 0) {
        adsm__tls_lock_depth--; /* waiting, not holding */
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        adsm__futex_wait(&l->state, 2);
        adsm__tls_lock_depth++;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
    }
    errno = saved_errno;
}

/* 1 when taken, 0 when somebody holds it. */
ADSM__PRIVATE int adsm__trylock(adsm__lock_t *l) {
    int expected = 0;
    adsm__tls_lock_depth++;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (__atomic_compare_exchange_n(&l->state, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return 1;
    adsm__tls_lock_depth--;
    return 0;
}

ADSM__PRIVATE void adsm__unlock(adsm__lock_t *l) {
    int waiters = __atomic_exchange_n(&l->state, 0, __ATOMIC_RELEASE) == 2;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    adsm__tls_lock_depth--;
    if (waiters) {
        int saved_errno = errno;
        syscall(SYS_futex, &l->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
        errno = saved_errno;
    }
}

/* ---- memory ---------------------------------------------------------------------------------- */
ADSM__PRIVATE int adsm__protect(uintptr_t addr, size_t len, int prot) {
    return mprotect((void *)addr, len, prot);
}

/* Maps n bytes of private anonymous memory at an address aligned to `align` (a power of two): maps
 * n + align and unmaps the slack on both sides. MAP_FAILED (errno set) when refused. */
ADSM__PRIVATE void *adsm__map_aligned(size_t n, size_t align, int prot, int flags) {
    void *p = mmap(NULL, n + align, prot, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
    if (p == MAP_FAILED) return MAP_FAILED;
    uintptr_t raw = (uintptr_t)p, at = ADSM__ALIGN_UP(raw, align);
    if (at > raw) munmap(p, at - raw);
    munmap((void *)(at + n), raw + align - at);
    return (void *)at;
}

/* Starts a thread of adsm's own with every signal blocked but the faults (SIGSEGV, SIGBUS: a fault
 * on one is explained before the process dies, and the host backend's kernels fault on shared
 * memory as the program's threads do): a signal meant for the program (a timer's, a SIGTERM it
 * reads from a signalfd, one its handler serves) must never land on it, and the kernel gives a
 * process-directed signal to any thread that does not block it. pthread_create's result. */
ADSM__PRIVATE int adsm__thread_start(pthread_t *t, void *(*fn)(void *), void *arg) {
    sigset_t quiet, old;
    sigfillset(&quiet);
    sigdelset(&quiet, SIGSEGV);
    sigdelset(&quiet, SIGBUS);
    pthread_sigmask(SIG_SETMASK, &quiet, &old);
    int r = pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return r;
}

/* Whether part of [a, a + n) (a page-aligned) has nothing mapped (the program unmapped it):
 * msync says ENOMEM there. Signal-safe; errno kept. */
ADSM__PRIVATE int adsm__range_unmapped(uintptr_t a, size_t n) {
    int saved = errno;
    int gone = msync((void *)a, n, MS_ASYNC) != 0 && errno == ENOMEM;
    errno = saved;
    return gone;
}

/* Whether nothing is mapped at the page holding a. Signal-safe; errno kept. */
ADSM__PRIVATE int adsm__page_unmapped(uintptr_t a, size_t page) {
    return adsm__range_unmapped(a & ~(uintptr_t)(page - 1), page);
}

/* Whether the program locks its future mappings (mlockall with MCL_FUTURE): a fresh page is then
 * locked, and filled at once (or refused, over the locked-memory limit). */
ADSM__PRIVATE int adsm__future_mappings_locked(void) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return errno == EAGAIN;
    unsigned char resident = 0;
    int locked = mincore(p, page, &resident) == 0 && (resident & 1);
    munmap(p, page);
    return locked;
}

/* Maps n bytes of the shared file fd with protection prot at an address aligned to 2 MiB, never
 * locked. Aligned, so that the file's huge pages (offsets aligned to 2 MiB) can be mapped whole
 * (reservation.h collapses the host alias's). Never locked: under mlockall(MCL_FUTURE) every new
 * mapping is locked and, where accessible, filled at once, which for a view of all of the
 * emulated device's memory would fill the host's RAM. There it is mapped inaccessible first
 * (nothing to fill), unlocked, then opened; elsewhere in one step (valgrind takes minutes to open
 * a range that large with mprotect). MAP_FAILED (errno set) when refused. */
ADSM__PRIVATE void *adsm__map_shared_unlocked(size_t n, int prot, int fd) {
    int locked = adsm__future_mappings_locked();
    void *at = adsm__map_aligned(n, (size_t)2 << 20, PROT_NONE, MAP_NORESERVE);
    if (at == MAP_FAILED) return MAP_FAILED;
    void *p = mmap(at, n, locked ? PROT_NONE : prot, MAP_SHARED | MAP_NORESERVE | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED) {
        int saved_errno = errno;
        munmap(at, n);
        errno = saved_errno;
        return MAP_FAILED;
    }
    if (!locked) return p;
    (void)munlock(p, n);
    if (mprotect(p, n, prot) == 0) return p;
    int saved_errno = errno;
    munmap(p, n);
    errno = saved_errno;
    return MAP_FAILED;
}

/* A memory file of `size` bytes (sparse), or -1 with errno: EFBIG where the file-size limit
 * (ulimit -f, RLIMIT_FSIZE) is lower, checked first, since growing a file past it sends SIGXFSZ,
 * which ends the process without a word. */
ADSM__PRIVATE int adsm__memfd(const char *name, size_t size) {
    struct rlimit limit;
    if (getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && size > limit.rlim_cur) {
        errno = EFBIG;
        return -1;
    }
    int fd = (int)syscall(SYS_memfd_create, name, MFD_CLOEXEC);
    if (fd < 0) return -1;
    if (ftruncate(fd, (off_t)size) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A descriptor adsm opened, and which file it was. A program may close it behind adsm's back (a
 * daemon closing everything after adsm_init) and open a file that gets its number: adsm must
 * never write, punch or close that file. Signal-safe (fstat). */
typedef struct adsm__own_fd {
    int fd; /* -1: none, or no longer adsm's */
    dev_t dev;
    ino_t ino;
} adsm__own_fd;

ADSM__PRIVATE void adsm__own_fd_set(adsm__own_fd *o, int fd) {
    struct stat st;
    o->fd = fd >= 0 && fstat(fd, &st) == 0 ? fd : -1;
    if (o->fd >= 0) o->dev = st.st_dev, o->ino = st.st_ino;
    else if (fd >= 0) close(fd);
}

/* The descriptor while it is still the file adsm opened, else -1 (for good: the number is not
 * adsm's any more, and the descriptor is never closed by adsm). */
ADSM__PRIVATE int adsm__own_fd_get(adsm__own_fd *o) {
    int fd = ADSM__LOAD(&o->fd);
    struct stat st;
    if (fd < 0) return -1;
    if (fstat(fd, &st) == 0 && st.st_dev == o->dev && st.st_ino == o->ino) return fd;
    ADSM__STORE(&o->fd, -1);
    return -1;
}

ADSM__PRIVATE void adsm__own_fd_close(adsm__own_fd *o) {
    int fd = adsm__own_fd_get(o);
    if (fd >= 0) close(fd);
    o->fd = -1;
}

/* Closes every descriptor from 3 up except `keep`: a process forked off the program (the emu
 * device) must not hold the program's pipes, sockets and file locks open behind its back.
 * 0, 1 and 2 stay so that what kernel bodies print reaches the program's output. */
ADSM__PRIVATE void adsm__close_fds_except(int keep) {
    if (keep > 3 && syscall(SYS_close_range, 3u, (unsigned)keep - 1, 0u) != 0)
        for (int fd = 3; fd < keep; fd++) close(fd);
    if (syscall(SYS_close_range, (unsigned)keep + 1, ~0u, 0u) == 0) return;
    long max = sysconf(_SC_OPEN_MAX); /* before Linux 5.9: one close per possible descriptor */
    for (long fd = keep + 1; fd < (max > 0 ? max : 65536); fd++) close((int)fd);
}

/* The loop behind the two below: system call nr (SYS_pread64 or SYS_pwrite64, raw, so never an
 * interposed pread or pwrite) until len bytes moved between buf and host address `at` of
 * /proc/self/mem. 0 or -1. */
ADSM__PRIVATE int adsm__procmem_full(long nr, int fd, char *buf, size_t len, uintptr_t at) {
    while (len > 0) {
        ssize_t n = (ssize_t)syscall(nr, fd, buf, len, (off_t)at);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        buf += n;
        at += (uintptr_t)n;
        len -= (size_t)n;
    }
    return 0;
}

/* Writes len bytes at host address dst whatever its protection: the kernel's /proc/self/mem
 * writes with FOLL_FORCE, so a PROT_NONE block is filled completely before any thread can see
 * it. Returns 0 or -1. */
ADSM__PRIVATE int adsm__pwrite_full(int fd, const void *src, size_t len, uintptr_t dst) {
    return adsm__procmem_full(SYS_pwrite64, fd, (char *)src, len, dst); /* only read from */
}

/* Reads len bytes at host address src whatever its protection (/proc/self/mem, as above), into
 * plain memory. Returns 0 or -1. */
ADSM__PRIVATE int adsm__pread_full(int fd, void *dst, size_t len, uintptr_t src) {
    return adsm__procmem_full(SYS_pread64, fd, (char *)dst, len, src);
}

/* write(2) a string: the only output allowed in signal context. A raw system call, so an
 * interposed write() (ADSM_INTERPOSE_IO) is never entered from a signal handler. */
ADSM__PRIVATE void adsm__write_stderr(const char *s) {
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = (ssize_t)syscall(SYS_write, 2, s, n);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

/* Appends "0x..." for v to the string in buf (of size n); signal-safe. */
ADSM__PRIVATE void adsm__append_hex(char *buf, size_t n, uintptr_t v) {
    char digits[2 + 2 * sizeof v + 1];
    size_t len = 0, used = strlen(buf);
    do {
        digits[len++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    if (used + len + 3 > n) return;
    buf[used++] = '0';
    buf[used++] = 'x';
    while (len > 0) buf[used++] = digits[--len];
    buf[used] = 0;
}

/* Appends v in decimal to the string in buf (of size n); signal-safe. */
ADSM__PRIVATE void adsm__append_dec(char *buf, size_t n, uint64_t v) {
    char digits[21];
    size_t len = 0, used = strlen(buf);
    do {
        digits[len++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    if (used + len + 1 > n) return;
    while (len > 0) buf[used++] = digits[--len];
    buf[used] = 0;
}

/* Appends s to the string in buf (of size n), truncating; signal-safe. */
ADSM__PRIVATE void adsm__append(char *buf, size_t n, const char *s) {
    size_t used = strlen(buf);
    while (*s && used + 1 < n) buf[used++] = *s++;
    buf[used] = 0;
}

/* Bytes this process may still map under RLIMIT_AS (ulimit -v); SIZE_MAX when unlimited.
 * MAP_NORESERVE reservations count against that limit too. */
ADSM__PRIVATE size_t adsm__address_space_room(size_t *limit) {
    struct rlimit rl;
    *limit = SIZE_MAX;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
    *limit = (size_t)rl.rlim_cur;
    unsigned long long pages = 0;
    FILE *f = fopen("/proc/self/statm", "re");
    if (f) {
        if (fscanf(f, "%llu", &pages) != 1) pages = 0;
        fclose(f);
    }
    size_t used = (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
    return rl.rlim_cur > used ? (size_t)rl.rlim_cur - used : 0;
}

ADSM__PRIVATE size_t adsm__cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (size_t)n : 1;
}

/* The number in file `path` (a cgroup limit), or SIZE_MAX where it cannot be read or says "max". */
ADSM__PRIVATE size_t adsm__read_limit(const char *path) {
    char text[64];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return SIZE_MAX;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return SIZE_MAX;
    text[n] = 0;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    return end == text || v >= SIZE_MAX ? SIZE_MAX : (size_t)v;
}

/* The smallest memory limit on cgroup `dir` (under `root`) and its ancestors, in `file`. */
ADSM__PRIVATE size_t adsm__cgroup_chain_limit(const char *root, const char *dir, const char *file) {
    char path[512], at[384];
    size_t limit = SIZE_MAX;
    snprintf(at, sizeof at, "%s", dir);
    for (;;) {
        size_t len = strlen(at);
        while (len > 0 && at[len - 1] == '/') at[--len] = 0; /* "/a/b/" and "/" alike */
        snprintf(path, sizeof path, "%s%s/%s", root, at, file);
        limit = ADSM__MIN(limit, adsm__read_limit(path));
        char *slash = strrchr(at, '/');
        if (!slash) break;
        *slash = 0; /* the parent; "" is the root itself, read last */
    }
    return limit;
}

/* The memory limit of this process's cgroup, the smallest of its own and its ancestors' (cgroup
 * v2: memory.max; v1: memory/.../memory.limit_in_bytes), or SIZE_MAX where none is set or none
 * can be read. A container limited to a few GiB on a large host would otherwise get an emulated
 * device sized from the host's memory, and the kernel's OOM killer, without a word, once the
 * program used it. `proc_cgroup` is /proc/self/cgroup and `root` the cgroup mount; tests pass
 * others. */
ADSM__PRIVATE size_t adsm__cgroup_memory_limit(const char *proc_cgroup, const char *root) {
    FILE *f = fopen(proc_cgroup, "re");
    if (!f) return SIZE_MAX;
    char line[512], dir[384];
    size_t limit = SIZE_MAX;
    while (fgets(line, sizeof line, f)) { /* "id:controllers:/path" */
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        snprintf(dir, sizeof dir, "%s", c2 + 1);
        dir[strcspn(dir, "\n")] = 0;
        char v1_root[400];
        if (c2 == c1 + 1) { /* cgroup v2: no controller list */
            limit = ADSM__MIN(limit, adsm__cgroup_chain_limit(root, dir, "memory.max"));
            continue;
        }
        *c2 = 0;
        char *save = NULL; /* strtok_r: the program's threads may be using strtok */
        for (char *ctl = strtok_r(c1 + 1, ",", &save); ctl; ctl = strtok_r(NULL, ",", &save))
            if (strcmp(ctl, "memory") == 0) {
                snprintf(v1_root, sizeof v1_root, "%s/memory", root);
                limit = ADSM__MIN(limit, adsm__cgroup_chain_limit(v1_root, dir, "memory.limit_in_bytes"));
            }
    }
    fclose(f);
    return limit;
}

/* The memory this process may use: the machine's, or less where its cgroup is limited. */
ADSM__PRIVATE size_t adsm__phys_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t phys = pages <= 0 || page <= 0 ? (size_t)1 << 32 : (size_t)pages * (size_t)page;
    return ADSM__MIN(phys, adsm__cgroup_memory_limit("/proc/self/cgroup", "/sys/fs/cgroup"));
}

/* ---- signal dispositions ---------------------------------------------------------------- */
/* adsm defines sigaction() itself (fault.h) so that a program installing a SIGSEGV handler
 * after adsm does not unhook it; adsm's own changes go to libc's. Resolved in normal context
 * (initialisation) so signal-context callers find it cached. */
typedef int (*adsm__sigaction_fn)(int, const struct sigaction *, struct sigaction *);
#ifndef ADSM_NO_INTERPOSE_SIGNALS
static adsm__sigaction_fn adsm__real_sigaction_fn;
#endif

ADSM__PRIVATE adsm__sigaction_fn adsm__real_sigaction(void) {
#ifdef ADSM_NO_INTERPOSE_SIGNALS
    return sigaction;
#else
    adsm__sigaction_fn f = __atomic_load_n(&adsm__real_sigaction_fn, __ATOMIC_ACQUIRE);
    if (!f) {
        *(void **)&f = dlsym(RTLD_NEXT, "sigaction");
        if (!f) *(void **)&f = dlsym(RTLD_DEFAULT, "__sigaction"); /* adsm in the main program, linked statically */
        __atomic_store_n(&adsm__real_sigaction_fn, f, __ATOMIC_RELEASE);
    }
    return f;
#endif
}

#ifndef ADSM_NO_INTERPOSE_SIGNALS
/* libc's own signal-mask calls, behind adsm's pthread_sigmask/sigprocmask (fault.h). Resolved
 * at initialisation too, so a first call from a signal handler finds them cached. */
typedef int (*adsm__sigmask_fn)(int, const sigset_t *, sigset_t *);
static adsm__sigmask_fn adsm__real_sigmask_fns[2];

ADSM__PRIVATE adsm__sigmask_fn adsm__real_sigmask(int which) {
    static const char *const names[2] = {"pthread_sigmask", "sigprocmask"};
    static const char *const static_names[2] = {"__pthread_sigmask", "__sigprocmask"};
    adsm__sigmask_fn f = __atomic_load_n(&adsm__real_sigmask_fns[which], __ATOMIC_ACQUIRE);
    if (!f) {
        *(void **)&f = dlsym(RTLD_NEXT, names[which]);
        if (!f) *(void **)&f = dlsym(RTLD_DEFAULT, static_names[which]);
        __atomic_store_n(&adsm__real_sigmask_fns[which], f, __ATOMIC_RELEASE);
    }
    return f;
}
#endif

/* Restores the default action of sig (async-signal-safe once adsm__real_sigaction resolved). */
ADSM__PRIVATE void adsm__default_action(int sig) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    adsm__real_sigaction()(sig, &sa, NULL);
}

/* ---- per-thread error text ---------------------------------------------------------------- */
static __thread char adsm__tls_error[512];
static __thread adsm_result adsm__tls_result;

ADSM__PRIVATE adsm_result adsm__fail(adsm_result code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(adsm__tls_error, sizeof adsm__tls_error, fmt, ap);
    va_end(ap);
    adsm__tls_result = code;
    return code;
}

/* The calling thread's error, kept across a clean-up that may fail itself: the first error is the
 * one the program needs, so the clean-up's must not replace it. */
typedef struct adsm__kept_error {
    adsm_result code;
    char text[sizeof adsm__tls_error];
} adsm__kept_error;

ADSM__PRIVATE void adsm__keep_error(adsm__kept_error *k) {
    k->code = adsm__tls_result;
    memcpy(k->text, adsm__tls_error, sizeof k->text);
}

ADSM__PRIVATE adsm_result adsm__restore_error(const adsm__kept_error *k) {
    adsm__tls_result = k->code;
    memcpy(adsm__tls_error, k->text, sizeof adsm__tls_error);
    return k->code;
}

ADSM__PRIVATE void adsm__clear_error(void) {
    adsm__tls_result = ADSM_OK;
    adsm__tls_error[0] = 0;
}

/* ---- machine context ------------------------------------------------------------------------ */
#include <ucontext.h>

/* Whether the faulting access was a write, from the machine context the kernel saved: the page
 * fault error code on x86-64 (bit 1), the ESR's WnR bit for data aborts on aarch64. Returns 1,
 * 0, or -1 when this architecture is not decoded (callers then assume a write). Signal-safe. */
ADSM__PRIVATE int adsm__fault_is_write(const void *context) {
    const ucontext_t *uc = (const ucontext_t *)context;
#if defined(__x86_64__)
    return (uc->uc_mcontext.gregs[REG_ERR] & 2) ? 1 : 0;
#elif defined(__aarch64__)
    const unsigned char *p = (const unsigned char *)uc->uc_mcontext.__reserved;
    const unsigned char *end = p + sizeof uc->uc_mcontext.__reserved;
    while (p + 8 <= end) {
        uint32_t magic, size;
        memcpy(&magic, p, 4);
        memcpy(&size, p + 4, 4);
        if (magic == 0 || size < 8) break;
        if (magic == 0x45535201u) { /* ESR_MAGIC */
            uint64_t esr;
            memcpy(&esr, p + 8, 8);
            return (esr >> 6) & 1 ? 1 : 0; /* ISS.WnR */
        }
        p += size;
    }
    return -1;
#else
    (void)uc;
    return -1;
#endif
}

#endif /* ADSM__OS_INCLUDED */
