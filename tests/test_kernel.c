/* tests/test_kernel.c -- the kernel DSL end to end on the emu backend (and the host backend for the
 * basic case): parameter kinds, interior pointers, block states after a call, kernels that write
 * their inputs or crash, a missing body, non-shared arguments, 16 parameters, 3D grids and
 * pointers stored in shared memory. Each Criterion test runs in its own process, so each starts
 * and stops its own runtime. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- kernels ---------------------------------------------------------------------------------- */

/* y[i] = a * x[i] + b; acc[i] += (int)i; every parameter kind at once */
ADSM_KERNEL(axpb, ADSM_OUT(float, y), ADSM_IN(float, x), ADSM_INOUT(int, acc), ADSM_VALUE(float, a),
            ADSM_VALUE(float, b), ADSM_VALUE(size_t, n));

void axpb(adsm_grid g, float *y, const float *x, int *acc, float a, float b, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) {
            y[i] = a * x[i] + b;
            acc[i] += (int)i;
        }
    }
}

ADSM_KERNEL(copy_int, ADSM_OUT(int, dst), ADSM_IN(int, src), ADSM_VALUE(size_t, n));

void copy_int(adsm_grid g, int *dst, const int *src, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) dst[i] = src[i];
    }
}

/* writes through its IN parameter: must fail with ADSM_ERROR_KERNEL_WROTE_INPUT */
ADSM_KERNEL(sneaky_writer, ADSM_OUT(int, dst), ADSM_IN(int, victim), ADSM_VALUE(size_t, n));

/* the same between two outputs, which the device makes writable in one change where they touch */
ADSM_KERNEL(sneaky_between, ADSM_OUT(int, below), ADSM_IN(int, victim), ADSM_OUT(int, above), ADSM_VALUE(size_t, n));

void sneaky_between(adsm_grid g, int *below, const int *victim, int *above, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) {
            below[i] = above[i] = victim[i];
            ((int *)(uintptr_t)victim)[i] = -12345;
        }
    }
}

void sneaky_writer(adsm_grid g, int *dst, const int *victim, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) {
            dst[i] = victim[i];
            ((int *)(uintptr_t)victim)[i] = -12345;
        }
    }
}

/* writes through a wild pointer */
ADSM_KERNEL(wild_writer, ADSM_OUT(int, dst), ADSM_VALUE(uintptr_t, wild));

void wild_writer(adsm_grid g, int *dst, uintptr_t wild) {
    ADSM_FOR_EACH_THREAD(g, i) {
        dst[i] = 1;
        if (i == 0) *(volatile int *)wild = 7;
    }
}

/* writes through whatever it is given, NULL included */
ADSM_KERNEL(fill_ones, ADSM_OUT(int, dst), ADSM_VALUE(size_t, n));

void fill_ones(adsm_grid g, int *dst, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) dst[i] = 1;
    }
}

/* declared, never defined: the weak body is NULL */
ADSM_KERNEL(bodiless, ADSM_OUT(int, dst), ADSM_VALUE(int, v));

/* 16 parameters: one OUT, seven IN, eight VALUE */
ADSM_KERNEL(sixteen, ADSM_OUT(long, out), ADSM_IN(int, a0), ADSM_IN(int, a1), ADSM_IN(int, a2),
            ADSM_IN(int, a3), ADSM_IN(int, a4), ADSM_IN(int, a5), ADSM_IN(int, a6), ADSM_VALUE(int, v0),
            ADSM_VALUE(int, v1), ADSM_VALUE(int, v2), ADSM_VALUE(int, v3), ADSM_VALUE(int, v4),
            ADSM_VALUE(int, v5), ADSM_VALUE(int, v6), ADSM_VALUE(long, v7));

void sixteen(adsm_grid g, long *out, const int *a0, const int *a1, const int *a2, const int *a3, const int *a4,
             const int *a5, const int *a6, int v0, int v1, int v2, int v3, int v4, int v5, int v6, long v7) {
    ADSM_FOR_EACH_THREAD(g, i) {
        out[i] = (long)a0[i] + 10L * a1[i] + 100L * a2[i] + 1000L * a3[i] + 10000L * a4[i] + 100000L * a5[i] +
                 1000000L * a6[i] + v0 + 2L * v1 + 4L * v2 + 8L * v3 + 16L * v4 + 32L * v5 + 64L * v6 + v7;
    }
}

/* counts how often each flattened thread index runs; meta gets the grid shape */
ADSM_KERNEL(count_threads, ADSM_INOUT(int, counts), ADSM_OUT(uint32_t, meta), ADSM_VALUE(size_t, n));

void count_threads(adsm_grid g, int *counts, uint32_t *meta, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) counts[i] += 1;
        else counts[n] += 1; /* out of range: recorded in the guard slot */
        if (i == 0) {
            meta[0] = g.grid.x; meta[1] = g.grid.y; meta[2] = g.grid.z;
            meta[3] = g.block.x; meta[4] = g.block.y; meta[5] = g.block.z;
            meta[6] = (uint32_t)adsm_grid_threads(g);
        }
    }
}

/* a linked list in shared memory, built by the CPU, walked by the kernel */
typedef struct node {
    long value;
    struct node *next;
} node;

ADSM_KERNEL(list_sum, ADSM_OUT(long, result), ADSM_IN(node, head));

void list_sum(adsm_grid g, long *result, const node *head) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i != 0) continue;
        long sum = 0, count = 0;
        for (const node *p = head; p; p = p->next) {
            sum += p->value;
            count++;
        }
        result[0] = sum;
        result[1] = count;
        result[2] = (long)(uintptr_t)head->next; /* the pointer value as the device sees it */
    }
}

/* ---- helpers ----------------------------------------------------------------------------------- */

static void start_protocol(adsm_backend_kind backend, adsm_protocol_kind protocol) {
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = backend;
    cfg.protocol = protocol;
    adsm_result r = adsm_init(&cfg);
    cr_assert_eq(r, ADSM_OK, "adsm_init: %s", adsm_last_error());
}

static void start(adsm_backend_kind backend) { start_protocol(backend, ADSM_PROTOCOL_DEFAULT); }

static adsm_stats stats(void) {
    adsm_stats s;
    cr_assert_eq(adsm_get_stats(&s), ADSM_OK);
    return s;
}

/* a known-good kernel call: proves the runtime still works */
static void check_copy_works(void) {
    const size_t n = 3000;
    int *src = adsm_alloc(n * sizeof *src), *dst = adsm_alloc(n * sizeof *dst);
    cr_assert(src && dst, "alloc: %s", adsm_last_error());
    for (size_t i = 0; i < n; i++) src[i] = (int)(i * 7 + 1);
    cr_assert_eq(ADSM_CALL(copy_int, adsm_grid_1d((uint32_t)((n + 63) / 64), 64), dst, src, n), ADSM_OK, "%s",
                 adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) cr_assert_eq(dst[i], (int)(i * 7 + 1), "dst[%zu] = %d", i, dst[i]);
    cr_assert_eq(adsm_free(src), ADSM_OK);
    cr_assert_eq(adsm_free(dst), ADSM_OK);
}

static void basic_axpb(void) {
    const size_t n = 100000;
    float *x = adsm_alloc(n * sizeof *x), *y = adsm_alloc(n * sizeof *y);
    int *acc = adsm_alloc(n * sizeof *acc);
    cr_assert(x && y && acc, "alloc: %s", adsm_last_error());
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)(i % 1000);
        y[i] = -1.0f;
        acc[i] = 5;
    }
    cr_assert_eq(ADSM_CALL(axpb, adsm_grid_1d((uint32_t)((n + 255) / 256), 256), y, x, acc, 2.0f, 3.0f, n),
                 ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(y[i], 2.0f * (float)(i % 1000) + 3.0f, "y[%zu] = %f", i, (double)y[i]);
        cr_assert_eq(acc[i], 5 + (int)i, "acc[%zu] = %d", i, acc[i]);
        cr_assert_eq(x[i], (float)(i % 1000), "x[%zu] changed", i);
    }
    /* a second call sees the INOUT values the first one left */
    cr_assert_eq(ADSM_CALL(axpb, adsm_grid_1d((uint32_t)((n + 255) / 256), 256), y, x, acc, 1.0f, 0.0f, n),
                 ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(y[i], (float)(i % 1000), "y[%zu] = %f", i, (double)y[i]);
        cr_assert_eq(acc[i], 5 + 2 * (int)i, "acc[%zu] = %d", i, acc[i]);
    }
    adsm_free(x);
    adsm_free(y);
    adsm_free(acc);
}

/* tid[i] = the system thread that ran thread i of the grid */
ADSM_KERNEL(who_runs, ADSM_OUT(int64_t, tid), ADSM_VALUE(size_t, n));

void who_runs(adsm_grid g, int64_t *tid, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) tid[i] = (int64_t)syscall(SYS_gettid);
    }
}

/* How many different values v[0..n) holds. */
static size_t distinct(const int64_t *v, size_t n) {
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < i && v[j] != v[i]) j++;
        count += j == i;
    }
    return count;
}

/* Runs who_runs over `blocks` blocks of 256 threads on a runtime with two workers per device. */
static const int64_t *run_who_runs(adsm_backend_kind backend, uint32_t blocks) {
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = backend;
    cfg.emu_workers = 2;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "adsm_init: %s", adsm_last_error());
    size_t n = (size_t)blocks * 256;
    int64_t *tid = adsm_alloc(n * sizeof *tid);
    cr_assert_not_null(tid, "%s", adsm_last_error());
    cr_assert_eq(ADSM_CALL(who_runs, adsm_grid_1d(blocks, 256), tid, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    return tid;
}

/* ---- tests ------------------------------------------------------------------------------------- */

/* A grid of at most 256 threads runs whole on the thread that takes the launch (waking the workers
 * costs more than its work); a larger one is split over every worker. */
Test(kernel, a_small_grid_runs_on_one_thread_a_large_one_on_every_worker) {
    const int64_t *tid = run_who_runs(ADSM_BACKEND_EMU, 1);
    cr_assert_eq(distinct(tid, 256), 1, "256 threads ran on %zu system threads", distinct(tid, 256));
    adsm_shutdown();
    tid = run_who_runs(ADSM_BACKEND_EMU, 4);
    cr_assert_eq(distinct(tid, 1024), 2, "1024 threads ran on %zu system threads", distinct(tid, 1024));
    adsm_shutdown();
}

/* On the host backend that thread is the caller's. */
Test(kernel, on_the_host_backend_a_small_grid_runs_on_the_calling_thread) {
    const int64_t *tid = run_who_runs(ADSM_BACKEND_HOST, 1);
    for (size_t i = 0; i < 256; i++) cr_assert_eq(tid[i], (int64_t)syscall(SYS_gettid), "thread %zu", i);
    adsm_shutdown();
}

Test(kernel, in_out_inout_value_emu) {
    start(ADSM_BACKEND_EMU);
    cr_assert_str_eq(adsm_backend_name(), "emu");
    basic_axpb();
    adsm_shutdown();
}

Test(kernel, in_out_inout_value_host) {
    start(ADSM_BACKEND_HOST);
    cr_assert_str_eq(adsm_backend_name(), "host");
    basic_axpb();
    adsm_shutdown();
}

Test(kernel, in_out_inout_value_emu_lazy) {
    start_protocol(ADSM_BACKEND_EMU, ADSM_PROTOCOL_LAZY);
    basic_axpb();
    check_copy_works();
    adsm_shutdown();
}

Test(kernel, in_out_inout_value_emu_batch) {
    start_protocol(ADSM_BACKEND_EMU, ADSM_PROTOCOL_BATCH);
    basic_axpb();
    check_copy_works();
    adsm_shutdown();
}

Test(kernel, interior_pointers) {
    start(ADSM_BACKEND_EMU);
    const size_t n = 10000, off_x = 100, off_y = 50, m = 1000;
    float *x = adsm_alloc(n * sizeof *x), *y = adsm_alloc(n * sizeof *y);
    int *acc = adsm_alloc(n * sizeof *acc);
    cr_assert(x && y && acc);
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)i;
        y[i] = -1.0f;
    }
    cr_assert_eq(ADSM_CALL(axpb, adsm_grid_1d(4, 256), y + off_y, x + off_x, acc + 7, 1.0f, 0.5f, m), ADSM_OK,
                 "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) {
        float want = (i >= off_y && i < off_y + m) ? (float)(i - off_y + off_x) + 0.5f : -1.0f;
        cr_assert_eq(y[i], want, "y[%zu] = %f, want %f", i, (double)y[i], (double)want);
        int want_acc = (i >= 7 && i < 7 + m) ? (int)(i - 7) : 0;
        cr_assert_eq(acc[i], want_acc, "acc[%zu] = %d, want %d", i, acc[i], want_acc);
    }
    adsm_free(x);
    adsm_free(y);
    adsm_free(acc);
    adsm_shutdown();
}

Test(kernel, block_states_after_call) {
    start(ADSM_BACKEND_EMU);
    const size_t n = 50000;
    float *x = adsm_alloc(n * sizeof *x), *y = adsm_alloc(n * sizeof *y);
    int *acc = adsm_alloc(n * sizeof *acc), *other = adsm_alloc(4096);
    cr_assert(x && y && acc && other);
    for (size_t i = 0; i < n; i++) x[i] = (float)i;
    other[0] = 42;
    cr_assert_eq(adsm_block_state(x), 'D');
    cr_assert_eq(ADSM_CALL(axpb, adsm_grid_1d((uint32_t)((n + 255) / 256), 256), y, x, acc, 1.0f, 1.0f, n),
                 ADSM_OK);
    cr_assert_eq(adsm_block_state(y), 'I');
    cr_assert_eq(adsm_block_state(acc), 'I');
    cr_assert_eq(adsm_block_state(x), 'R');
    cr_assert_eq(adsm_block_state(other), 'R'); /* not a parameter: flushed, still valid */
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_block_state(y), 'I');
    cr_assert_eq(adsm_block_state(x), 'R');

    /* reading the IN object and the bystander moves nothing and faults nothing */
    cr_assert_eq(adsm_reset_stats(), ADSM_OK);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += x[i];
    cr_assert_eq(sum, (double)n * (double)(n - 1) / 2);
    cr_assert_eq(other[0], 42);
    adsm_stats s = stats();
    cr_assert_eq(s.d2h_bytes, 0, "reading an IN object moved %llu bytes", (unsigned long long)s.d2h_bytes);
    cr_assert_eq(s.read_faults, 0);
    cr_assert_eq(adsm_block_state(x), 'R');

    /* reading the OUT object brings it back */
    cr_assert_eq(y[n - 1], (float)(n - 1) + 1.0f);
    s = stats();
    cr_assert_gt(s.d2h_bytes, 0);
    cr_assert_eq(adsm_block_state(y), 'R');
    adsm_free(x);
    adsm_free(y);
    adsm_free(acc);
    adsm_free(other);
    adsm_shutdown();
}

Test(kernel, write_to_input_is_reported) {
    start(ADSM_BACKEND_EMU);
    const size_t n = 4096;
    int *victim = adsm_alloc(n * sizeof *victim), *dst = adsm_alloc(n * sizeof *dst);
    cr_assert(victim && dst);
    for (size_t i = 0; i < n; i++) victim[i] = (int)i + 1;
    cr_assert_eq(ADSM_CALL(sneaky_writer, adsm_grid_1d((uint32_t)(n / 128), 128), dst, victim, n), ADSM_OK,
                 "the launch itself is accepted; the error comes at sync: %s", adsm_last_error());
    adsm_result r = adsm_sync();
    cr_assert_eq(r, ADSM_ERROR_KERNEL_WROTE_INPUT, "adsm_sync: %d (%s)", r, adsm_last_error());
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_KERNEL_WROTE_INPUT);
    const char *msg = adsm_last_error();
    cr_assert(strstr(msg, "sneaky_writer") != NULL, "message: %s", msg);
    cr_assert(strstr(msg, "victim") != NULL, "message: %s", msg);
    /* the input is unchanged on the CPU ... */
    for (size_t i = 0; i < n; i++) cr_assert_eq(victim[i], (int)i + 1, "victim[%zu] = %d", i, victim[i]);
    /* ... and on the device */
    int *check = adsm_alloc(n * sizeof *check);
    cr_assert(check);
    cr_assert_eq(ADSM_CALL(copy_int, adsm_grid_1d((uint32_t)(n / 128), 128), check, victim, n), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) cr_assert_eq(check[i], (int)i + 1, "device victim[%zu] = %d", i, check[i]);
    check_copy_works();
    adsm_shutdown();
}

/* The device changes the protection of a kernel's outputs that lie side by side in one call: an
 * input between two outputs stays read-only. */
Test(kernel, write_to_an_input_between_two_outputs_is_reported) {
    start(ADSM_BACKEND_EMU);
    const size_t n = 4096;
    int *below = adsm_alloc(n * sizeof *below), *victim = adsm_alloc(n * sizeof *victim),
        *above = adsm_alloc(n * sizeof *above);
    cr_assert(below && victim && above);
    cr_assert((uintptr_t)below < (uintptr_t)victim && (uintptr_t)victim < (uintptr_t)above,
              "the objects must lie in this order for the test to mean anything: %p %p %p", (void *)below,
              (void *)victim, (void *)above);
    for (size_t i = 0; i < n; i++) victim[i] = (int)i + 1;
    cr_assert_eq(ADSM_CALL(sneaky_between, adsm_grid_1d((uint32_t)(n / 128), 128), below, victim, above, n), ADSM_OK);
    adsm_result r = adsm_sync();
    cr_assert_eq(r, ADSM_ERROR_KERNEL_WROTE_INPUT, "adsm_sync: %d (%s)", r, adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "victim") != NULL, "message: %s", adsm_last_error());
    for (size_t i = 0; i < n; i++) cr_assert_eq(victim[i], (int)i + 1, "victim[%zu] = %d", i, victim[i]);
    adsm_free(below);
    adsm_free(victim);
    adsm_free(above);
    adsm_shutdown();
}

Test(kernel, wild_pointer_crash_is_reported) {
    start(ADSM_BACKEND_EMU);
    int *dst = adsm_alloc(256 * sizeof *dst);
    cr_assert(dst);
    cr_assert_eq(ADSM_CALL(wild_writer, adsm_grid_1d(2, 128), dst, (uintptr_t)16), ADSM_OK);
    adsm_result r = adsm_sync();
    cr_assert_eq(r, ADSM_ERROR_KERNEL_CRASHED, "adsm_sync: %d (%s)", r, adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "wild_writer") != NULL, "message: %s", adsm_last_error());
    /* the error is reported once */
    cr_assert_eq(adsm_sync(), ADSM_OK);
    check_copy_works();
    /* the crashed kernel's object can be reused */
    cr_assert_eq(ADSM_CALL(fill_ones, adsm_grid_1d(2, 128), dst, 256), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (int i = 0; i < 256; i++) cr_assert_eq(dst[i], 1);
    adsm_free(dst);
    adsm_shutdown();
}

ADSM_KERNEL(aborts, ADSM_OUT(int, x));
void aborts(adsm_grid g, int *x) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i == 0) x[0] = 1;
    }
    abort();
}

/* A kernel that calls abort() crashed with SIGABRT, which carries no address (its si_addr is
 * the sender's pid, which the message printed as one); the device keeps working. */
Test(kernel, abort_in_a_kernel_is_reported_without_an_address) {
    start(ADSM_BACKEND_EMU);
    int *x = adsm_alloc(4096);
    cr_assert(x);
    cr_assert_eq(ADSM_CALL(aborts, adsm_grid_1d(1, 1), x), ADSM_OK);
    adsm_result r = adsm_sync();
    cr_assert_eq(r, ADSM_ERROR_KERNEL_CRASHED, "adsm_sync: %d (%s)", r, adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "kernel 'aborts' crashed: Aborted"), "message: %s", adsm_last_error());
    cr_assert(!strstr(adsm_last_error(), "address"), "message: %s", adsm_last_error());
    check_copy_works();
    adsm_free(x);
    adsm_shutdown();
}

Test(kernel, null_argument_crash_is_reported) {
    start(ADSM_BACKEND_EMU);
    cr_assert_eq(ADSM_CALL(fill_ones, adsm_grid_1d(1, 32), NULL, 32), ADSM_OK, "NULL is passed as is: %s",
                 adsm_last_error());
    adsm_result r = adsm_sync();
    cr_assert_eq(r, ADSM_ERROR_KERNEL_CRASHED, "adsm_sync: %d (%s)", r, adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "fill_ones") != NULL, "message: %s", adsm_last_error());
    check_copy_works();
    adsm_shutdown();
}

Test(kernel, repeated_crashes_keep_device_alive) {
    start(ADSM_BACKEND_EMU);
    int *dst = adsm_alloc(4096);
    cr_assert(dst);
    for (int k = 0; k < 20; k++) {
        cr_assert_eq(ADSM_CALL(wild_writer, adsm_grid_1d(4, 64), dst, (uintptr_t)16), ADSM_OK);
        cr_assert_eq(adsm_sync(), ADSM_ERROR_KERNEL_CRASHED, "round %d: %s", k, adsm_last_error());
    }
    check_copy_works();
    adsm_free(dst);
    adsm_shutdown();
}

/* the header says a kernel that writes "any shared object it was not given as OUT" fails with
 * ADSM_ERROR_KERNEL_WROTE_INPUT, like a write to an IN parameter */
Test(kernel, write_to_unlisted_shared_object_is_reported) {
    start(ADSM_BACKEND_EMU);
    int *dst = adsm_alloc(4096), *bystander = adsm_alloc(4096);
    cr_assert(dst && bystander);
    bystander[0] = 17;
    cr_assert_eq(ADSM_CALL(wild_writer, adsm_grid_1d(1, 4), dst, (uintptr_t)bystander), ADSM_OK);
    adsm_result r = adsm_sync();
    cr_assert_eq(r, ADSM_ERROR_KERNEL_WROTE_INPUT, "adsm_sync: %d (%s)", r, adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "wild_writer") != NULL, "message: %s", adsm_last_error());
    cr_assert_eq(bystander[0], 17);
    check_copy_works();
    adsm_shutdown();
}

Test(kernel, missing_body) {
    start(ADSM_BACKEND_EMU);
    int *dst = adsm_alloc(64);
    cr_assert(dst);
    adsm_stats before = stats();
    adsm_result r = ADSM_CALL(bodiless, adsm_grid_1d(1, 1), dst, 3);
    cr_assert_eq(r, ADSM_ERROR_NO_KERNEL_BODY, "ADSM_CALL: %d (%s)", r, adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "bodiless") != NULL, "message: %s", adsm_last_error());
    cr_assert_eq(stats().launches, before.launches);
    cr_assert_eq(adsm_sync(), ADSM_OK);
    check_copy_works();
    adsm_free(dst);
    adsm_shutdown();
}

static void check_not_shared(int *bad_out) {
    int *src = adsm_alloc(64 * sizeof *src);
    cr_assert(src);
    src[0] = 1;
    adsm_stats before = stats();
    adsm_result r = ADSM_CALL(copy_int, adsm_grid_1d(1, 64), bad_out, src, 64);
    cr_assert_eq(r, ADSM_ERROR_NOT_SHARED, "ADSM_CALL: %d (%s)", r, adsm_last_error());
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_NOT_SHARED);
    cr_assert(strstr(adsm_last_error(), "dst") != NULL, "message: %s", adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "copy_int") != NULL, "message: %s", adsm_last_error());
    cr_assert_eq(stats().launches, before.launches, "a refused call launched a kernel");
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_block_state(src), 'D', "a refused call flushed or invalidated objects");
    /* a non-shared IN parameter is refused too, naming it */
    int *dst = adsm_alloc(64 * sizeof *dst);
    cr_assert(dst);
    r = ADSM_CALL(copy_int, adsm_grid_1d(1, 64), dst, bad_out, 64);
    cr_assert_eq(r, ADSM_ERROR_NOT_SHARED, "ADSM_CALL: %d (%s)", r, adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "src") != NULL, "message: %s", adsm_last_error());
    cr_assert_eq(stats().launches, before.launches);
    /* the refused OUT object was not invalidated: its CPU copy is usable without the device */
    dst[3] = 9;
    cr_assert_eq(dst[3], 9);
    adsm_free(src);
    adsm_free(dst);
    check_copy_works();
}

Test(kernel, malloc_pointer_refused) {
    start(ADSM_BACKEND_EMU);
    int *heap = malloc(64 * sizeof *heap);
    cr_assert(heap);
    check_not_shared(heap);
    free(heap);
    adsm_shutdown();
}

Test(kernel, stack_pointer_refused) {
    start(ADSM_BACKEND_EMU);
    int local[64];
    check_not_shared(local);
    adsm_shutdown();
}

Test(kernel, freed_pointer_refused) {
    start(ADSM_BACKEND_EMU);
    /* a big freed object: the small objects check_not_shared allocates may reuse its start, so
     * point well inside it */
    char *gone = adsm_alloc(1 << 20);
    cr_assert(gone);
    cr_assert_eq(adsm_free(gone), ADSM_OK);
    int *bad = (int *)(gone + (3 << 18));
    cr_assert_eq(adsm_block_state(bad), 0);
    check_not_shared(bad);
    adsm_shutdown();
}

Test(kernel, sixteen_parameters) {
    start(ADSM_BACKEND_EMU);
    const size_t n = 1000;
    int *a[7];
    for (int k = 0; k < 7; k++) {
        a[k] = adsm_alloc(n * sizeof(int));
        cr_assert(a[k]);
        for (size_t i = 0; i < n; i++) a[k][i] = (int)((i + (size_t)k) % 10);
    }
    long *out = adsm_alloc(n * sizeof *out);
    cr_assert(out);
    cr_assert_eq(ADSM_CALL(sixteen, adsm_grid_1d(10, 100), out, a[0], a[1], a[2], a[3], a[4], a[5], a[6], 1, 1,
                           1, 1, 1, 1, 1, 5000000000L),
                 ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) {
        long want = 127 + 5000000000L, scale = 1;
        for (int k = 0; k < 7; k++, scale *= 10) want += scale * (long)((i + (size_t)k) % 10);
        cr_assert_eq(out[i], want, "out[%zu] = %ld, want %ld", i, out[i], want);
    }
    for (int k = 0; k < 7; k++) adsm_free(a[k]);
    adsm_free(out);
    adsm_shutdown();
}

Test(kernel, grid_3d_covers_each_thread_once) {
    start(ADSM_BACKEND_EMU);
    adsm_grid g = adsm_grid_3d(adsm_dim3_make(3, 5, 2), adsm_dim3_make(8, 4, 3));
    const size_t n = adsm_grid_threads(g);
    cr_assert_eq(n, (size_t)3 * 5 * 2 * 8 * 4 * 3);
    cr_assert_eq(g.begin, 0);
    cr_assert_eq(g.end, n);
    int *counts = adsm_alloc((n + 1) * sizeof *counts);
    uint32_t *meta = adsm_alloc(8 * sizeof *meta);
    cr_assert(counts && meta);
    for (int round = 1; round <= 2; round++) {
        cr_assert_eq(ADSM_CALL(count_threads, g, counts, meta, n), ADSM_OK, "%s", adsm_last_error());
        cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
        for (size_t i = 0; i < n; i++) cr_assert_eq(counts[i], round, "thread %zu ran %d times", i, counts[i]);
        cr_assert_eq(counts[n], 0, "an index past the grid ran");
    }
    uint32_t want[7] = {3, 5, 2, 8, 4, 3, (uint32_t)n};
    for (int k = 0; k < 7; k++) cr_assert_eq(meta[k], want[k], "meta[%d] = %u", k, meta[k]);
    adsm_free(counts);
    adsm_free(meta);
    adsm_shutdown();
}

Test(kernel, pointers_stored_in_shared_memory) {
    start(ADSM_BACKEND_EMU);
    enum { N = 5 };
    /* nodes spread over separate objects, plus two nodes inside one object */
    node *nodes[N];
    for (int k = 0; k < N; k++) {
        nodes[k] = adsm_alloc(sizeof(node));
        cr_assert(nodes[k]);
    }
    node *pair = adsm_alloc(2 * sizeof(node));
    cr_assert(pair);
    long want = 0;
    for (int k = 0; k < N; k++) {
        nodes[k]->value = 10 * (k + 1);
        nodes[k]->next = k + 1 < N ? nodes[k + 1] : &pair[0];
        want += nodes[k]->value;
    }
    pair[0].value = 1000;
    pair[0].next = &pair[1];
    pair[1].value = 20000;
    pair[1].next = NULL;
    want += 21000;
    long *result = adsm_alloc(3 * sizeof *result);
    cr_assert(result);
    cr_assert_eq(ADSM_CALL(list_sum, adsm_grid_1d(1, 1), result, nodes[0]), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(result[0], want, "sum %ld, want %ld", result[0], want);
    cr_assert_eq(result[1], N + 2);
    cr_assert_eq(result[2], (long)(uintptr_t)nodes[1], "same address on both sides");

    /* CPU changes to the list after a call reach the device at the next call */
    nodes[2]->value += 5;
    nodes[N - 1]->next = NULL; /* drop the pair */
    cr_assert_eq(ADSM_CALL(list_sum, adsm_grid_1d(1, 1), result, nodes[0]), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(result[0], want - 21000 + 5);
    cr_assert_eq(result[1], N);
    for (int k = 0; k < N; k++) adsm_free(nodes[k]);
    adsm_free(pair);
    adsm_free(result);
    adsm_shutdown();
}

/* ---- stream order: CPU writes made after a call never reach a kernel still running ---------- */
ADSM_KERNEL(slow_copy, ADSM_OUT(int, c), ADSM_IN(int, a), ADSM_VALUE(size_t, n));
void slow_copy(adsm_grid g, int *c, const int *a, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) {
            for (volatile int k = 0; k < 200; k++) {
            }
            c[i] = a[i];
        }
    }
}
ADSM_KERNEL(touch_one, ADSM_OUT(int, x));
void touch_one(adsm_grid g, int *x) {
    ADSM_FOR_EACH_THREAD(g, i) x[i] = 0;
}

/* The kernel reads a == 1; meanwhile the CPU writes a = 2 (evictions with a tiny rolling size,
 * or a flush at the next call) and memsets part of a on the device: the kernel must see 1s. */
static void write_after_read(adsm_protocol_kind protocol, size_t rolling_size) {
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.protocol = protocol;
    cfg.block_size = 4096;
    cfg.rolling_size = rolling_size;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    size_t n = (size_t)1 << 19;
    int *a = adsm_alloc(n * sizeof *a), *c = adsm_alloc(n * sizeof *c), *x = adsm_alloc(4096);
    for (size_t i = 0; i < n; i++) a[i] = 1;
    cr_assert_eq(ADSM_CALL(slow_copy, adsm_grid_1d((uint32_t)(n / 256), 256), c, a, n), ADSM_OK);
    for (size_t i = 0; i < n / 2; i++) a[i] = 2;
    cr_assert_eq(adsm_memset(a + n / 2, 0, n / 2 * sizeof *a), ADSM_OK);
    cr_assert_eq(ADSM_CALL(touch_one, adsm_grid_1d(1, 1), x), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += c[i] != 1;
    cr_assert_eq(bad, 0, "%zu elements of c saw writes made after the call", bad);
    for (size_t i = 0; i < n; i++) cr_assert_eq(a[i], i < n / 2 ? 2 : 0, "a[%zu]", i);
    adsm_shutdown();
}

Test(kernel, later_writes_wait_for_running_kernel_lazy) { write_after_read(ADSM_PROTOCOL_LAZY, 0); }
Test(kernel, later_writes_wait_for_running_kernel_rolling) { write_after_read(ADSM_PROTOCOL_ROLLING, 0); }
Test(kernel, later_evictions_wait_for_running_kernel) { write_after_read(ADSM_PROTOCOL_ROLLING, 2); }

/* Regression (found by fuzz/fuzz_protocol.c): a launch refused while binding its arguments must
 * not forget the earlier kernel that writes one of its OUT objects; a CPU read before adsm_sync
 * still waits for that kernel. */
Test(kernel, refused_launch_keeps_earlier_writer) {
    start_protocol(ADSM_BACKEND_EMU, ADSM_PROTOCOL_LAZY);
    size_t n = (size_t)1 << 19;
    int *a = adsm_alloc(n * sizeof *a), *c = adsm_alloc(n * sizeof *c), plain[4] = {0};
    for (size_t i = 0; i < n; i++) a[i] = 7;
    cr_assert_eq(ADSM_CALL(slow_copy, adsm_grid_1d((uint32_t)(n / 256), 256), c, a, n), ADSM_OK);
    /* c again as OUT, then a plain pointer: refused after c was bound */
    cr_assert_eq(ADSM_CALL(slow_copy, adsm_grid_1d(1, 4), c, plain, 4), ADSM_ERROR_NOT_SHARED);
    for (size_t i = 0; i < n; i += 4099) cr_assert_eq(c[i], 7, "c[%zu] read before the first kernel finished", i);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(c[n - 1], 7);
    adsm_shutdown();
}

/* adsm_atomic_*: one spelling for kernel bodies on every backend (the GPU side is checked by
 * cuda_kernels_test); here many worker threads of the emulated device hit the same words. */
ADSM_KERNEL_DEF(atomics, (ADSM_INOUT(uint32_t, u), ADSM_INOUT(int32_t, s), ADSM_INOUT(float, f),
                          ADSM_INOUT(unsigned long long, ull), ADSM_VALUE(uint32_t, n)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) {
            adsm_atomic_add_u32(&u[0], 1u);
            adsm_atomic_min_u32(&u[1], (uint32_t)(i + 7));
            adsm_atomic_max_u32(&u[2], (uint32_t)i);
            adsm_atomic_add_i32(&s[0], -1);
            adsm_atomic_min_i32(&s[1], -(int32_t)i);
            adsm_atomic_max_i32(&s[2], (int32_t)i - 5);
            adsm_atomic_add_f32(&f[0], 0.5f);
            adsm_atomic_add_ull(&ull[0], 3ull);
        }
    }
});

Test(kernel, atomics_from_many_threads) {
    start(ADSM_BACKEND_EMU);
    const uint32_t n = 100000;
    uint32_t *u = adsm_alloc(3 * sizeof *u);
    int32_t *s = adsm_alloc(3 * sizeof *s);
    float *f = adsm_alloc(sizeof *f);
    unsigned long long *ull = adsm_alloc(sizeof *ull);
    u[0] = 0, u[1] = UINT32_MAX, u[2] = 0, s[0] = 0, s[1] = 0, s[2] = INT32_MIN, f[0] = 0.0f, ull[0] = 0;
    cr_assert_eq(ADSM_CALL(atomics, adsm_grid_1d(n / 250, 250), u, s, f, ull, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(u[0], n);
    cr_assert_eq(u[1], 7u);
    cr_assert_eq(u[2], n - 1);
    cr_assert_eq(s[0], -(int32_t)n);
    cr_assert_eq(s[1], -(int32_t)(n - 1));
    cr_assert_eq(s[2], (int32_t)n - 6);
    cr_assert_eq(f[0], 0.5f * (float)n); /* exact: halves up to 2^24 */
    cr_assert_eq(ull[0], 3ull * n);
    adsm_shutdown();
}
