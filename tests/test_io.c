/* tests/test_io.c -- adsm_read, adsm_pread, adsm_fread, adsm_write, adsm_pwrite, adsm_fwrite on
 * shared memory, on every protocol, with 4 KiB and 512 KiB blocks, on the emu backend.
 *
 * Every call is made twice from identical inputs: libc's on a malloc'd mirror, adsm's on shared
 * memory holding the same bytes. Return value, errno (set to a sentinel before the call), file
 * position, feof and ferror must be identical, then the memory and the files, byte for byte.
 * Where the call landed, the block states and the bytes copied (adsm_reset_stats just before the
 * adsm call) must follow the protocol: bytes read from a file make their blocks Dirty and fetch
 * only the Invalid blocks they cover in part; bytes written to a file fetch the Invalid blocks
 * they cover, which become ReadOnly; batch tracks nothing.
 *
 * One Criterion test per (protocol, block size, function) runs every scenario: buffers starting
 * and ending inside blocks, whole blocks, whole and small objects, end of file, buffers running
 * from an object into plain memory and across two adjacent objects, pipes (short reads, ESPIPE),
 * closed descriptors (EBADF), signals (EINTR), character devices, plain memory, multi-MiB
 * transfers, and files written from kernel results. Each test runs in its own process. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "tests/protocol_common.h"
#include "tests/io_common.h"
#include "tests/seccomp.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>

/* exact block states and bytes: rolling follows single blocks (adsm_config.block_exact) */
static void block_by_block(void) { test_block_exact = 1; }

TestSuite(io, .timeout = 30, .init = block_by_block);

static const io_fns libc_fns = {"libc", read, write, pread, pwrite, fread, fwrite};
static const io_fns adsm_fns = {"adsm", adsm_read, adsm_write, adsm_pread, adsm_pwrite, adsm_fread, adsm_fwrite};

#define TAIL ((size_t)1000) /* objects end 1000 bytes into their last block */

static char prefix[64];    /* "protocol/function/block size" */
/* ---- scenarios ------------------------------------------------------------------------------ */

/* A buffer starting and ending inside blocks, over several blocks, from each state; also in a
 * "safe" object (host address apart from the device address). */
static void sc_inside_blocks(io_op op, char before, int safe) {
    size_t bs = adsm_block_size(), osize = 5 * bs + TAIL, item = op_stream(op) ? 12 : 1;
    CTX("%s inside_blocks from '%c'%s", prefix, before, safe ? ", safe object" : "");
    unsigned char *obj = safe ? adsm_safe_alloc(osize) : alloc(osize), *mirror = xmalloc(osize);
    cr_assert_not_null(obj);
    prep(obj, osize, before, 1000, mirror);
    size_t at = bs / 2 + 100, n = items(3 * bs + 777 - at, item);
    obj_at o = {0, osize, before};
    file_case(op, obj, mirror, osize, &o, 1, at, item, n, 1234, n * item + 5000, 1);
    adsm_free(obj);
    free(mirror);
}

/* Whole blocks (nothing to fetch when reading), the whole object, and an object smaller than a
 * block, whole and in part. */
static void sc_whole_units(io_op op) {
    size_t bs = adsm_block_size(), osize = 5 * bs + TAIL, item = op_stream(op) ? 8 : 1;
    unsigned char *obj = alloc(osize), *mirror = xmalloc(osize);
    obj_at o = {0, osize, 'I'};
    CTX("%s whole blocks 1-2", prefix);
    prep(obj, osize, 'I', 1, mirror);
    file_case(op, obj, mirror, osize, &o, 1, bs, item, items(2 * bs, item), 0, 2 * bs + 10, 1);
    CTX("%s whole object", prefix);
    prep(obj, osize, 'I', 2, mirror);
    file_case(op, obj, mirror, osize, &o, 1, 0, item, items(osize, item), 0, osize, 1);
    adsm_free(obj);

    const size_t small = 3000;
    unsigned char *s = alloc(small);
    obj_at so = {0, small, 'I'};
    CTX("%s small object, whole", prefix);
    prep(s, small, 'I', 3, mirror);
    file_case(op, s, mirror, small, &so, 1, 0, item, items(small, item), 0, small, 1);
    CTX("%s small object, part", prefix);
    prep(s, small, 'I', 4, mirror);
    file_case(op, s, mirror, small, &so, 1, 96, item, items(2000, item), 0, small, 1);
    adsm_free(s);
    free(mirror);
}

/* Reads past the end of the file are short (fread: a partial item) and at the end return 0;
 * the bytes past what was read keep the kernel's values. Writes past the end leave a hole.
 * Zero-byte calls do nothing. */
static void sc_end_of_file(io_op op) {
    size_t bs = adsm_block_size(), osize = 5 * bs + TAIL, item = op_stream(op) ? 12 : 1;
    unsigned char *obj = alloc(osize), *mirror = xmalloc(osize);
    obj_at o = {0, osize, 'I'};
    size_t at = bs / 2 + 100;
    if (op_input(op)) {
        size_t avail = bs + bs / 2 + 10; /* ends inside a block; not a multiple of 12 */
        CTX("%s short read at end of file", prefix);
        prep(obj, osize, 'I', 5, mirror);
        file_case(op, obj, mirror, osize, &o, 1, at, item, items(3 * bs, item), 300, 300 + avail, 1);
        CTX("%s read at end of file", prefix);
        prep(obj, osize, 'I', 6, mirror);
        file_case(op, obj, mirror, osize, &o, 1, at, item, items(3 * bs, item), 5000, 5000, 1);
    } else {
        CTX("%s write past end of file", prefix);
        prep(obj, osize, 'I', 5, mirror);
        file_case(op, obj, mirror, osize, &o, 1, at, item, items(bs + 300, item), 5000, 100, 1);
    }
    CTX("%s zero bytes", prefix);
    prep(obj, osize, 'I', 7, mirror);
    file_case(op, obj, mirror, osize, &o, 1, at, item, 0, 10, 100, 1);
    adsm_free(obj);
    free(mirror);
}

#ifndef TEST_ON_CUDA
/* A buffer from inside the last block of an object into plain memory mapped right after it. */
static void sc_into_plain_memory(io_op op) {
    size_t bs = adsm_block_size(), osize = 3 * bs, plain = 3 * 4096, item = op_stream(op) ? 12 : 1;
    CTX("%s object end into plain memory", prefix);
    unsigned char *obj = alloc(osize), *mirror = xmalloc(osize + plain);
    prep(obj, osize, 'I', 8, mirror);
    unsigned char *after = plain_memory_at(obj + osize, plain);
    unsigned char *noise = random_bytes(plain);
    memcpy(after, noise, plain);
    memcpy(mirror + osize, noise, plain);
    obj_at o = {0, osize, 'I'};
    size_t at = osize - bs / 2 - 100, n = items(bs / 2 + 100 + 5000, item);
    file_case(op, obj, mirror, osize + plain, &o, 1, at, item, n, 0, n * item + 100, 1);
    /* give the address range back to the reservation */
    cr_assert_eq(mmap(after, plain, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0), after);
    adsm_free(obj);
    free(noise);
    free(mirror);
}
#endif

/* A buffer from inside one object into the next one (allocated right after it, when it is
 * adjacent; otherwise the two parts as two calls). */
static void sc_two_objects(io_op op) {
    size_t bs = adsm_block_size(), size = 2 * bs, item = op_stream(op) ? 12 : 1;
    unsigned char *a = alloc(size), *b = alloc(size), *mirror = xmalloc(2 * size);
    CTX("%s two objects", prefix);
    prep(a, size, 'I', 9, mirror);
    prep(b, size, 'R', 90000, mirror + size);
    size_t at = bs + bs / 2, n = items(size + bs + 100 - at, item);
    if (b == a + size) {
        obj_at o[2] = {{0, size, 'I'}, {size, size, 'R'}};
        file_case(op, a, mirror, 2 * size, o, 2, at, item, n, 0, n * item, 1);
    } else {
        cr_log_warn("%s: objects not adjacent (%p, %p): two calls", io_ctx, (void *)a, (void *)b);
        obj_at oa = {0, size, 'I'}, ob = {0, size, 'R'};
        file_case(op, a, mirror, size, &oa, 1, at, item, items(size - at, item), 0, size, 1);
        file_case(op, b, mirror + size, size, &ob, 1, 0, item, items(bs + 100, item), 0, size, 1);
    }
    adsm_free(a);
    adsm_free(b);
    free(mirror);
}

/* Pipes: a read asking more than is there returns what is there without blocking (fread: up to
 * the end of the stream, with a partial item); writes land in order; pread/pwrite fail ESPIPE. */
static void sc_pipe(io_op op) {
    size_t bs = adsm_block_size(), osize = 5 * bs + TAIL, item = op_stream(op) ? 12 : 1;
    size_t at = bs / 2, n = op_input(op) ? items(3 * bs, item) : items(60000 < 3 * bs ? 60000 : 3 * bs, item);
    CTX("%s pipe", prefix);
    unsigned char *obj = alloc(osize), *mirror = xmalloc(osize), *data = random_bytes(1000);
    prep(obj, osize, 'I', 10, mirror);
    int pp[2], sp[2];
    cr_assert_eq(pipe(pp), 0);
    cr_assert_eq(pipe(sp), 0);
    io_end pe = {op_input(op) ? pp[0] : pp[1], NULL}, se = {op_input(op) ? sp[0] : sp[1], NULL};
    if (op_input(op)) {
        write_all_fd(pp[1], data, 1000);
        write_all_fd(sp[1], data, 1000);
        if (op == OP_FREAD) { /* fread reads to the end: close the writers */
            close(pp[1]);
            close(sp[1]);
            pp[1] = sp[1] = -1;
            pe.f = fdopen(pp[0], "r");
            se.f = fdopen(sp[0], "r");
        }
    } else if (op == OP_FWRITE) {
        pe.f = fdopen(pp[1], "w");
        se.f = fdopen(sp[1], "w");
    }
    io_outcome po = io_call(&libc_fns, op, &pe, mirror + at, item, n, 0);
    reset();
    io_outcome so = io_call(&adsm_fns, op, &se, obj + at, item, n, 0);
    expect_same_outcome(&po, &so);
    if (po.ret > 0) {
        obj_at o = {0, osize, 'I'};
        size_t moved = op_input(op) ? 1000 : (size_t)po.ret * (op_stream(op) ? item : 1);
        expect_landing(obj, &o, 1, at, moved, op_input(op));
    }
    if (!op_input(op)) {
        if (pe.f) cr_assert_eq(fflush(pe.f), 0);
        if (se.f) cr_assert_eq(fflush(se.f), 0);
        size_t wl, gl;
        unsigned char *w = pipe_contents(pp[0], &wl), *g = pipe_contents(sp[0], &gl);
        cr_assert_eq(gl, wl, "%s: %zu bytes in the pipe, libc's %zu", io_ctx, gl, wl);
        expect_same_bytes(w, g, wl, "pipe contents");
        free(w);
        free(g);
    }
    expect_same_bytes(mirror, obj, osize, "memory");
    int other = op_input(op) ? 1 : 0; /* the end the call did not use */
    end_close(&pe);
    end_close(&se);
    if (pp[other] >= 0) close(pp[other]);
    if (sp[other] >= 0) close(sp[other]);
    adsm_free(obj);
    free(mirror);
    free(data);
}

/* A closed descriptor: -1 EBADF (streams: not open for this direction, 0 items, ferror, EBADF;
 * and a stream whose descriptor was closed). Memory keeps its values. */
static void sc_bad_descriptor(io_op op) {
    size_t bs = adsm_block_size(), osize = 5 * bs + TAIL, item = op_stream(op) ? 12 : 1;
    size_t at = bs / 2 + 3, n = items(2 * bs, item);
    CTX("%s bad descriptor", prefix);
    unsigned char *obj = alloc(osize), *mirror = xmalloc(osize);
    prep(obj, osize, 'I', 11, mirror);
    io_end pe = {-1, NULL}, se = {-1, NULL};
    if (op_stream(op)) {
        pe.f = fopen("/dev/null", op == OP_FREAD ? "w" : "r");
        se.f = fopen("/dev/null", op == OP_FREAD ? "w" : "r");
        cr_assert(pe.f && se.f);
        pe.fd = fileno(pe.f);
        se.fd = fileno(se.f);
    } else {
        int fd = temp_file("x", 1);
        close(fd);
        pe.fd = se.fd = fd;
    }
    io_outcome po = io_call(&libc_fns, op, &pe, mirror + at, item, n, 0);
    io_outcome so = io_call(&adsm_fns, op, &se, obj + at, item, n, 0);
    expect_same_outcome(&po, &so);
    cr_assert_eq(so.err, EBADF, "%s: errno %d", io_ctx, so.err);
    expect_same_bytes(mirror, obj, osize, "memory");
    if (pe.f) fclose(pe.f);
    if (se.f) fclose(se.f);
    if (op_stream(op)) { /* the stream's own descriptor closed under it */
        CTX("%s stream on a closed descriptor", prefix);
        int fd1 = temp_file("0123456789", 10), fd2 = temp_file("0123456789", 10);
        const char *mode = op == OP_FREAD ? "r" : "r+";
        io_end p2 = {fd1, fdopen(fd1, mode)}, s2 = {fd2, fdopen(fd2, mode)};
        cr_assert(p2.f && s2.f);
        setvbuf(p2.f, NULL, _IONBF, 0); /* so fwrite reaches the descriptor */
        setvbuf(s2.f, NULL, _IONBF, 0);
        close(fd1);
        close(fd2);
        po = io_call(&libc_fns, op, &p2, mirror + at, item, n, 0);
        so = io_call(&adsm_fns, op, &s2, obj + at, item, n, 0);
        expect_same_outcome(&po, &so);
        expect_same_bytes(mirror, obj, osize, "memory");
        fclose(p2.f); /* closes nothing: the descriptors are gone and no one reused them */
        fclose(s2.f);
    }
    adsm_free(obj);
    free(mirror);
}

/* A read on an empty pipe, or a write on a full one, interrupted by a signal whose handler was
 * installed without SA_RESTART: -1 EINTR (fread/fwrite: 0 items, ferror, EINTR). */
static void sc_interrupted(io_op op) {
    size_t bs = adsm_block_size(), osize = 5 * bs + TAIL, item = op_stream(op) ? 12 : 1;
    size_t at = bs / 2 + 5, n = items(3 * bs, item);
    CTX("%s interrupted by a signal", prefix);
    unsigned char *obj = alloc(osize), *mirror = xmalloc(osize);
    prep(obj, osize, 'I', 12, mirror);
    int pp[2], sp[2];
    cr_assert_eq(pipe(pp), 0);
    cr_assert_eq(pipe(sp), 0);
    int in = op_input(op);
    if (!in) {
        fill_pipe(pp[1]);
        fill_pipe(sp[1]);
    }
    io_end pe = {in ? pp[0] : pp[1], NULL}, se = {in ? sp[0] : sp[1], NULL};
    if (op_stream(op)) {
        pe.f = fdopen(pe.fd, in ? "r" : "w");
        se.f = fdopen(se.fd, in ? "r" : "w");
    }
    alarms = 0;
    interrupt_in(50);
    io_outcome po = io_call(&libc_fns, op, &pe, mirror + at, item, n, 0);
    no_interrupt();
    cr_assert_geq(alarms, 1);
    sig_atomic_t before = alarms;
    interrupt_in(50);
    io_outcome so = io_call(&adsm_fns, op, &se, obj + at, item, n, 0);
    no_interrupt();
    cr_assert_gt(alarms, before, "%s: the call returned before the signal", io_ctx);
    expect_same_outcome(&po, &so);
    cr_assert_eq(so.err, EINTR, "%s: errno %d", io_ctx, so.err);
    expect_same_bytes(mirror, obj, osize, "memory");
    /* writers: close the readers first, so a stream's pending bytes fail EPIPE, not block */
    if (!in) {
        close(pp[0]);
        close(sp[0]);
    }
    end_close(&pe);
    end_close(&se);
    if (in) {
        close(pp[1]);
        close(sp[1]);
    }
    adsm_free(obj);
    free(mirror);
}

/* A full device: write and pwrite fail ENOSPC; fwrite returns the items that fit in the stream's
 * buffer, with ferror and ENOSPC. */
static void sc_device_full(io_op op) {
    size_t bs = adsm_block_size(), osize = 5 * bs + TAIL, item = op_stream(op) ? 12 : 1;
    size_t at = bs / 2 + 7, n = items(3 * bs, item);
    CTX("%s full device", prefix);
    unsigned char *obj = alloc(osize), *mirror = xmalloc(osize);
    prep(obj, osize, 'I', 16, mirror);
    io_end pe = {open("/dev/full", O_WRONLY), NULL}, se = {open("/dev/full", O_WRONLY), NULL};
    cr_assert(pe.fd >= 0 && se.fd >= 0);
    if (op_stream(op)) {
        pe.f = fdopen(pe.fd, "w");
        se.f = fdopen(se.fd, "w");
    }
    io_outcome po = io_call(io_ref, op, &pe, mirror + at, item, n, 0);
    io_outcome so = io_call(io_test, op, &se, obj + at, item, n, 0);
    expect_same_outcome(&po, &so);
    expect_same_bytes(mirror, obj, osize, "memory");
    if (pe.f) fpurge_and_close(&pe);
    else end_close(&pe);
    if (se.f) fpurge_and_close(&se);
    else end_close(&se);
    adsm_free(obj);
    free(mirror);
}

/* Character devices: a read of /dev/zero, or a write to /dev/null, of more than 2 MiB is not cut
 * short (libc transfers it all in one call). */
static void sc_char_device(io_op op) {
    size_t bs = adsm_block_size(), osize = 3 * MIB + TAIL, item = op_stream(op) ? 12 : 1;
    size_t at = bs / 2 + 100, n = items(2 * MIB + 100, item);
    CTX("%s character device", prefix);
    unsigned char *obj = alloc(osize), *mirror = xmalloc(osize);
    prep(obj, osize, 'I', 13, mirror);
    const char *dev = op_input(op) ? "/dev/zero" : "/dev/null";
    int flags = op_input(op) ? O_RDONLY : O_WRONLY;
    io_end pe = {open(dev, flags), NULL}, se = {open(dev, flags), NULL};
    cr_assert(pe.fd >= 0 && se.fd >= 0);
    if (op_stream(op)) {
        pe.f = fdopen(pe.fd, op_input(op) ? "r" : "w");
        se.f = fdopen(se.fd, op_input(op) ? "r" : "w");
    }
    io_outcome po = io_call(&libc_fns, op, &pe, mirror + at, item, n, 0);
    reset();
    io_outcome so = io_call(&adsm_fns, op, &se, obj + at, item, n, 0);
    expect_same_outcome(&po, &so);
    expect_same_bytes(mirror, obj, osize, "memory");
    end_close(&pe);
    end_close(&se);
    adsm_free(obj);
    free(mirror);
}

/* Transfers of several MiB (several bounce pieces): exact states and bytes still. */
static void sc_large(io_op op) {
    size_t bs = adsm_block_size(), osize = 3 * MIB + TAIL, item = op_stream(op) ? 12 : 1;
    unsigned char *obj = alloc(osize), *mirror = xmalloc(osize);
    obj_at o = {0, osize, 'I'};
    CTX("%s 3 MiB, inside blocks", prefix);
    prep(obj, osize, 'I', 14, mirror);
    size_t at = bs / 2 + 100, n = items(3 * MIB - bs / 2 + 40 - at, item);
    file_case(op, obj, mirror, osize, &o, 1, at, item, n, 0, n * item + 10, 1);
    CTX("%s 3 MiB, whole object", prefix);
    prep(obj, osize, 'I', 15, mirror);
    file_case(op, obj, mirror, osize, &o, 1, 0, op_stream(op) ? 8 : 1, items(osize, op_stream(op) ? 8 : 1), 0,
              osize, 1);
    adsm_free(obj);
    free(mirror);
}

/* A file written straight from a kernel's output (state 'I') holds what the kernel computed. */
static void sc_kernel_output_to_file(io_op op) {
    size_t osize = 3 * MIB + TAIL, n = osize / sizeof(int32_t);
    CTX("%s kernel output to file", prefix);
    int32_t *a = alloc(osize), *b = alloc(osize), *c = alloc(osize);
    for (size_t i = 0; i < n; i++) {
        wr(&a[i], (int32_t)i);
        wr(&b[i], 7 * (int32_t)i);
    }
    CALL_OK(k_add, grid_for(n), c, a, b, n);
    sync_ok();
    expect_states(c, osize, proto_is("batch") ? 'D' : 'I');
    io_end e = file_end(op, NULL, 0, 0);
    reset();
    io_outcome o = io_call(&adsm_fns, op, &e, c, op_stream(op) ? 4 : 1, op_stream(op) ? n : osize, 0);
    cr_assert_eq(o.ret, op_stream(op) ? (long long)n : (long long)osize, "%s: returned %lld", io_ctx, o.ret);
    cr_assert_eq(o.err, ERRNO_SENTINEL, "%s: errno changed to %d", io_ctx, o.err);
    size_t d2h = expect_transfer(c, osize, 0, osize, 0, 'I');
    EXPECT_MOVED(0, d2h, 0);
    if (e.f) cr_assert_eq(fflush(e.f), 0);
    size_t len;
    unsigned char *got = file_contents(e.fd, &len);
    cr_assert_eq(len, osize);
    for (size_t i = 0; i < n; i++) {
        int32_t v;
        memcpy(&v, got + i * sizeof v, sizeof v);
        cr_assert_eq(v, 8 * (int32_t)i, "%s: element %zu of the file is %d, the kernel computed %d", io_ctx, i, v,
                     8 * (int32_t)i);
    }
    free(got);
    end_close(&e);
    adsm_free(a);
    adsm_free(b);
    adsm_free(c);
}

/* adsm_* on plain memory are the libc calls: same results, nothing tracked. */
static void sc_plain_memory(io_op op) {
    size_t len = 20000, item = op_stream(op) ? 12 : 1, at = 100, n = items(9000, item);
    CTX("%s plain memory", prefix);
    unsigned char *region = random_bytes(len), *mirror = xmalloc(len);
    memcpy(mirror, region, len);
    reset();
    file_case(op, region, mirror, len, NULL, 0, at, item, n, 50, 12000, 0);
    adsm_stats s = stats();
    cr_assert_eq(s.h2d_bytes + s.d2h_bytes + s.d2d_bytes + s.read_faults + s.write_faults, 0);
    free(region);
    free(mirror);
}

static void battery(adsm_protocol_kind protocol, size_t bs, io_op op) {
    init(TEST_DEVICE_BACKEND, protocol, bs, 4096); /* fixed rolling size: no eviction in the counts */
    io_ref = &libc_fns;
    io_test = &adsm_fns;
    signal(SIGPIPE, SIG_IGN);
    rng_seed(0x5eed0000u + (uint64_t)op * 97 + bs);
    snprintf(prefix, sizeof prefix, "%s/%s/%zu", adsm_protocol_name(), op_names[op], bs);
    scratch = alloc(4096);
    sc_inside_blocks(op, 'I', 0);
    sc_inside_blocks(op, 'R', 0);
    sc_inside_blocks(op, 'D', 0);
    sc_inside_blocks(op, 'I', 1);
    sc_whole_units(op);
    sc_end_of_file(op);
    sc_two_objects(op);
    sc_pipe(op);
    sc_bad_descriptor(op);
    if (!op_positioned(op)) sc_interrupted(op);
    sc_char_device(op);
    if (!op_input(op)) sc_device_full(op);
    sc_large(op);
    if (!op_input(op)) sc_kernel_output_to_file(op);
    sc_plain_memory(op);
#ifndef TEST_ON_CUDA /* on cuda the reservation's free space is the alias's file, not plain memory */
    sc_into_plain_memory(op); /* last: maps memory inside adsm's reservation */
#endif
    adsm_shutdown();
}

#define IO_TESTS(proto, pname, bs, bname)                                       \
    Test(io, pname##_##bname##_read) { battery(proto, bs, OP_READ); }          \
    Test(io, pname##_##bname##_pread) { battery(proto, bs, OP_PREAD); }        \
    Test(io, pname##_##bname##_fread) { battery(proto, bs, OP_FREAD); }        \
    Test(io, pname##_##bname##_write) { battery(proto, bs, OP_WRITE); }        \
    Test(io, pname##_##bname##_pwrite) { battery(proto, bs, OP_PWRITE); }      \
    Test(io, pname##_##bname##_fwrite) { battery(proto, bs, OP_FWRITE); }

IO_TESTS(ADSM_PROTOCOL_BATCH, batch, 4096, 4k)
IO_TESTS(ADSM_PROTOCOL_BATCH, batch, 512 * KIB, 512k)
IO_TESTS(ADSM_PROTOCOL_LAZY, lazy, 4096, 4k)
IO_TESTS(ADSM_PROTOCOL_LAZY, lazy, 512 * KIB, 512k)
IO_TESTS(ADSM_PROTOCOL_ROLLING, rolling, 4096, 4k)
IO_TESTS(ADSM_PROTOCOL_ROLLING, rolling, 512 * KIB, 512k)

/* Rolling, 4 KiB blocks, Invalid after a kernel: a read from a file that starts and ends inside
 * blocks fetches exactly those two blocks, and every byte it did not read keeps the kernel's
 * value. The smallest version of the battery's checks, with the expectations spelled out. */
Test(io, partial_block_keeps_kernel_values) {
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, 4096, 4096);
    size_t n = 4 * 4096 / sizeof(int32_t);
    int32_t *c = alloc(4 * 4096);
    CALL_OK(k_fill, grid_for(n), c, n, 500);
    sync_ok();
    unsigned char data[6000];
    memset(data, 0xab, sizeof data);
    int fd = temp_file(data, sizeof data);
    reset();
    errno = 0;
    cr_assert_eq(adsm_read(fd, (char *)c + 1000, 3 * 4096), 6000);
    cr_assert_eq(errno, 0);
    EXPECT_MOVED(0, 2 * 4096, 0); /* blocks 0 and 1 in part; nothing else */
    EXPECT_STATE(c, 'D');
    EXPECT_STATE(c + 1024, 'D');
    EXPECT_STATE(c + 2048, 'I');
    for (size_t i = 0; i < 250; i++) cr_assert_eq(rd(&c[i]), 500 + (int32_t)i);
    for (size_t i = 250; i < 1750; i++) cr_assert_eq(rd(&c[i]), (int32_t)0xabababab, "c[%zu]", i);
    for (size_t i = 1750; i < n; i++) cr_assert_eq(rd(&c[i]), 500 + (int32_t)i, "c[%zu]", i);
    close(fd);
    adsm_shutdown();
}

/* errno is the libc call's, also when another thread keeps adsm's lock busy: the futex calls of a
 * contended lock (EAGAIN when the lock moved before the wait) leave it as it was. */
static volatile int contend_stop;
static void *contend_lock(void *arg) {
    while (!contend_stop) (void)adsm_block_state(arg);
    return NULL;
}

Test(io, errno_survives_a_contended_runtime_lock) {
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, 4096, 0);
    unsigned char *x = alloc(4096);
    memset(x, 1, 4096);
    unsigned char data[16] = {0};
    int fd = temp_file(data, sizeof data);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, contend_lock, x), 0);
    long changed = 0;
    for (int i = 0; i < 100000; i++) {
        errno = ERRNO_SENTINEL;
        cr_assert_eq(adsm_pread(fd, x, sizeof data, 0), (ssize_t)sizeof data, "%s", strerror(errno));
        changed += errno != ERRNO_SENTINEL;
    }
    contend_stop = 1;
    pthread_join(t, NULL);
    cr_assert_eq(changed, 0, "%ld of 100000 successful adsm_pread calls changed errno", changed);
    close(fd);
    adsm_shutdown();
}

/* A write to a file from an object whose bytes adsm cannot bring home (here the protection change
 * a fetch needs is refused, as at the mapping limit) fails with EFAULT, as a read into one does:
 * it returned 0 with errno untouched, and a caller's loop "while (left) left -= write(...)" never
 * ended. */
Test(io, a_write_adsm_cannot_serve_fails_with_efault) {
    setenv("ADSM_FAULT_ENGINE", "mprotect", 1);
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, 4096, 0);
    size_t n = 4096 / sizeof(int32_t);
    int32_t *c = alloc(4096);
    CALL_OK(k_fill, grid_for(n), c, n, 3);
    sync_ok();
    EXPECT_STATE(c, 'I');
    int fd = temp_file("", 0);
    refuse_system_call_with(SYS_mprotect, 2, PROT_READ, ENOMEM);
    errno = 0;
    cr_assert_eq(adsm_write(fd, c, 4096), -1);
    cr_assert_eq(errno, EFAULT, "errno %d (%s)", errno, strerror(errno));
    close(fd);
}

/* A read whose bytes the object cannot take (the kernel refuses to make a kernel's output
 * writable, as at vm.max_map_count: here seccomp) fails with EFAULT, and the file's position
 * (the descriptor's for adsm_read, the stream's for adsm_fread) goes back where it was: the bytes
 * the call read are read again by the next call, not lost. */
ParameterizedTestParameters(io, a_read_adsm_cannot_serve_leaves_the_file_position) {
    static int by_stream[] = {0, 1};
    return cr_make_param_array(int, by_stream, 2);
}

ParameterizedTest(int *by_stream, io, a_read_adsm_cannot_serve_leaves_the_file_position) {
    setenv("ADSM_FAULT_ENGINE", "mprotect", 1);
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, 4096, 0);
    const size_t size = 64 * KIB, n = size / sizeof(int32_t);
    int32_t *c = alloc(size), *want = malloc(size), *again = malloc(size);
    cr_assert(want && again);
    for (size_t i = 0; i < n; i++) want[i] = (int32_t)(i * 7 + 1);
    CALL_OK(k_fill, grid_for(n), c, n, 3);
    sync_ok();
    EXPECT_STATE(c, 'I');
    int fd = temp_file(want, size);
    FILE *f = *by_stream ? fdopen(fd, "rb") : NULL;
    cr_assert(!*by_stream || f, "fdopen: %s", strerror(errno));
    refuse_system_call_with(SYS_mprotect, 2, PROT_READ | PROT_WRITE, ENOMEM);
    errno = 0;
    if (*by_stream) {
        cr_assert_eq(adsm_fread(c, 1, size, f), 0);
        cr_assert_eq(errno, EFAULT, "errno %d (%s)", errno, strerror(errno));
        cr_assert(ferror(f), "the stream's error indicator is not set: a ferror() loop would end in silence");
        cr_assert_eq(ftello(f), 0, "the stream's position moved to %lld", (long long)ftello(f));
        clearerr(f);
        cr_assert_eq(fread(again, 1, size, f), size, "plain fread after it: %s", strerror(errno));
        fclose(f);
    } else {
        cr_assert_eq(adsm_read(fd, c, size), -1);
        cr_assert_eq(errno, EFAULT, "errno %d (%s)", errno, strerror(errno));
        cr_assert_eq(lseek(fd, 0, SEEK_CUR), 0, "the file position moved to %lld", (long long)lseek(fd, 0, SEEK_CUR));
        cr_assert_eq(read(fd, again, size), (ssize_t)size, "plain read after it: %s", strerror(errno));
        close(fd);
    }
    cr_assert_eq(memcmp(again, want, size), 0, "the next read got other bytes");
    free(want);
    free(again);
}

/* A stream (fopencookie) giving `len` bytes of 0x5a; once it has given a piece's worth, the next
 * time it is asked it first runs a kernel on another object, as another thread could while
 * adsm_fread waits for its next piece. */
typedef struct launching_stream {
    size_t len, given, piece;
    int32_t *other;
    int launched;
} launching_stream;

static ssize_t launching_read(void *cookie, char *buf, size_t size) {
    launching_stream *ls = (launching_stream *)cookie;
    if (ls->given >= ls->piece && !ls->launched) {
        ls->launched = 1;
        CALL_OK(k_fill, grid_for(1024), ls->other, 1024, 7);
        sync_ok();
    }
    size_t n = ls->len - ls->given < size ? ls->len - ls->given : size;
    memset(buf, 0x5a, n);
    ls->given += n;
    return (ssize_t)n;
}

/* Lazy, an object a kernel wrote (Invalid): adsm_fread claims it whole without a fetch and fills
 * it piece by piece, the runtime lock let go between pieces. A launch meanwhile must not send the
 * object's unwritten tail over the kernel's bytes (it stands outside the FIFO while it is filled):
 * the stream ends after three pieces, and every byte past them keeps the kernel's value. */
Test(io, a_launch_between_pieces_keeps_what_the_read_did_not_reach) {
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_LAZY, 512 * KIB, 0);
    size_t size = 8 * MIB, n = size / sizeof(int32_t), piece = adsm__bounce_piece(&adsm__rt);
    int32_t *x = alloc(size), *other = alloc(4096);
    CALL_OK(k_fill, grid_for(n), x, n, 1000);
    sync_ok();
    EXPECT_STATE(x, 'I');
    launching_stream ls = {3 * piece, 0, piece, other, 0};
    cookie_io_functions_t fns = {.read = launching_read};
    FILE *f = fopencookie(&ls, "r", fns);
    cr_assert_not_null(f);
    cr_assert_eq(adsm_fread(x, 1, size, f), 3 * piece);
    cr_assert(ls.launched, "the stream gave everything at once: no launch between pieces");
    for (size_t i = 0; i < 3 * piece / sizeof(int32_t); i++)
        if (rd(&x[i]) != (int32_t)0x5a5a5a5a) cr_assert_fail("x[%zu] = %d, not the stream's", i, rd(&x[i]));
    for (size_t i = 3 * piece / sizeof(int32_t); i < n; i++)
        if (rd(&x[i]) != 1000 + (int32_t)i) cr_assert_fail("x[%zu] = %d, not the kernel's %d", i, rd(&x[i]), 1000 + (int)i);
    int32_t *c = alloc(size); /* ... and what the read gave reaches the next kernel */
    CALL_OK(k_add, grid_for(n), c, x, x, n);
    sync_ok();
    cr_assert_eq((uint32_t)rd(&c[0]), 2u * 0x5a5a5a5au);
    cr_assert_eq(rd(&c[n - 1]), 2 * (1000 + (int32_t)(n - 1)));
    cr_assert_eq(fclose(f), 0);
    adsm_shutdown();
}

/* Rolling with a small rolling size: a 3 MiB read evicts blocks while it goes (the bounce pieces
 * let eviction overlap the reading), and a kernel then sees every byte read. */
Test(io, read_with_eager_eviction) {
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, 4096, 8);
    size_t size = 3 * MIB, n = size / sizeof(int32_t);
    int32_t *a = alloc(size), *c = alloc(size);
    rng_seed(99);
    unsigned char *data = random_bytes(size);
    int fd = temp_file(data, size);
    reset();
    cr_assert_eq(adsm_read(fd, a, size), (ssize_t)size);
    cr_assert_gt(stats().evictions, 0);
    cr_assert_eq(stats().write_faults, 0, "no fault per page: the runtime fills blocks itself");
    cr_assert_eq(stats().d2h_bytes, 0);
    CALL_OK(k_add, grid_for(n), c, a, a, n);
    sync_ok();
    for (size_t i = 0; i < n; i++) {
        uint32_t v;
        memcpy(&v, data + i * 4, 4);
        cr_assert_eq((uint32_t)rd(&c[i]), 2u * v, "c[%zu]", i);
    }
    close(fd);
    free(data);
    adsm_shutdown();
}

/* ---- descriptors with rules of their own (issue 11, item 8) --------------------------------- */
/* O_DIRECT wants buffers aligned like the device's blocks: page-aligned shared memory works as a
 * page-aligned malloc buffer does, and a misaligned one fails with the same EINVAL. */
Test(io, o_direct_on_shared_memory_matches_libc) {
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, 4096, 0);
    const char *dir = getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp";
    char path[512];
    snprintf(path, sizeof path, "%s/adsm_o_direct_XXXXXX", dir);
    int tmp = mkstemp(path);
    cr_assert_geq(tmp, 0);
    close(tmp);
    int fd = open(path, O_RDWR | O_DIRECT);
    unlink(path);
    cr_assert_geq(fd, 0, "O_DIRECT open in %s: %s", dir, strerror(errno));
    size_t n = MIB + 3 * 4096;
    unsigned char *obj = alloc(n), *back = alloc(n), *mirror = NULL;
    cr_assert_eq(posix_memalign((void **)&mirror, 4096, n), 0);
    for (size_t i = 0; i < n; i++) obj[i] = (unsigned char)(i * 7 + 1);
    cr_assert_eq(adsm_pwrite(fd, obj, n, 0), (ssize_t)n, "adsm_pwrite: %s", strerror(errno));
    cr_assert_eq(pread(fd, mirror, n, 0), (ssize_t)n);
    cr_assert_eq(memcmp(mirror, obj, n), 0);
    cr_assert_eq(adsm_pread(fd, back, n, 0), (ssize_t)n, "adsm_pread: %s", strerror(errno));
    cr_assert_eq(memcmp(back, mirror, n), 0);
    errno = 0;
    ssize_t want = pread(fd, mirror + 1, 4096, 0);
    int want_errno = errno;
    errno = 0;
    cr_assert_eq(adsm_pread(fd, back + 1, 4096, 0), want);
    cr_assert_eq(errno, want_errno, "errno %d, libc %d", errno, want_errno);
    close(fd);
    free(mirror);
    adsm_shutdown();
}

/* SOCK_SEQPACKET keeps message boundaries: a message longer than one I/O piece is written as one
 * message and read whole, and the next message is not glued on. */
Test(io, seqpacket_message_larger_than_a_piece_keeps_its_boundaries) {
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, 4096, 0);
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
    int room = 16 << 20; /* a 3 MiB message needs a send buffer above the default wmem_max */
    cr_assert_eq(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUFFORCE, &room, sizeof room), 0,
                 "SO_SNDBUFFORCE (needs CAP_NET_ADMIN): %s", strerror(errno));
    size_t big = 3 * MIB, small = 1000;
    unsigned char *src = alloc(big), *dst = alloc(4 * MIB), plain[1000];
    for (size_t i = 0; i < big; i++) src[i] = (unsigned char)(i % 251);
    memset(plain, 0x5a, sizeof plain);
    cr_assert_eq(adsm_write(sv[0], src, big), (ssize_t)big, "%s", strerror(errno));
    cr_assert_eq(write(sv[0], plain, small), (ssize_t)small);
    cr_assert_eq(adsm_read(sv[1], dst, 4 * MIB), (ssize_t)big);
    cr_assert_eq(memcmp(dst, src, big), 0);
    cr_assert_eq(adsm_read(sv[1], dst, 4 * MIB), (ssize_t)small);
    cr_assert_eq(dst[0], 0x5a);
    cr_assert_eq(dst[small - 1], 0x5a);
    cr_assert_eq(dst[small], (unsigned char)(small % 251), "the rest of the buffer is left alone");
    close(sv[0]);
    close(sv[1]);
    adsm_shutdown();
}

/* I/O calls reuse one bounce buffer instead of mapping a new one (up to 32 MiB) each time
 * (issue 11, item 12; white-box: the runtime's pool of idle buffers). */
Test(io, sequential_calls_reuse_one_bounce_buffer) {
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, 4096, 0);
    unsigned char *obj = alloc(2 * MIB);
    unsigned char data[8192];
    memset(data, 3, sizeof data);
    int fd = temp_file(data, sizeof data);
    void *first = NULL;
    for (int i = 0; i < 10; i++) {
        cr_assert_eq(adsm_pread(fd, obj + i, sizeof data, 0), (ssize_t)sizeof data);
        cr_assert_eq(stbds_arrlen(adsm__rt.io_bounce), 1, "call %d left %td idle buffers", i,
                     stbds_arrlen(adsm__rt.io_bounce));
        if (i == 0) first = adsm__rt.io_bounce[0];
        cr_assert_eq(adsm__rt.io_bounce[0], first, "call %d used another buffer", i);
    }
    cr_assert_eq(obj[9 + sizeof data - 1], 3);
    close(fd);
    adsm_shutdown();
    cr_assert_eq(stbds_arrlen(adsm__rt.io_bounce), 0, "shutdown releases them");
}

#ifndef TEST_ON_CUDA /* on cuda the reservation's free space is the alias's file, not a gap */
/* ---- where the kernel will not say which pages are readable ---------------------------------- */
/* adsm asks process_vm_readv whether program memory inside its reservation can be read. Seccomp
 * profiles that keep it behind CAP_SYS_PTRACE refuse it (EPERM; Docker's default did until 2021)
 * and gVisor has none (ENOSYS): a seccomp filter makes this process such a place. */
static void refuse_process_vm_readv(void) {
    refuse_system_call(__NR_process_vm_readv, EPERM);
    char byte = 1, into;
    struct iovec local = {&into, 1}, remote = {&byte, 1};
    errno = 0;
    cr_assert_eq(process_vm_readv(getpid(), &local, 1, &remote, 1, 0), -1);
    cr_assert_eq(errno, EPERM, "the filter refuses process_vm_readv");
}

/* A buffer from inside an object's last block into the unused, inaccessible part of adsm's
 * reservation right after it, against libc on a mirror followed by an inaccessible page: the
 * kernel stops at the first page it cannot access, and so must adsm. */
static void sc_into_reserved_gap(io_op op) {
    size_t bs = adsm_block_size(), osize = 3 * bs, guard = 3 * 4096;
    CTX("%s object end into the reservation's gap", prefix);
    unsigned char *obj = alloc(osize);
    cr_assert(inside_reserved_gap((uintptr_t)obj + osize, guard), "%s: no gap after the object", io_ctx);
    unsigned char *mirror = mmap(NULL, osize + guard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(mirror, MAP_FAILED);
    cr_assert_eq(mprotect(mirror + osize, guard, PROT_NONE), 0);
    prep(obj, osize, 'I', 11, mirror);
    obj_at o = {0, osize, 'I'};
    size_t at = osize - bs / 2 - 100, n = bs / 2 + 100 + 5000;
    file_case(op, obj, mirror, osize, &o, 1, at, 1, n, 0, n + 100, 1);
    munmap(mirror, osize + guard);
    adsm_free(obj);
}

typedef struct probe_case {
    io_op op;
    int refused; /* process_vm_readv refused by seccomp */
} probe_case;

ParameterizedTestParameters(io, program_memory_in_the_reservation_with_and_without_process_vm_readv) {
    static probe_case cases[] = {
        {OP_READ, 0}, {OP_PREAD, 0}, {OP_WRITE, 0}, {OP_PWRITE, 0},
        {OP_READ, 1}, {OP_PREAD, 1}, {OP_WRITE, 1}, {OP_PWRITE, 1},
    };
    return cr_make_param_array(probe_case, cases, sizeof cases / sizeof cases[0]);
}

/* Readable memory the program mapped inside the reservation counts, inaccessible reserved space
 * ends the transfer, whether or not process_vm_readv may be asked. (The stdio functions are left
 * out: libc's own fread into an inaccessible page crashes.) */
ParameterizedTest(probe_case *pc, io, program_memory_in_the_reservation_with_and_without_process_vm_readv) {
    if (pc->refused) refuse_process_vm_readv();
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, 4096, 4096);
    io_ref = &libc_fns;
    io_test = &adsm_fns;
    rng_seed(0x9a9e0000u + (uint64_t)pc->op * 2 + (uint64_t)pc->refused);
    snprintf(prefix, sizeof prefix, "%s/%s%s", adsm_protocol_name(), op_names[pc->op],
             pc->refused ? "/no process_vm_readv" : "");
    scratch = alloc(4096);
    sc_into_reserved_gap(pc->op);
    sc_into_plain_memory(pc->op); /* last: maps memory inside adsm's reservation */
    adsm_shutdown();
}
#endif

#ifdef TEST_ON_CUDA
/* Under cuda's shared addresses a regular file's bytes go between the file and the object's host
 * alias in the system call itself (io.h, "straight through the host alias"): no bounce buffer is
 * taken, and the device sees what was read. A pipe still goes through one (its calls may wait
 * on another party, and must not do so holding the runtime lock). */
Test(io, on_the_host_alias_a_regular_file_needs_no_bounce_buffer) {
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_LAZY, 512 * KIB, 0);
    const size_t n = MIB;
    int *obj = (int *)alloc(n);
    cr_assert_neq(adsm__host_dma(&adsm__rt, (uintptr_t)obj), (uintptr_t)obj, "no host alias");
    int *data = (int *)xmalloc(n);
    for (size_t i = 0; i < n / sizeof(int); i++) data[i] = (int)(i * 7);
    int fd = temp_file(data, n);
    cr_assert_eq(adsm_pread(fd, obj, n, 0), (ssize_t)n, "adsm_pread: %s", strerror(errno));
    cr_assert_eq(stbds_arrlen(adsm__rt.io_bounce), 0, "a bounce buffer was used for a regular file");
    cr_assert_eq(ADSM_CALL(k_incr, adsm_grid_1d(n / sizeof(int), 256), obj, n / sizeof(int)), ADSM_OK, "%s",
                 adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK);
    int *back = (int *)xmalloc(n);
    cr_assert_eq(adsm_pwrite(fd, obj, n, 0), (ssize_t)n, "adsm_pwrite: %s", strerror(errno));
    cr_assert_eq(stbds_arrlen(adsm__rt.io_bounce), 0, "a bounce buffer was used for a regular file");
    cr_assert_eq(pread(fd, back, n, 0), (ssize_t)n);
    for (size_t i = 0; i < n / sizeof(int); i++)
        cr_assert_eq(back[i], (int)(i * 7) + 1, "element %zu: %d, expected %d", i, back[i], (int)(i * 7) + 1);
    int pipefd[2];
    cr_assert_eq(pipe(pipefd), 0);
    cr_assert_eq(write(pipefd[1], data, 4096), 4096);
    cr_assert_eq(adsm_read(pipefd[0], obj, 4096), 4096);
    cr_assert_eq(stbds_arrlen(adsm__rt.io_bounce), 1, "a pipe went straight into the alias");
    cr_assert_eq(obj[5], 35);
    close(pipefd[0]), close(pipefd[1]), close(fd);
    free(data), free(back);
    adsm_free(obj);
    adsm_shutdown();
}
#endif
