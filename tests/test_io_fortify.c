/* tests/test_io_fortify.c -- ADSM_INTERPOSE_IO and ADSM_INTERPOSE_MEM in a _FORTIFY_SOURCE build.
 *
 * Where the compiler knows a buffer's size, glibc's fortify wrappers call the checked versions
 * (__read_chk, __pread_chk or __pread64_chk, __fread_chk, __memcpy_chk, __memset_chk) instead of
 * the plain names. Those must be adsm's too: libc's would read into a protected shared page and
 * fail with EFAULT (read, pread, fread), or fetch blocks adsm need not fetch (memcpy, memset).
 * BUILD.bazel builds this file twice, -O2 with _FORTIFY_SOURCE=3 and -O2 with _FORTIFY_SOURCE=2
 * and _FILE_OFFSET_BITS=64 (where pread is glibc's pread64); tests/header_compile.sh builds a
 * smaller program of the same kind with each installed compiler, C and C++.
 *
 * Each case runs on a 4-block object a kernel wrote (every block Invalid, its pages protected),
 * once through a pointer whose size the compiler knows (alloc_size: the checked versions) and
 * once through one it cannot see (the plain names). `libc_alone_would_fail` shows the same calls
 * to libc's own functions, found past adsm's with dlsym(RTLD_NEXT), do go wrong there, so the
 * cases above cannot pass without adsm's definitions. A checked call that overflows its buffer
 * still ends the process as libc's does (SIGABRT, "buffer overflow detected"). Each test runs in
 * its own process. */
#define ADSM_INTERPOSE_IO
#define ADSM_INTERPOSE_MEM
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "tests/protocol_common.h"
#include "tests/io_common.h"

#if !defined(__USE_FORTIFY_LEVEL) || __USE_FORTIFY_LEVEL < 2
#error "tests/test_io_fortify.c needs -O2 -D_FORTIFY_SOURCE=2 or 3 (BUILD.bazel passes them)"
#endif

#define BS ((size_t)4096)
#define OBJ (4 * BS)

static void block_by_block(void) { test_block_exact = 1; }

TestSuite(fortify, .timeout = 30, .init = block_by_block);

typedef enum { F_READ, F_PREAD, F_FREAD, F_MEMCPY, F_MEMSET } fop;
static const char *const fop_names[] = {"read", "pread", "fread", "memcpy", "memset"};

/* The names a call of op reaches in this build: checked (the compiler knows the size) or plain.
 * With _FILE_OFFSET_BITS=64 glibc's headers turn pread into pread64. */
#ifdef __USE_FILE_OFFSET64
#define PREAD_SYMBOL "pread64"
#else
#define PREAD_SYMBOL "pread"
#endif
static const char *symbol_of(fop op, int checked) {
    static const char *const plain[] = {"read", PREAD_SYMBOL, "fread", "memcpy", "memset"};
    static const char *const chk[] = {"__read_chk", "__" PREAD_SYMBOL "_chk", "__fread_chk", "__memcpy_chk",
                                      "__memset_chk"};
    return checked ? chk[op] : plain[op];
}

/* adsm_alloc as a function whose result's size the compiler knows (alloc_size), so fortified
 * calls on the result are the checked ones; and one it cannot see through. */
void *sized_alloc(size_t n) __attribute__((noinline, alloc_size(1))); /* not static: clang forgets alloc_size there */
void *sized_alloc(size_t n) { return alloc(n); }
static void *(*volatile opaque_alloc)(size_t) = alloc;

/* A count the compiler cannot fold: the checked version, not a compile-time verdict. */
static size_t runtime(size_t n) {
    volatile size_t v = n;
    return v;
}

typedef struct fcase {
    fop op;
    int checked; /* through a pointer of known size */
} fcase;

static fcase all_cases[] = {{F_READ, 1},   {F_PREAD, 1},  {F_FREAD, 1},  {F_MEMCPY, 1}, {F_MEMSET, 1},
                            {F_READ, 0},   {F_PREAD, 0},  {F_FREAD, 0},  {F_MEMCPY, 0}, {F_MEMSET, 0}};

/* The runtime, for the object of each case. */
static void start(void) { init(ADSM_BACKEND_EMU, ADSM_PROTOCOL_ROLLING, BS, 64); }

/* obj (OBJ bytes) gets what a kernel wrote, every block Invalid; nothing moved yet. */
static void make_invalid(unsigned char *obj) {
    CALL_OK(k_fill, grid_for(OBJ / 4), (int32_t *)obj, OBJ / 4, 7);
    sync_ok();
    expect_states(obj, OBJ, 'I');
    reset();
}

/* Each case's body is inlined twice, once on each kind of pointer, so that the compiler's
 * knowledge of the object's size reaches the calls (a pointer passed to a function, or merged
 * from both, has no known size). */
#define INLINE static inline __attribute__((always_inline))
#define ON_EACH_POINTER(checked, body, c)                 \
    do {                                                  \
        start();                                          \
        if (checked) {                                    \
            unsigned char *obj_ = sized_alloc(OBJ);       \
            make_invalid(obj_);                           \
            body(c, obj_);                                \
        } else {                                          \
            unsigned char *obj_ = opaque_alloc(OBJ);      \
            make_invalid(obj_);                           \
            body(c, obj_);                                \
        }                                                 \
        adsm_shutdown();                                  \
    } while (0)

/* The bytes the file holds (and memcpy's source): at offset `at` of the file for pread. */
#define FILE_AT ((off_t)100)
static unsigned char *file_bytes(void) {
    unsigned char *data = xmalloc(OBJ + (size_t)FILE_AT);
    for (size_t i = 0; i < OBJ + (size_t)FILE_AT; i++) data[i] = (unsigned char)(i * 131 + 17);
    return data;
}

ParameterizedTestParameters(fortify, calls_on_protected_shared_memory) {
    return cr_make_param_array(fcase, all_cases, sizeof all_cases / sizeof *all_cases);
}

/* The whole object through one call: the right count, bytes and errno, every block Dirty (or
 * still Invalid after memset, which runs on the device), and nothing fetched: adsm claimed whole
 * blocks instead of letting a fault bring them in. */
INLINE void calls_on(const fcase *c, unsigned char *obj) {
    CTX("%s through a pointer of %s size (%s)", fop_names[c->op], c->checked ? "known" : "unknown",
        symbol_of(c->op, c->checked));
    size_t known = __glibc_objsize0(obj);
    if (c->checked)
        cr_assert_eq(known, OBJ, "%s: the compiler does not know the object's size (%zu): these calls would not "
                     "be the checked ones", io_ctx, known);
    else
        cr_assert_eq(known, (size_t)-1, "%s: the compiler knows the object's size", io_ctx);
    unsigned char *data = file_bytes(), *want = xmalloc(OBJ);
    int fd = temp_file(data, OBJ + (size_t)FILE_AT);
    FILE *f = fdopen(fd, "r");
    cr_assert_not_null(f);
    size_t n = runtime(OBJ);
    errno = ERRNO_SENTINEL;
    switch (c->op) {
    case F_READ:
        cr_assert_eq(read(fd, obj, n), (ssize_t)OBJ, "%s: %s", io_ctx, strerror(errno));
        memcpy(want, data, OBJ);
        break;
    case F_PREAD:
        cr_assert_eq(pread(fd, obj, n, FILE_AT), (ssize_t)OBJ, "%s: %s", io_ctx, strerror(errno));
        memcpy(want, data + FILE_AT, OBJ);
        break;
    case F_FREAD:
        cr_assert_eq(fread(obj, 1, n, f), OBJ, "%s: ferror %d, %s", io_ctx, ferror(f), strerror(errno));
        memcpy(want, data, OBJ);
        break;
    case F_MEMCPY:
        cr_assert_eq(memcpy(obj, data, n), obj);
        memcpy(want, data, OBJ);
        break;
    case F_MEMSET:
        cr_assert_eq(memset(obj, 0x5a, n), obj);
        memset(want, 0x5a, OBJ);
        break;
    }
    cr_assert_eq(errno, ERRNO_SENTINEL, "%s: errno changed to %d", io_ctx, errno);
    expect_states(obj, OBJ, c->op == F_MEMSET ? 'I' : 'D');
    adsm_stats s = stats();
    cr_assert_eq(s.d2h_bytes, 0, "%s: %llu bytes fetched: the call was not adsm's", io_ctx,
                 (unsigned long long)s.d2h_bytes);
    expect_same_bytes(want, obj, OBJ, "the object's bytes");
    fclose(f);
    adsm_free(obj);
    free(data);
    free(want);
}

ParameterizedTest(fcase *c, fortify, calls_on_protected_shared_memory) { ON_EACH_POINTER(c->checked, calls_on, c); }

ParameterizedTestParameters(fortify, libc_alone_would_fail) {
    return cr_make_param_array(fcase, all_cases, sizeof all_cases / sizeof *all_cases);
}

/* The control: the function each case above reaches, but libc's own (dlsym(RTLD_NEXT)), on the
 * same object. The I/O calls fail with EFAULT (the kernel does not fault on a protected page);
 * memcpy and memset fault their way in and fetch every block first. And the program's symbol of
 * that name, as every other module finds it (RTLD_DEFAULT), is not libc's but adsm's. */
INLINE void libc_on(const fcase *c, unsigned char *obj) {
    const char *name = symbol_of(c->op, c->checked);
    CTX("libc's %s", name);
    void *libc = dlsym(RTLD_NEXT, name), *program = dlsym(RTLD_DEFAULT, name);
    cr_assert_not_null(libc, "%s: dlsym(RTLD_NEXT, %s)", io_ctx, name);
    cr_assert_not_null(program, "%s: dlsym(RTLD_DEFAULT, %s)", io_ctx, name);
    cr_assert_neq(program, libc, "the program's %s is libc's: adsm does not define it", name);
    unsigned char *data = file_bytes();
    int fd = temp_file(data, OBJ + (size_t)FILE_AT);
    FILE *f = fdopen(fd, "r");
    cr_assert_not_null(f);
    size_t n = runtime(OBJ);
    switch (c->op) {
    case F_READ: {
        ssize_t r = c->checked ? ((ssize_t(*)(int, void *, size_t, size_t))libc)(fd, obj, n, OBJ)
                               : ((ssize_t(*)(int, void *, size_t))libc)(fd, obj, n);
        cr_assert(r == -1 && errno == EFAULT, "%s: returned %zd (%s), expected EFAULT", io_ctx, r, strerror(errno));
        break;
    }
    case F_PREAD: {
        ssize_t r = c->checked ? ((ssize_t(*)(int, void *, size_t, off_t, size_t))libc)(fd, obj, n, FILE_AT, OBJ)
                               : ((ssize_t(*)(int, void *, size_t, off_t))libc)(fd, obj, n, FILE_AT);
        cr_assert(r == -1 && errno == EFAULT, "%s: returned %zd (%s), expected EFAULT", io_ctx, r, strerror(errno));
        break;
    }
    case F_FREAD: {
        size_t r = c->checked ? ((size_t(*)(void *, size_t, size_t, size_t, FILE *))libc)(obj, OBJ, 1, n, f)
                              : ((size_t(*)(void *, size_t, size_t, FILE *))libc)(obj, 1, n, f);
        cr_assert(r < OBJ && ferror(f), "%s: read %zu of %zu bytes, ferror %d", io_ctx, r, OBJ, ferror(f));
        break;
    }
    case F_MEMCPY:
        if (c->checked) ((void *(*)(void *, const void *, size_t, size_t))libc)(obj, data, n, OBJ);
        else ((void *(*)(void *, const void *, size_t))libc)(obj, data, n);
        cr_assert_eq(stats().d2h_bytes, OBJ, "%s: libc's copy should fault every block in", io_ctx);
        break;
    case F_MEMSET:
        if (c->checked) ((void *(*)(void *, int, size_t, size_t))libc)(obj, 0x5a, n, OBJ);
        else ((void *(*)(void *, int, size_t))libc)(obj, 0x5a, n);
        cr_assert_eq(stats().d2h_bytes, OBJ, "%s: libc's memset should fault every block in", io_ctx);
        break;
    }
    fclose(f);
    adsm_free(obj);
    free(data);
}

ParameterizedTest(fcase *c, fortify, libc_alone_would_fail) { ON_EACH_POINTER(c->checked, libc_on, c); }

static fcase checked_cases[] = {{F_READ, 1}, {F_PREAD, 1}, {F_FREAD, 1}, {F_MEMCPY, 1}, {F_MEMSET, 1}};

ParameterizedTestParameters(fortify, overflow_is_still_fatal) {
    return cr_make_param_array(fcase, checked_cases, sizeof checked_cases / sizeof *checked_cases);
}

/* One byte more than the object holds: adsm's checked versions end the process as libc's do
 * (glibc's __chk_fail: "*** buffer overflow detected ***", SIGABRT), before touching anything. */
INLINE void overflow_on(const fcase *c, unsigned char *obj) {
    unsigned char *data = file_bytes();
    cr_assert_eq(__glibc_objsize0(obj), OBJ);
    int fd = temp_file(data, OBJ + (size_t)FILE_AT);
    FILE *f = fdopen(fd, "r");
    cr_assert_not_null(f);
    size_t n = runtime(OBJ + 1);
    switch (c->op) {
    case F_READ: (void)!read(fd, obj, n); break;
    case F_PREAD: (void)!pread(fd, obj, n, 0); break;
    case F_FREAD: (void)!fread(obj, 1, n, f); break;
    case F_MEMCPY: memcpy(obj, data, n); break;
    case F_MEMSET: memset(obj, 0, n); break;
    }
    cr_assert_fail("%s of %zu bytes into a %zu-byte object returned", fop_names[c->op], n, OBJ);
}

ParameterizedTest(fcase *c, fortify, overflow_is_still_fatal, .signal = SIGABRT) {
    ON_EACH_POINTER(1, overflow_on, c);
}
