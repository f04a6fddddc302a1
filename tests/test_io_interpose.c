/* tests/test_io_interpose.c -- ADSM_INTERPOSE_IO and ADSM_INTERPOSE_MEM: the plain libc names
 * read, write, pread, pwrite, fread, fwrite, readv, writev, memset and memcpy work on shared
 * memory.
 *
 * This translation unit defines the two macros, so the program's read, write, ... are adsm's:
 * calls written here, calls through pointers, and calls other modules make (found with
 * dlsym(RTLD_DEFAULT), as a shared library's calls would be) all go through adsm on shared
 * memory and straight to libc on plain memory. Before adsm_init they are plain libc and must not
 * start the runtime. The reference for every comparison is libc itself, found with
 * dlsym(RTLD_NEXT). memset/memcpy are called through volatile pointers so the compiler cannot
 * inline them (the documented limit of ADSM_INTERPOSE_MEM). Each test runs in its own process. */
#define ADSM_INTERPOSE_IO
#define ADSM_INTERPOSE_MEM
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>

#include "tests/protocol_common.h"
#include "tests/io_common.h"

/* exact block states and bytes: rolling follows single blocks (adsm_config.block_exact) */
static void block_by_block(void) { test_block_exact = 1; }

TestSuite(interpose, .timeout = 30, .init = block_by_block);

#define TAIL ((size_t)1000)

/* libc's own functions, past this program's definitions */
static io_fns libc_real;
/* the plain names as written in this file (adsm's, defined by this translation unit) */
static const io_fns plain_names = {"plain names", read, write, pread, pwrite, fread, fwrite};
/* the plain names as any other module of the program finds them */
static io_fns global_names;

static void *(*volatile memset_p)(void *, int, size_t) = memset;
static void *(*volatile memcpy_p)(void *, const void *, size_t) = memcpy;

static void *sym(void *handle, const char *name) {
    void *p = dlsym(handle, name);
    cr_assert_not_null(p, "dlsym(%s)", name);
    return p;
}

static void resolve(void) {
    libc_real.name = "libc";
    *(void **)&libc_real.read = sym(RTLD_NEXT, "read");
    *(void **)&libc_real.write = sym(RTLD_NEXT, "write");
    *(void **)&libc_real.pread = sym(RTLD_NEXT, "pread");
    *(void **)&libc_real.pwrite = sym(RTLD_NEXT, "pwrite");
    *(void **)&libc_real.fread = sym(RTLD_NEXT, "fread");
    *(void **)&libc_real.fwrite = sym(RTLD_NEXT, "fwrite");
    global_names.name = "dlsym(RTLD_DEFAULT)";
    *(void **)&global_names.read = sym(RTLD_DEFAULT, "read");
    *(void **)&global_names.write = sym(RTLD_DEFAULT, "write");
    *(void **)&global_names.pread = sym(RTLD_DEFAULT, "pread");
    *(void **)&global_names.pwrite = sym(RTLD_DEFAULT, "pwrite");
    *(void **)&global_names.fread = sym(RTLD_DEFAULT, "fread");
    *(void **)&global_names.fwrite = sym(RTLD_DEFAULT, "fwrite");
    io_ref = &libc_real;
    signal(SIGPIPE, SIG_IGN);
}

/* White-box: the emulated device's process runs (it is not a child of the program: its
 * /proc/PID/comm names it). */
static int device_process_alive(void) {
    const adsm__emu *e = (const adsm__emu *)adsm__rt.be_ctx;
    char path[64], comm[32] = "";
    if (!e || e->child <= 0) return 0;
    snprintf(path, sizeof path, "/proc/%d/comm", (int)e->child);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int named = fgets(comm, sizeof comm, f) && strncmp(comm, "adsm-emu-device", 15) == 0;
    fclose(f);
    return named;
}

static void start(adsm_protocol_kind protocol, size_t bs) {
    resolve();
    init(ADSM_BACKEND_EMU, protocol, bs, 4096);
    scratch = alloc(4096);
}

/* The program's symbols are adsm's, for this file and for every other module. */
Test(interpose, libc_names_are_adsms_for_every_module) {
    resolve();
    cr_assert_eq((void *)global_names.read, (void *)read);
    cr_assert_eq((void *)global_names.fwrite, (void *)fwrite);
    cr_assert_eq(sym(RTLD_DEFAULT, "memset"), (void *)memset);
    cr_assert_eq(sym(RTLD_DEFAULT, "memcpy"), (void *)memcpy);
    cr_assert_neq((void *)libc_real.read, (void *)read);
    cr_assert_neq(sym(RTLD_NEXT, "memcpy"), (void *)memcpy);
}

/* ---- before adsm_init --------------------------------------------------------------------------- */

/* Before adsm_init there is no shared memory: the interposed calls are libc's, errors included,
 * and none of them starts the runtime (no object, no device process, no thread); adsm_init then
 * succeeds as a first initialisation. */
Test(interpose, before_init_plain_behaviour_and_no_runtime) {
    resolve();
    clear_adsm_env();
    int threads = thread_count();
    CTX("before adsm_init");
    rng_seed(5);
    size_t len = 10000;
    unsigned char *data = random_bytes(len), *buf = xmalloc(len), *ref = xmalloc(len);
    const io_fns *fns[] = {&plain_names, &global_names};
    for (int k = 0; k < 2; k++) {
        io_test = fns[k];
        for (io_op op = OP_READ; op <= OP_FWRITE; op++) {
            CTX("before adsm_init, %s through %s", op_names[op], fns[k]->name);
            memcpy(buf, data, len);
            memcpy(ref, data, len);
            file_case(op, buf, ref, len, NULL, 0, 100, op_stream(op) ? 12 : 1, 700, 30, 9000, 0);
        }
    }
    CTX("before adsm_init, memset/memcpy");
    memset_p(buf, 0x5c, len);
    for (size_t i = 0; i < len; i++) cr_assert_eq(buf[i], 0x5c);
    memcpy_p(buf + 10, data, 5000);
    expect_same_bytes(data, buf + 10, 5000, "memcpy");
    CTX("before adsm_init, errors");
    int fd = temp_file("x", 1);
    close(fd);
    errno = 0;
    cr_assert_eq(read(fd, buf, 10), -1);
    cr_assert_eq(errno, EBADF);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    alarms = 0;
    interrupt_in(30);
    errno = 0;
    cr_assert_eq(read(p[0], buf, 10), -1);
    cr_assert_eq(errno, EINTR);
    no_interrupt();
    close(p[0]);
    close(p[1]);

    adsm_stats s;
    cr_assert_eq(adsm_get_stats(&s), ADSM_OK);
    cr_assert_eq(s.objects, 0);
    cr_assert_eq(adsm_block_state(buf), 0);
    cr_assert_null(adsm__rt.be_ctx, "an interposed call started the device"); /* white-box */
    cr_assert_eq(thread_count(), threads, "an interposed call started runtime threads");

    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = ADSM_BACKEND_EMU;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "adsm_init after interposed calls: %s", adsm_last_error());
    cr_assert(device_process_alive(), "the device check itself works");
    adsm_shutdown();
    free(data);
    free(buf);
    free(ref);
}

/* ---- on shared memory ----------------------------------------------------------------------------- */

/* Each of the six calls, through the plain names, a pointer, and the global symbol: a buffer
 * starting and ending inside blocks of an object a kernel wrote, compared with libc on plain
 * memory, with the protocol's states and bytes moved. */
static void core(void) {
    size_t bs = adsm_block_size(), osize = 5 * bs + TAIL;
    ssize_t (*volatile read_p)(int, void *, size_t) = read;
    ssize_t (*volatile write_p)(int, const void *, size_t) = write;
    ssize_t (*volatile pread_p)(int, void *, size_t, off_t) = pread;
    ssize_t (*volatile pwrite_p)(int, const void *, size_t, off_t) = pwrite;
    size_t (*volatile fread_p)(void *, size_t, size_t, FILE *) = fread;
    size_t (*volatile fwrite_p)(const void *, size_t, size_t, FILE *) = fwrite;
    io_fns pointers = {"pointers", read_p, write_p, pread_p, pwrite_p, fread_p, fwrite_p};
    const io_fns *fns[] = {&plain_names, &pointers, &global_names};
    unsigned char *obj = alloc(osize), *mirror = xmalloc(osize);
    obj_at o = {0, osize, 'I'};
    for (int k = 0; k < 3; k++) {
        io_test = fns[k];
        for (io_op op = OP_READ; op <= OP_FWRITE; op++) {
            size_t item = op_stream(op) ? 12 : 1, at = bs / 2 + 100, n = items(3 * bs + 777 - at, item);
            CTX("%s/%zu %s through %s", adsm_protocol_name(), bs, op_names[op], fns[k]->name);
            prep(obj, osize, 'I', 1000 * (int32_t)op, mirror);
            file_case(op, obj, mirror, osize, &o, 1, at, item, n, 1234, n * item + 5000, 1);
            CTX("%s/%zu %s through %s, short at end of file", adsm_protocol_name(), bs, op_names[op], fns[k]->name);
            prep(obj, osize, 'I', 1000 * (int32_t)op + 1, mirror);
            file_case(op, obj, mirror, osize, &o, 1, at, item, n, 100, 100 + bs + 50, 1);
        }
    }
    adsm_free(obj);
    free(mirror);
}

/* A file written with plain fwrite / write straight from a kernel's output holds its results. */
static void kernel_output(void) {
    size_t osize = 200 * KIB + TAIL, n = osize / 4;
    int32_t *a = alloc(osize), *c = alloc(osize);
    for (size_t i = 0; i < n; i++) wr(&a[i], 3 * (int32_t)i);
    CALL_OK(k_add, grid_for(n), c, a, a, n);
    sync_ok();
    for (int use_stream = 0; use_stream < 2; use_stream++) {
        CTX("%s kernel output through plain %s", adsm_protocol_name(), use_stream ? "fwrite" : "write");
        int fd = temp_file(NULL, 0);
        if (use_stream) {
            FILE *f = fdopen(dup(fd), "w");
            cr_assert_eq(fwrite(c, sizeof *c, n, f), n);
            cr_assert_eq(fclose(f), 0);
        } else {
            cr_assert_eq(write(fd, c, osize), (ssize_t)osize);
        }
        size_t len;
        unsigned char *got = file_contents(fd, &len);
        cr_assert_eq(len, osize);
        for (size_t i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, got + 4 * i, 4);
            cr_assert_eq(v, 6 * (int32_t)i, "%s: element %zu", io_ctx, i);
        }
        free(got);
        close(fd);
        CALL_OK(k_add, grid_for(n), c, a, a, n); /* c Invalid again for the next round */
        sync_ok();
    }
    adsm_free(a);
    adsm_free(c);
}

/* Errors through the plain names on shared memory: EBADF, EINTR, ESPIPE; memory unchanged. */
static void errors(void) {
    size_t bs = adsm_block_size(), osize = 3 * bs;
    unsigned char *obj = alloc(osize), *mirror = xmalloc(osize);
    CTX("%s errors through plain names", adsm_protocol_name());
    prep(obj, osize, 'I', 70, mirror);
    int fd = temp_file("x", 1);
    close(fd);
    errno = 0;
    cr_assert_eq(read(fd, obj + 10, bs), -1);
    cr_assert_eq(errno, EBADF);
    errno = 0;
    cr_assert_eq(write(fd, obj + 10, bs), -1);
    cr_assert_eq(errno, EBADF);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    errno = 0;
    cr_assert_eq(pread(p[0], obj + 10, bs, 0), -1);
    cr_assert_eq(errno, ESPIPE);
    alarms = 0;
    interrupt_in(30);
    errno = 0;
    cr_assert_eq(read(p[0], obj + 10, bs), -1);
    cr_assert_eq(errno, EINTR);
    no_interrupt();
    cr_assert_geq(alarms, 1);
    FILE *f = fopen("/dev/null", "w");
    errno = 0;
    cr_assert_eq(fread(obj + 10, 1, bs, f), 0);
    cr_assert(ferror(f));
    cr_assert_eq(errno, EBADF, "fread on a write-only stream: errno %d", errno);
    fclose(f);
    /* a short read from a pipe does not wait for more */
    write_all_fd(p[1], "hello", 5);
    cr_assert_eq(read(p[0], obj + bs - 2, 2 * bs), 5);
    memcpy(mirror + bs - 2, "hello", 5);
    close(p[0]);
    close(p[1]);
    expect_same_bytes(mirror, obj, osize, "memory");
    adsm_free(obj);
    free(mirror);
}

/* After adsm_init, calls on plain memory go straight to libc: same results, nothing counted. */
static void plain_memory(void) {
    io_test = &plain_names;
    size_t len = 30000;
    unsigned char *a = random_bytes(len), *b = xmalloc(len);
    memcpy(b, a, len);
    reset();
    for (io_op op = OP_READ; op <= OP_FWRITE; op++) {
        CTX("%s plain memory through %s", adsm_protocol_name(), op_names[op]);
        file_case(op, a, b, len, NULL, 0, 333, op_stream(op) ? 12 : 1, 2000, 10, 20000, 0);
    }
    memset_p(a, 1, len);
    memcpy_p(a + 100, b, 1000);
    memset(b, 1, len);
    memcpy(b + 100, a + 100, 1000);
    expect_same_bytes(b, a, len, "plain memory");
    adsm_stats s = stats();
    cr_assert_eq(s.h2d_bytes + s.d2h_bytes + s.d2d_bytes + s.read_faults + s.write_faults, 0);
    free(a);
    free(b);
}

/* memset and memcpy by their libc names: state-aware like adsm_memset / adsm_memcpy. */
static void mem_names(void) {
    size_t bs = adsm_block_size(), osize = 5 * bs + TAIL;
    int batch = proto_is("batch"), lazy = proto_is("lazy");
    unsigned char *x = alloc(osize), *y = alloc(osize), *mx = xmalloc(osize), *my = xmalloc(osize);
    unsigned char *plain = random_bytes(osize);

    CTX("%s memset through the libc name, whole unit", adsm_protocol_name());
    prep(x, osize, 'I', 1, mx);
    size_t a = lazy ? 0 : bs, n = lazy ? osize : 2 * bs;
    memset(mx + a, 0x99, n);
    reset();
    memset_p(x + a, 0x99, n);
    EXPECT_MOVED(0, 0, 0);
    EXPECT_STATE(x + a, batch ? 'D' : 'I');
    expect_same_bytes(mx, x, osize, "memset object");

    CTX("%s memset through the libc name, inside blocks", adsm_protocol_name());
    prep(x, osize, 'I', 2, mx);
    memset(mx + bs / 2, 0x98, bs);
    reset();
    memset_p(x + bs / 2, 0x98, bs);
    EXPECT_MOVED(0, batch ? 0 : lazy ? osize : 2 * bs, 0);
    EXPECT_STATE(x, 'D');
    expect_same_bytes(mx, x, osize, "memset object");

    CTX("%s memcpy through the libc name, device to device", adsm_protocol_name());
    prep(x, osize, 'I', 3, mx);
    prep(y, osize, 'R', 4, my);
    memcpy(my, mx, osize);
    reset();
    memcpy_p(y, x, osize);
    EXPECT_MOVED(0, 0, batch ? 0 : osize);
    EXPECT_STATE(y, batch ? 'D' : 'I');
    expect_same_bytes(my, y, osize, "memcpy destination");

    CTX("%s memcpy through the libc name, plain to shared and back", adsm_protocol_name());
    prep(x, osize, 'I', 5, mx);
    memcpy(mx + bs / 2, plain, bs);
    reset();
    memcpy_p(x + bs / 2, plain, bs);
    EXPECT_MOVED(0, batch ? 0 : lazy ? osize : 2 * bs, 0);
    memcpy_p(plain, x, osize);
    expect_same_bytes(mx, plain, osize, "memcpy back to plain memory");
    adsm_free(x);
    adsm_free(y);
    free(mx);
    free(my);
    free(plain);
}

/* writev and readv (what libstdc++'s streams call) with a shared buffer among plain ones: a
 * kernel's output written to a file after a plain header, the file read back into a plain
 * header and the (protected) object; on a pipe holding less than the buffers ask for, readv
 * returns what waits instead of blocking for the rest. Through the plain names and the global
 * symbols. */
static void vectors(void) {
    size_t osize = 200 * KIB + TAIL, n = osize / 4;
    int32_t *a = alloc(osize), *c = alloc(osize);
    for (size_t i = 0; i < n; i++) wr(&a[i], 5 * (int32_t)i);
    ssize_t (*global_writev)(int, const struct iovec *, int) = (ssize_t(*)(int, const struct iovec *, int))sym(RTLD_DEFAULT, "writev");
    ssize_t (*global_readv)(int, const struct iovec *, int) = (ssize_t(*)(int, const struct iovec *, int))sym(RTLD_DEFAULT, "readv");
    cr_assert_eq((void *)global_writev, (void *)writev);
    for (int k = 0; k < 2; k++) {
        CTX("%s writev/readv through %s", adsm_protocol_name(), k ? "the global symbols" : "the plain names");
        CALL_OK(k_add, grid_for(n), c, a, a, n); /* c: a kernel's output, not on the host yet */
        sync_ok();
        char head[100] = "a header in plain memory";
        struct iovec out[2] = {{head, sizeof head}, {c, osize}};
        int fd = temp_file(NULL, 0);
        cr_assert_eq((k ? global_writev : writev)(fd, out, 2), (ssize_t)(sizeof head + osize), "%s: %s", io_ctx,
                     strerror(errno));
        size_t len;
        unsigned char *got = file_contents(fd, &len);
        cr_assert_eq(len, sizeof head + osize);
        cr_assert_eq(memcmp(got, head, sizeof head), 0);
        for (size_t i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, got + sizeof head + 4 * i, 4);
            cr_assert_eq(v, 10 * (int32_t)i, "%s: element %zu written", io_ctx, i);
        }
        free(got);
        CALL_OK(k_add, grid_for(n), c, a, a, n); /* protected again */
        sync_ok();
        for (size_t i = 0; i < n; i++) wr(&a[i], -1); /* a: Dirty, about to be read over */
        char head_back[100] = "";
        struct iovec in[3] = {{head_back, sizeof head_back}, {a, osize / 2}, {(char *)a + osize / 2, osize - osize / 2}};
        cr_assert_eq(lseek(fd, 0, SEEK_SET), 0);
        cr_assert_eq((k ? global_readv : readv)(fd, in, 3), (ssize_t)(sizeof head + osize), "%s: %s", io_ctx,
                     strerror(errno));
        cr_assert_eq(memcmp(head_back, head, sizeof head), 0);
        for (size_t i = 0; i < n; i++) cr_assert_eq(rd(&a[i]), 10 * (int32_t)i, "%s: element %zu read", io_ctx, i);
        close(fd);
        for (size_t i = 0; i < n; i++) wr(&a[i], 5 * (int32_t)i);
    }
    CTX("%s readv from a pipe with less waiting", adsm_protocol_name());
    int p[2];
    cr_assert_eq(pipe(p), 0);
    write_all_fd(p[1], "twelve bytes", 12);
    struct iovec in[2] = {{c, 8}, {(char *)c + 4096, 4096}};
    cr_assert_eq(readv(p[0], in, 2), 12, "%s", strerror(errno));
    cr_assert_eq(memcmp(c, "twelve b", 8), 0);
    cr_assert_eq(memcmp((char *)c + 4096, "ytes", 4), 0);
    close(p[0]);
    close(p[1]);
    adsm_free(a);
    adsm_free(c);
}

#define PER_PROTOCOL(fn)                                                                               \
    Test(interpose, fn##_batch) { start(ADSM_PROTOCOL_BATCH, 4096); fn(); adsm_shutdown(); }           \
    Test(interpose, fn##_lazy) { start(ADSM_PROTOCOL_LAZY, 4096); fn(); adsm_shutdown(); }             \
    Test(interpose, fn##_rolling) { start(ADSM_PROTOCOL_ROLLING, 4096); fn(); adsm_shutdown(); }       \
    Test(interpose, fn##_rolling_512k) { start(ADSM_PROTOCOL_ROLLING, 512 * KIB); fn(); adsm_shutdown(); }

PER_PROTOCOL(core)
PER_PROTOCOL(kernel_output)
PER_PROTOCOL(vectors)
PER_PROTOCOL(errors)
PER_PROTOCOL(plain_memory)
PER_PROTOCOL(mem_names)
