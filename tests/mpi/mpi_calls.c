/* tests/mpi/mpi_calls.c -- MPI calls on shared objects through adsm_mpi.h, run under mpirun by
 * tests/mpi_calls_test.sh (2 or 4 ranks, each with its own emulated device; the protocol from
 * ADSM_PROTOCOL, the transport from the MCA parameters).
 *
 * Every call family runs with the buffers of each side in each state: Invalid (a kernel's
 * output, the kernel maybe still running; under batch, not yet synced), ReadOnly, Dirty (the
 * device's copy stale: the message must carry the host's bytes) and being evicted (rolling:
 * written, then pushed out by writes elsewhere). After each exchange the receiver checks the
 * bytes that arrived, that the bytes around them (in the same blocks) kept theirs, even where
 * its CPU wrote them during a nonblocking receive, that the received range is current on the
 * host, and that a kernel sees what the host sees (the device copies were made stale). The
 * sender checks its buffer is current and readable on the host and unchanged. Datatypes with
 * gaps (vector, subarray in both orders, struct, resized, indexed with blocks out of order,
 * negative strides, nested, darray) must leave exactly what MPI_Unpack(MPI_Pack(...)) leaves on
 * plain memory; a message may span two objects and plain memory (MPI_BOTTOM).
 *
 * Ranks pair up (0-1, 2-3) for point-to-point checks; collectives use every rank. Each failure
 * prints a line naming the check, the states and the first wrong element; rank 0 prints the
 * totals, and the exit status is 1 when any check failed anywhere. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <mpi.h>
#define ADSM_MPI_IMPLEMENTATION
#include "adsm_mpi.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- kernels -------------------------------------------------------------------------------- */
/* x[i] = pattern(seed, i) */
ADSM_KERNEL(k_pattern, ADSM_OUT(uint32_t, x), ADSM_VALUE(size_t, n), ADSM_VALUE(uint32_t, seed));
static uint32_t pattern(uint32_t seed, size_t i) { return seed * 1000003u + (uint32_t)i * 7u + 1u; }
void k_pattern(adsm_grid g, uint32_t *x, size_t n, uint32_t seed) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) x[i] = pattern(seed, i);
    }
}

/* dst[i] = src[i]: what the device holds, brought back through a kernel */
ADSM_KERNEL(k_copy, ADSM_OUT(uint32_t, dst), ADSM_IN(uint32_t, src), ADSM_VALUE(size_t, n));
void k_copy(adsm_grid g, uint32_t *dst, const uint32_t *src, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) dst[i] = src[i];
    }
}

/* ---- set-up --------------------------------------------------------------------------------- */
static int rank, nranks, partner;
static int failures, checks;
static const char *proto; /* batch, lazy or rolling */
static size_t block_words;  /* uint32s per block */
static size_t obj_words;    /* uint32s per test object */
static uint32_t *obj, *obj2, *scratch, *churn; /* shared objects */
static uint32_t *expect;                       /* plain: what obj should hold */

enum { ST_INVALID, ST_READONLY, ST_DIRTY, ST_EVICTING, NSTATES };
static const char *const state_names[] = {"Invalid", "ReadOnly", "Dirty", "evicting"};

static const char *context = "";
static char context_buf[160];
#define CONTEXT(...) (snprintf(context_buf, sizeof context_buf, __VA_ARGS__), context = context_buf)

#define FAIL(...)                                                                          \
    do {                                                                                   \
        failures++;                                                                        \
        printf("rank %d (%s): FAIL %s: ", rank, proto, context);                            \
        printf(__VA_ARGS__);                                                               \
        printf("\n");                                                                      \
        fflush(stdout);                                                                    \
    } while (0)

static void ok_or_die(adsm_result r, const char *what) {
    if (r != ADSM_OK) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, what, adsm_last_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

/* An MPI call returned success (not counted as a check: the Test loops call it any number of times). */
static void mpi_ok(int rc, const char *what) {
    if (rc != MPI_SUCCESS) FAIL("%s returned %d", what, rc);
}

static adsm_grid grid_for(size_t n) { return adsm_grid_1d((uint32_t)((n + 255) / 256), 256); }

static void launch_pattern(uint32_t *x, size_t n, uint32_t seed) {
    ok_or_die(ADSM_CALL(k_pattern, grid_for(n), x, n, seed), "k_pattern");
}

static void sync_ok(void) { ok_or_die(adsm_sync(), "adsm_sync"); }

static uint64_t evictions(void) {
    adsm_stats s;
    adsm_get_stats(&s);
    return s.evictions;
}

static void cpu_write(uint32_t *x, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) ((volatile uint32_t *)x)[i] = pattern(seed, i);
}

static void cpu_read(const uint32_t *x, size_t n) {
    uint32_t sum = 0;
    for (size_t i = 0; i < n; i += 16) sum += ((const volatile uint32_t *)x)[i];
    (void)sum;
}

/* The whole object: the guard pattern everywhere, on both sides (host written, then flushed). */
static void reset_object(uint32_t *o, uint32_t guard) {
    sync_ok();
    cpu_write(o, obj_words, guard);
    ok_or_die(ADSM_CALL(k_copy, grid_for(obj_words), scratch, o, obj_words), "k_copy");
    sync_ok();
}

/* Leaves x[0..n) holding pattern(seed) on the host's view, in state st. */
static void make_state(uint32_t *x, size_t n, int st, uint32_t seed) {
    uint64_t before = evictions();
    switch (st) {
    case ST_INVALID: launch_pattern(x, n, seed); break; /* no sync: the kernel may still run */
    case ST_READONLY:
        launch_pattern(x, n, seed);
        sync_ok();
        cpu_read(x, n);
        break;
    case ST_DIRTY:
    case ST_EVICTING:
        launch_pattern(x, n, seed ^ 0xdeadu); /* the device's copy: older bytes */
        sync_ok();
        cpu_write(x, n, seed);
        if (st == ST_EVICTING) cpu_write(churn, obj_words, seed + 77u); /* pushes x's blocks out */
        break;
    }
    if (strcmp(proto, "batch") == 0) return; /* no states: every block reads 'D' */
    int rolling = !strcmp(proto, "rolling");
    char want = st == ST_INVALID ? 'I' : st == ST_READONLY ? 'R' : 'D';
    const uint32_t *at = x + n / 2;
    if (st == ST_DIRTY) at = x + n - 1; /* rolling: the last blocks written are still in the window */
    if (st == ST_EVICTING && rolling) { /* the first block: evicted, clean again */
        want = 'R';
        at = x;
        if (evictions() == before) FAIL("nothing was evicted");
    }
    char got = adsm_block_state(at);
    checks++;
    if (got != want) FAIL("state %s: block is '%c', expected '%c'", state_names[st], got, want);
}

/* ---- checks --------------------------------------------------------------------------------- */
/* x[0..n) == pattern(seed, from + i), after adsm_sync as above */
static int same_as(const uint32_t *x, size_t n, uint32_t seed, size_t from, const char *what) {
    sync_ok();
    checks++;
    for (size_t i = 0; i < n; i++)
        if (((const volatile uint32_t *)x)[i] != pattern(seed, from + i)) {
            FAIL("%s: element %zu is %u, expected %u", what, i, x[i], pattern(seed, from + i));
            return 0;
        }
    return 1;
}

/* The object's host bytes equal `expect`, and so do the device's (through a kernel). After
 * adsm_sync, as a program reads a kernel's output (batch brings it home then: a received message
 * must not be overwritten by it). */
static void object_is_expected(const uint32_t *o, const char *what) {
    sync_ok();
    checks++;
    for (size_t i = 0; i < obj_words; i++)
        if (((const volatile uint32_t *)o)[i] != expect[i]) {
            FAIL("%s: host element %zu is %u, expected %u", what, i, o[i], expect[i]);
            return;
        }
    ok_or_die(ADSM_CALL(k_copy, grid_for(obj_words), scratch, o, obj_words), "k_copy");
    sync_ok();
    checks++;
    for (size_t i = 0; i < obj_words; i++)
        if (((const volatile uint32_t *)scratch)[i] != expect[i]) {
            FAIL("%s: the device's element %zu is %u, expected %u", what, i, scratch[i], expect[i]);
            return;
        }
}

/* A sent or received range must be current on the host: never Invalid (lazy: Dirty after a receive). */
static void current_on_host(const uint32_t *x, size_t n, int received) {
    if (!strcmp(proto, "batch")) return;
    checks++;
    for (size_t i = 0; i < n; i += block_words / 2 + 1) {
        char s = adsm_block_state(x + i);
        if (s == 'I' || (received && !strcmp(proto, "lazy") && s != 'D')) {
            FAIL("after the call the block at element %zu is '%c'", i, s);
            return;
        }
    }
}

static void expect_guarded(uint32_t guard) {
    for (size_t i = 0; i < obj_words; i++) expect[i] = pattern(guard, i);
}

/* The message region: 4.5 blocks starting 750 elements in (not block aligned). */
#define REGION_OFF ((size_t)750)
static size_t region_words(void) { return 4 * block_words + block_words / 2; }

/* One point-to-point exchange, sender state ss, receiver state rs. kind selects the calls. */
enum { P2P_SEND, P2P_SSEND, P2P_BSEND, P2P_RSEND, P2P_ISEND_WAIT, P2P_ISSEND_WAITALL, P2P_IBSEND_WAITANY,
       P2P_ISEND_WAITSOME, P2P_ISEND_TEST, P2P_ISEND_TESTALL, P2P_ISEND_TESTANY, P2P_ISEND_TESTSOME,
       P2P_ISEND_GETSTATUS, P2P_IRSEND_WAIT, P2P_KINDS };
static const char *const p2p_names[] = {"Send/Recv", "Ssend/Recv", "Bsend/Recv", "Rsend/Irecv+Wait",
                                        "Isend/Irecv+Wait", "Issend/Irecv+Waitall", "Ibsend/Irecv+Waitany",
                                        "Isend/Irecv+Waitsome", "Isend/Irecv+Test", "Isend/Irecv+Testall",
                                        "Isend/Irecv+Testany", "Isend/Irecv+Testsome",
                                        "Isend/Irecv+Request_get_status", "Irsend/Irecv+Wait"};

/* Completes req with the kind's completion call. */
static void complete(int kind, MPI_Request *req, MPI_Status *st) {
    MPI_Request reqs[2] = {MPI_REQUEST_NULL, *req}; /* a null first: indices must be honoured */
    MPI_Status sts[2];
    int flag = 0, index = -1, out = 0, idx[2];
    switch (kind) {
    case P2P_ISSEND_WAITALL:
        mpi_ok(MPI_Waitall(2, reqs, sts), "MPI_Waitall");
        *st = sts[1];
        break;
    case P2P_IBSEND_WAITANY:
        mpi_ok(MPI_Waitany(2, reqs, &index, st), "MPI_Waitany");
        if (index != 1) FAIL("MPI_Waitany: index %d", index);
        break;
    case P2P_ISEND_WAITSOME:
        mpi_ok(MPI_Waitsome(2, reqs, &out, idx, sts), "MPI_Waitsome");
        if (out != 1 || idx[0] != 1) FAIL("MPI_Waitsome: %d done, first %d", out, idx[0]);
        *st = sts[0];
        break;
    case P2P_ISEND_TEST:
        while (!flag) mpi_ok(MPI_Test(&reqs[1], &flag, st), "MPI_Test");
        break;
    case P2P_ISEND_TESTALL:
        while (!flag) mpi_ok(MPI_Testall(2, reqs, &flag, sts), "MPI_Testall");
        *st = sts[1];
        break;
    case P2P_ISEND_TESTANY:
        while (!flag) mpi_ok(MPI_Testany(2, reqs, &index, &flag, st), "MPI_Testany");
        if (index != 1) FAIL("MPI_Testany: index %d", index);
        break;
    case P2P_ISEND_TESTSOME:
        while (out == 0) mpi_ok(MPI_Testsome(2, reqs, &out, idx, sts), "MPI_Testsome");
        *st = sts[0];
        break;
    case P2P_ISEND_GETSTATUS:
        while (!flag) mpi_ok(MPI_Request_get_status(reqs[1], &flag, st), "MPI_Request_get_status");
        mpi_ok(MPI_Wait(&reqs[1], MPI_STATUS_IGNORE), "MPI_Wait");
        break;
    default: mpi_ok(MPI_Wait(&reqs[1], st), "MPI_Wait"); break;
    }
    *req = reqs[1];
    if (*req != MPI_REQUEST_NULL) FAIL("the request was not freed");
}

static void p2p_send(int kind, uint32_t *x, size_t n) {
    MPI_Request req;
    MPI_Status st;
    switch (kind) {
    case P2P_SEND: mpi_ok(MPI_Send(x, (int)n, MPI_UNSIGNED, partner, 1, MPI_COMM_WORLD), "MPI_Send"); return;
    case P2P_SSEND: mpi_ok(MPI_Ssend(x, (int)n, MPI_UNSIGNED, partner, 1, MPI_COMM_WORLD), "MPI_Ssend"); return;
    case P2P_BSEND: mpi_ok(MPI_Bsend(x, (int)n, MPI_UNSIGNED, partner, 1, MPI_COMM_WORLD), "MPI_Bsend"); return;
    case P2P_RSEND:
    case P2P_IRSEND_WAIT:
        mpi_ok(MPI_Recv(NULL, 0, MPI_BYTE, partner, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv (ready)");
        if (kind == P2P_RSEND) {
            mpi_ok(MPI_Rsend(x, (int)n, MPI_UNSIGNED, partner, 1, MPI_COMM_WORLD), "MPI_Rsend");
            return;
        }
        mpi_ok(MPI_Irsend(x, (int)n, MPI_UNSIGNED, partner, 1, MPI_COMM_WORLD, &req), "MPI_Irsend");
        break;
    case P2P_ISSEND_WAITALL: mpi_ok(MPI_Issend(x, (int)n, MPI_UNSIGNED, partner, 1, MPI_COMM_WORLD, &req), "MPI_Issend"); break;
    case P2P_IBSEND_WAITANY: mpi_ok(MPI_Ibsend(x, (int)n, MPI_UNSIGNED, partner, 1, MPI_COMM_WORLD, &req), "MPI_Ibsend"); break;
    default: mpi_ok(MPI_Isend(x, (int)n, MPI_UNSIGNED, partner, 1, MPI_COMM_WORLD, &req), "MPI_Isend"); break;
    }
    cpu_read(x, n); /* MPI 3 lets the CPU read a send buffer meanwhile */
    complete(kind, &req, &st);
}

/* Receives into x while (nonblocking kinds) the CPU writes the elements right before and after
 * it, in the same blocks: they must keep those writes. */
/* Under batch the CPU leaves a kernel's output alone until adsm_sync (its writes would be
 * overwritten when the output comes home): no writes beside a receive into one. */
static int may_write_beside(int rs) { return strcmp(proto, "batch") != 0 || rs != ST_INVALID; }

static void p2p_recv(int kind, uint32_t *x, size_t n, uint32_t guard2, int rs) {
    MPI_Request req;
    MPI_Status st;
    int count = -1;
    if (kind <= P2P_BSEND) {
        mpi_ok(MPI_Recv(x, (int)n, MPI_UNSIGNED, partner, 1, MPI_COMM_WORLD, &st), "MPI_Recv");
    } else {
        mpi_ok(MPI_Irecv(x, (int)n, MPI_UNSIGNED, partner, 1, MPI_COMM_WORLD, &req), "MPI_Irecv");
        if (kind == P2P_RSEND || kind == P2P_IRSEND_WAIT)
            mpi_ok(MPI_Send(NULL, 0, MPI_BYTE, partner, 9, MPI_COMM_WORLD), "MPI_Send (ready)");
        if (may_write_beside(rs)) {
            x[-1] = pattern(guard2, 0);
            x[n] = pattern(guard2, 1);
            expect[REGION_OFF - 1] = pattern(guard2, 0);
            expect[REGION_OFF + n] = pattern(guard2, 1);
        }
        complete(kind, &req, &st);
    }
    MPI_Get_count(&st, MPI_UNSIGNED, &count);
    checks++;
    if (count != (int)n) FAIL("the status counts %d elements, expected %zu", count, n);
}

static void check_p2p(int kind, int ss, int rs) {
    CONTEXT("%s, sender %s, receiver %s", p2p_names[kind], state_names[ss], state_names[rs]);
    const size_t n = region_words();
    const uint32_t guard = 11u + (uint32_t)kind, old = 500u + (uint32_t)(ss * 4 + rs), seed = 900u + (uint32_t)kind;
    uint32_t *x = obj + REGION_OFF;
    reset_object(obj, guard);
    expect_guarded(guard);
    int sender = rank % 2 == 0;
    make_state(x, n, sender ? ss : rs, sender ? seed : old);
    if (sender) {
        p2p_send(kind, x, n);
        current_on_host(x, n, 0);
        for (size_t i = 0; i < n; i++) expect[REGION_OFF + i] = pattern(seed, i);
    } else {
        p2p_recv(kind, x, n, guard + 1000u, rs);
        current_on_host(x, n, 1);
        for (size_t i = 0; i < n; i++) expect[REGION_OFF + i] = pattern(seed, i);
    }
    object_is_expected(obj, sender ? "the sender's object" : "the receiver's object");
}

/* Sendrecv between partners, both buffers in the object (send region, receive region after it);
 * Sendrecv_replace on the region. */
static void check_sendrecv(int ss, int rs) {
    CONTEXT("Sendrecv, send %s, receive %s", state_names[ss], state_names[rs]);
    const size_t n = 2 * block_words + 100;
    const uint32_t guard = 31u, mine = 600u + (uint32_t)rank, theirs = 600u + (uint32_t)partner;
    uint32_t *s = obj + REGION_OFF, *r = obj + REGION_OFF + n + 3;
    reset_object(obj, guard);
    expect_guarded(guard);
    make_state(s, n, ss, mine);
    make_state(r, n, rs, 3u);
    MPI_Status st;
    mpi_ok(MPI_Sendrecv(s, (int)n, MPI_UNSIGNED, partner, 2, r, (int)n, MPI_UNSIGNED, partner, 2, MPI_COMM_WORLD, &st),
           "MPI_Sendrecv");
    for (size_t i = 0; i < n; i++) {
        expect[REGION_OFF + i] = pattern(mine, i);
        expect[REGION_OFF + n + 3 + i] = pattern(theirs, i);
    }
    current_on_host(r, n, 1);
    object_is_expected(obj, "after MPI_Sendrecv");

    CONTEXT("Sendrecv_replace, buffer %s", state_names[ss]);
    reset_object(obj, guard);
    make_state(s, n, ss, mine);
    mpi_ok(MPI_Sendrecv_replace(s, (int)n, MPI_UNSIGNED, partner, 3, partner, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
           "MPI_Sendrecv_replace");
    expect_guarded(guard);
    for (size_t i = 0; i < n; i++) expect[REGION_OFF + i] = pattern(theirs, i);
    object_is_expected(obj, "after MPI_Sendrecv_replace");
}

/* ---- collectives ---------------------------------------------------------------------------- */
/* Each rank's input: n elements of pattern(100 + r) at obj + REGION_OFF in state ss; the output
 * n * nranks elements at obj2 + 5 in state rs (old bytes pattern(7)). */
static void coll_setup(size_t n_in, size_t n_out, int ss, int rs) {
    reset_object(obj, 41u);
    reset_object(obj2, 42u);
    make_state(obj + REGION_OFF, n_in, ss, 100u + (uint32_t)rank);
    make_state(obj2 + 5, n_out, rs, 7u);
}

static uint32_t want_old(size_t i) { return pattern(7u, i); } /* an output nothing arrived in */

/* obj2 + 5: the output expected, given elementwise; the rest of obj2 its guard. */
static void coll_verify(size_t n_out, uint32_t (*want)(size_t i), const char *what) {
    expect_guarded(42u);
    for (size_t i = 0; i < n_out; i++) expect[5 + i] = want(i);
    if (want != want_old) current_on_host(obj2 + 5, n_out, 1);
    object_is_expected(obj2, what);
}

static size_t coll_n;
static uint32_t want_sum(size_t i) {
    uint32_t s = 0;
    for (int r = 0; r < nranks; r++) s += pattern(100u + (uint32_t)r, i);
    return s;
}
static uint32_t want_root(size_t i) { return pattern(100u, i); }
static uint32_t want_gathered(size_t i) { return pattern(100u + (uint32_t)(i / coll_n), i % coll_n); }
/* Alltoall: block r of my output is block `rank` of rank r's input */
static uint32_t want_alltoall(size_t i) {
    return pattern(100u + (uint32_t)(i / coll_n), (size_t)rank * coll_n + i % coll_n);
}
static uint32_t want_prefix(size_t i) {
    uint32_t s = 0;
    for (int r = 0; r <= rank; r++) s += pattern(100u + (uint32_t)r, i);
    return s;
}
static void check_collectives(int ss, int rs) {
    const size_t n = block_words + 300;
    coll_n = n;
    CONTEXT("Bcast, root %s, others %s", state_names[ss], state_names[rs]);
    coll_setup(n, n, rank == 0 ? ss : rs, rs);
    uint32_t *b = rank == 0 ? obj + REGION_OFF : obj2 + 5;
    mpi_ok(MPI_Bcast(b, (int)n, MPI_UNSIGNED, 0, MPI_COMM_WORLD), "MPI_Bcast");
    if (rank != 0) coll_verify(n, want_root, "MPI_Bcast's output");
    else same_as(b, n, 100u, 0, "the root's buffer after MPI_Bcast");

    CONTEXT("Reduce, input %s, output %s", state_names[ss], state_names[rs]);
    coll_setup(n, n, ss, rs);
    mpi_ok(MPI_Reduce(obj + REGION_OFF, obj2 + 5, (int)n, MPI_UNSIGNED, MPI_SUM, 0, MPI_COMM_WORLD), "MPI_Reduce");
    coll_verify(n, rank == 0 ? want_sum : want_old, "MPI_Reduce's output");

    CONTEXT("Allreduce, input %s, output %s", state_names[ss], state_names[rs]);
    coll_setup(n, n, ss, rs);
    mpi_ok(MPI_Allreduce(obj + REGION_OFF, obj2 + 5, (int)n, MPI_UNSIGNED, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    coll_verify(n, want_sum, "MPI_Allreduce's output");

    CONTEXT("Allreduce in place, buffer %s", state_names[ss]);
    coll_setup(n, n, ss, rs);
    make_state(obj2 + 5, n, ss, 100u + (uint32_t)rank);
    mpi_ok(MPI_Allreduce(MPI_IN_PLACE, obj2 + 5, (int)n, MPI_UNSIGNED, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    coll_verify(n, want_sum, "MPI_Allreduce's output in place");

    CONTEXT("Allgather, input %s, output %s", state_names[ss], state_names[rs]);
    coll_setup(n, n * (size_t)nranks, ss, rs);
    mpi_ok(MPI_Allgather(obj + REGION_OFF, (int)n, MPI_UNSIGNED, obj2 + 5, (int)n, MPI_UNSIGNED, MPI_COMM_WORLD),
           "MPI_Allgather");
    coll_verify(n * (size_t)nranks, want_gathered, "MPI_Allgather's output");

    CONTEXT("Alltoall, input %s, output %s", state_names[ss], state_names[rs]);
    coll_setup(n * (size_t)nranks, n * (size_t)nranks, ss, rs);
    mpi_ok(MPI_Alltoall(obj + REGION_OFF, (int)n, MPI_UNSIGNED, obj2 + 5, (int)n, MPI_UNSIGNED, MPI_COMM_WORLD),
           "MPI_Alltoall");
    coll_verify(n * (size_t)nranks, want_alltoall, "MPI_Alltoall's output");
}

/* The other collectives, once per state pair (the same buffer code underneath). */
static void check_more_collectives(int ss, int rs) {
    const size_t n = block_words / 2 + 17;
    coll_n = n;
    int counts[8], displs[8];
    for (int r = 0; r < nranks; r++) {
        counts[r] = (int)n;
        displs[r] = (int)n * r;
    }
    CONTEXT("Gather, input %s, output %s", state_names[ss], state_names[rs]);
    coll_setup(n, n * (size_t)nranks, ss, rs);
    mpi_ok(MPI_Gather(obj + REGION_OFF, (int)n, MPI_UNSIGNED, obj2 + 5, (int)n, MPI_UNSIGNED, 0, MPI_COMM_WORLD),
           "MPI_Gather");
    coll_verify(n * (size_t)nranks, rank == 0 ? want_gathered : want_old, "MPI_Gather's output");

    CONTEXT("Gatherv, input %s, output %s", state_names[ss], state_names[rs]);
    coll_setup(n, n * (size_t)nranks, ss, rs);
    mpi_ok(MPI_Gatherv(obj + REGION_OFF, (int)n, MPI_UNSIGNED, obj2 + 5, counts, displs, MPI_UNSIGNED, 0,
                       MPI_COMM_WORLD), "MPI_Gatherv");
    coll_verify(n * (size_t)nranks, rank == 0 ? want_gathered : want_old, "MPI_Gatherv's output");

    CONTEXT("Allgatherv, input %s, output %s", state_names[ss], state_names[rs]);
    coll_setup(n, n * (size_t)nranks, ss, rs);
    mpi_ok(MPI_Allgatherv(obj + REGION_OFF, (int)n, MPI_UNSIGNED, obj2 + 5, counts, displs, MPI_UNSIGNED,
                          MPI_COMM_WORLD), "MPI_Allgatherv");
    coll_verify(n * (size_t)nranks, want_gathered, "MPI_Allgatherv's output");

    CONTEXT("Alltoallv, input %s, output %s", state_names[ss], state_names[rs]);
    coll_setup(n * (size_t)nranks, n * (size_t)nranks, ss, rs);
    mpi_ok(MPI_Alltoallv(obj + REGION_OFF, counts, displs, MPI_UNSIGNED, obj2 + 5, counts, displs, MPI_UNSIGNED,
                         MPI_COMM_WORLD), "MPI_Alltoallv");
    coll_verify(n * (size_t)nranks, want_alltoall, "MPI_Alltoallv's output");

    CONTEXT("Scatter, root's input %s, output %s", state_names[ss], state_names[rs]);
    coll_setup(n * (size_t)nranks, n, ss, rs);
    mpi_ok(MPI_Scatter(obj + REGION_OFF, (int)n, MPI_UNSIGNED, obj2 + 5, (int)n, MPI_UNSIGNED, 0, MPI_COMM_WORLD),
           "MPI_Scatter");
    expect_guarded(42u);
    for (size_t i = 0; i < n; i++) expect[5 + i] = pattern(100u, (size_t)rank * n + i);
    object_is_expected(obj2, "MPI_Scatter's output");

    CONTEXT("Scatterv, root's input %s, output %s", state_names[ss], state_names[rs]);
    coll_setup(n * (size_t)nranks, n, ss, rs);
    mpi_ok(MPI_Scatterv(obj + REGION_OFF, counts, displs, MPI_UNSIGNED, obj2 + 5, (int)n, MPI_UNSIGNED, 0,
                        MPI_COMM_WORLD), "MPI_Scatterv");
    object_is_expected(obj2, "MPI_Scatterv's output");

    CONTEXT("Reduce_scatter_block, input %s, output %s", state_names[ss], state_names[rs]);
    coll_setup(n * (size_t)nranks, n, ss, rs);
    mpi_ok(MPI_Reduce_scatter_block(obj + REGION_OFF, obj2 + 5, (int)n, MPI_UNSIGNED, MPI_SUM, MPI_COMM_WORLD),
           "MPI_Reduce_scatter_block");
    expect_guarded(42u);
    for (size_t i = 0; i < n; i++) expect[5 + i] = want_sum((size_t)rank * n + i);
    object_is_expected(obj2, "MPI_Reduce_scatter_block's output");

    CONTEXT("Scan, input %s, output %s", state_names[ss], state_names[rs]);
    coll_setup(n, n, ss, rs);
    mpi_ok(MPI_Scan(obj + REGION_OFF, obj2 + 5, (int)n, MPI_UNSIGNED, MPI_SUM, MPI_COMM_WORLD), "MPI_Scan");
    coll_verify(n, want_prefix, "MPI_Scan's output");

    CONTEXT("Ibcast + Iallreduce + Waitall, root %s, others %s", state_names[ss], state_names[rs]);
    coll_setup(n, n, rank == 0 ? ss : rs, rs);
    MPI_Request reqs[2];
    uint32_t *b = rank == 0 ? obj + REGION_OFF : obj2 + 5;
    uint32_t *sum = obj2 + 5 + n + 64;
    make_state(sum, n, rs, 9u);
    mpi_ok(MPI_Ibcast(b, (int)n, MPI_UNSIGNED, 0, MPI_COMM_WORLD, &reqs[0]), "MPI_Ibcast");
    mpi_ok(MPI_Iallreduce(obj + REGION_OFF + n + 8, sum, (int)n, MPI_UNSIGNED, MPI_BAND, MPI_COMM_WORLD, &reqs[1]),
           "MPI_Iallreduce");
    mpi_ok(MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE), "MPI_Waitall");
    if (rank != 0) same_as(b, n, 100u, 0, "MPI_Ibcast's output");
    /* the input after the region is the object's guard, the same on every rank */
    checks++;
    for (size_t i = 0; i < n; i++)
        if (((volatile uint32_t *)sum)[i] != pattern(41u, REGION_OFF + n + 8 + i)) {
            FAIL("MPI_Iallreduce's output: element %zu is %u", i, sum[i]);
            break;
        }
}

/* ---- datatypes with gaps, buffers over several objects ------------------------------------- */
/* A vector of rows: 3 elements taken, 2 skipped. The receiver's CPU writes the skipped ones
 * during the receive; they must keep those values. */
static void check_vector(int ss, int rs) {
    CONTEXT("vector type (3 of every 5), sender %s, receiver %s", state_names[ss], state_names[rs]);
    const int rows = (int)(3 * block_words / 5);
    const size_t span = (size_t)rows * 5;
    MPI_Datatype vec;
    MPI_Type_vector(rows, 3, 5, MPI_UNSIGNED, &vec);
    MPI_Type_commit(&vec);
    uint32_t *x = obj + REGION_OFF;
    reset_object(obj, 51u);
    expect_guarded(51u);
    int sender = rank % 2 == 0;
    make_state(x, span, sender ? ss : rs, sender ? 700u : 701u);
    if (sender) {
        mpi_ok(MPI_Send(x, 1, vec, partner, 4, MPI_COMM_WORLD), "MPI_Send (vector)");
        for (size_t i = 0; i < span; i++) expect[REGION_OFF + i] = pattern(700u, i);
    } else {
        MPI_Request req;
        mpi_ok(MPI_Irecv(x, 1, vec, partner, 4, MPI_COMM_WORLD, &req), "MPI_Irecv (vector)");
        uint32_t gaps = may_write_beside(rs) ? 702u : 701u;
        for (size_t i = 0; i < span; i++) {
            int taken = i % 5 < 3;
            expect[REGION_OFF + i] = pattern(taken ? 700u : gaps, i);
            if (!taken && gaps == 702u) ((volatile uint32_t *)x)[i] = pattern(702u, i); /* the gaps, meanwhile */
        }
        mpi_ok(MPI_Wait(&req, MPI_STATUS_IGNORE), "MPI_Wait (vector)");
        current_on_host(x, span, 0);
    }
    object_is_expected(obj, "the vector's object");
    MPI_Type_free(&vec);
}

/* One message over three pieces: the end of obj, a plain array, the start of obj2 (absolute
 * addresses, MPI_BOTTOM), in states ss (obj) and rs (obj2) on both sides. */
static void check_spanning(int ss, int rs) {
    CONTEXT("hindexed over two objects and plain memory, objects %s and %s", state_names[ss], state_names[rs]);
    static uint32_t plain[1000];
    const int len[3] = {(int)block_words + 10, 1000, (int)block_words * 2};
    uint32_t *a = obj + obj_words - (size_t)len[0] - 3, *c = obj2 + 1;
    MPI_Aint at[3];
    MPI_Get_address(a, &at[0]);
    MPI_Get_address(plain, &at[1]);
    MPI_Get_address(c, &at[2]);
    MPI_Datatype t;
    MPI_Type_create_hindexed(3, len, at, MPI_UNSIGNED, &t);
    MPI_Type_commit(&t);
    reset_object(obj, 61u);
    reset_object(obj2, 62u);
    int sender = rank % 2 == 0;
    uint32_t seed = sender ? 800u : 810u;
    make_state(a, (size_t)len[0], ss, seed);
    for (int i = 0; i < len[1]; i++) plain[i] = pattern(seed + 1, (size_t)i);
    make_state(c, (size_t)len[2], rs, seed + 2);
    if (sender) mpi_ok(MPI_Send(MPI_BOTTOM, 1, t, partner, 5, MPI_COMM_WORLD), "MPI_Send (hindexed)");
    else mpi_ok(MPI_Recv(MPI_BOTTOM, 1, t, partner, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv (hindexed)");
    same_as(a, (size_t)len[0], 800u, 0, "the first object's piece");
    same_as(plain, (size_t)len[1], 801u, 0, "the plain piece");
    same_as(c, (size_t)len[2], 802u, 0, "the second object's piece");
    checks++;
    if (obj[obj_words - 1] != pattern(61u, obj_words - 1) || obj2[0] != pattern(62u, 0))
        FAIL("bytes beside the pieces changed");
    MPI_Type_free(&t);
}

/* Derived datatypes of every construction adsm_mpi takes apart (and darray, which it takes whole):
 * the receiver's bytes must be what MPI_Unpack(MPI_Pack(...)) gives on plain memory, bytes
 * outside the typemap untouched. The buffer's base sits mid-object: some types reach below it. */
#define NTYPES 7
static const char *const type_names[NTYPES] = {"subarray (C order, 3D)", "subarray (Fortran order, 2D)",
                                                "struct with gaps, resized", "indexed, descending blocks",
                                                "hvector, negative stride", "contiguous of vectors", "darray"};

static MPI_Datatype make_type(int which) {
    MPI_Datatype t, inner;
    int sizes[3] = {6, 20, 50}, subs[3] = {4, 10, 20}, starts[3] = {1, 5, 15};
    int lens[3] = {5, 3, 7}, idx[3] = {100, 10, 50}, dims[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC};
    int dargs[2] = {MPI_DISTRIBUTE_DFLT_DARG, 2}, psizes[2] = {1, 2}, gsizes[2] = {40, 30};
    int slens[2] = {2, 3};
    MPI_Aint sdisp[2] = {0, 40};
    MPI_Datatype stypes[2] = {MPI_UNSIGNED, MPI_UNSIGNED};
    switch (which) {
    case 0: MPI_Type_create_subarray(3, sizes, subs, starts, MPI_ORDER_C, MPI_UNSIGNED, &t); break;
    case 1: MPI_Type_create_subarray(2, sizes + 1, subs + 1, starts + 1, MPI_ORDER_FORTRAN, MPI_UNSIGNED, &t); break;
    case 2:
        MPI_Type_create_struct(2, slens, sdisp, stypes, &inner);
        MPI_Type_create_resized(inner, 0, 80, &t);
        MPI_Type_free(&inner);
        break;
    case 3: MPI_Type_indexed(3, lens, idx, MPI_UNSIGNED, &t); break;
    case 4: MPI_Type_create_hvector(50, 2, -24, MPI_UNSIGNED, &t); break;
    case 5:
        MPI_Type_vector(30, 1, 4, MPI_UNSIGNED, &inner);
        MPI_Type_contiguous(3, inner, &t);
        MPI_Type_free(&inner);
        break;
    default: MPI_Type_create_darray(2, 1, 2, gsizes, dims, dargs, psizes, MPI_ORDER_C, MPI_UNSIGNED, &t); break;
    }
    MPI_Type_commit(&t);
    return t;
}

static void check_types(int ss, int rs) {
    const size_t span = 24000, base_off = span + 1000; /* span: elements below and above the base */
    for (int which = 0; which < NTYPES; which++) {
        CONTEXT("%s x2, sender %s, receiver %s", type_names[which], state_names[ss], state_names[rs]);
        MPI_Datatype t = make_type(which);
        uint32_t *x = obj + base_off;
        int sender = rank % 2 == 0, psize = 0, pos = 0, upos = 0;
        reset_object(obj, 111u);
        make_state(obj + base_off - span, 2 * span, sender ? ss : rs, sender ? 120u : 121u);
        /* the reference: the same transfer by MPI_Pack and MPI_Unpack on plain copies */
        uint32_t *from = malloc(2 * span * 4), *want = malloc(2 * span * 4);
        for (size_t i = 0; i < 2 * span; i++) {
            from[i] = pattern(120u, i);
            want[i] = pattern(121u, i);
        }
        MPI_Pack_size(2, t, MPI_COMM_SELF, &psize);
        unsigned char *packed = malloc((size_t)psize);
        MPI_Pack(from + span, 2, t, packed, psize, &pos, MPI_COMM_SELF);
        MPI_Unpack(packed, pos, &upos, want + span, 2, t, MPI_COMM_SELF);
        if (sender) {
            mpi_ok(MPI_Send(x, 2, t, partner, 12, MPI_COMM_WORLD), "MPI_Send (derived)");
            memcpy(want, from, 2 * span * 4); /* the sender's buffer stays */
        } else {
            mpi_ok(MPI_Recv(x, 2, t, partner, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv (derived)");
        }
        expect_guarded(111u);
        memcpy(expect + base_off - span, want, 2 * span * 4);
        object_is_expected(obj, "the derived type's object");
        free(from);
        free(want);
        free(packed);
        MPI_Type_free(&t);
    }
}

/* ---- requests -------------------------------------------------------------------------------- */
/* Persistent requests, started three times with the buffers in a different state each time. */
static void check_persistent(void) {
    const size_t n = 2 * block_words + 9;
    uint32_t *x = obj + REGION_OFF;
    MPI_Request req;
    reset_object(obj, 71u);
    int sender = rank % 2 == 0;
    if (sender) mpi_ok(MPI_Send_init(x, (int)n, MPI_UNSIGNED, partner, 6, MPI_COMM_WORLD, &req), "MPI_Send_init");
    else mpi_ok(MPI_Recv_init(x, (int)n, MPI_UNSIGNED, partner, 6, MPI_COMM_WORLD, &req), "MPI_Recv_init");
    for (int it = 0; it < 3; it++) {
        int st = (it + 1) % NSTATES;
        CONTEXT("persistent, start %d, %s", it, state_names[st]);
        make_state(x, n, st, sender ? 1000u + (uint32_t)it : 3u);
        if (it == 1) mpi_ok(MPI_Startall(1, &req), "MPI_Startall");
        else mpi_ok(MPI_Start(&req), "MPI_Start");
        mpi_ok(MPI_Wait(&req, MPI_STATUS_IGNORE), "MPI_Wait (persistent)");
        same_as(x, n, 1000u + (uint32_t)it, 0, "the persistent buffer");
    }
    mpi_ok(MPI_Request_free(&req), "MPI_Request_free (persistent)");
}

static uint32_t *freed_recv; /* checked after MPI_Finalize */

/* MPI_Request_free on active requests: a send (its mirror must outlive the transfer) and a
 * receive (its bytes arrive at the latest in MPI_Finalize). */
static void check_request_free(void) {
    CONTEXT("MPI_Request_free while active");
    const size_t n = 3 * block_words;
    MPI_Request req;
    reset_object(obj2, 81u);
    if (rank % 2 == 0) {
        make_state(obj2, n, ST_INVALID, 1100u);
        mpi_ok(MPI_Isend(obj2, (int)n, MPI_UNSIGNED, partner, 7, MPI_COMM_WORLD, &req), "MPI_Isend");
        mpi_ok(MPI_Request_free(&req), "MPI_Request_free");
        make_state(obj2, n, ST_DIRTY, 1101u); /* MPI forbids this; the message must not change */
    } else {
        freed_recv = obj2;
        mpi_ok(MPI_Irecv(obj2, (int)n, MPI_UNSIGNED, partner, 7, MPI_COMM_WORLD, &req), "MPI_Irecv");
        mpi_ok(MPI_Request_free(&req), "MPI_Request_free");
    }
    checks++;
    if (req != MPI_REQUEST_NULL) FAIL("the handle was not set to MPI_REQUEST_NULL");
}

/* A cancelled receive delivers nothing; a short message fills the start of the buffer only. */
static void check_cancel_and_short(void) {
    CONTEXT("cancelled receive");
    const size_t n = 2 * block_words;
    uint32_t *x = obj + REGION_OFF;
    reset_object(obj, 91u);
    expect_guarded(91u);
    if (rank % 2 == 1) {
        MPI_Request req;
        MPI_Status st;
        int cancelled = 0;
        make_state(x, n, ST_INVALID, 92u);
        mpi_ok(MPI_Irecv(x, (int)n, MPI_UNSIGNED, partner, 99, MPI_COMM_WORLD, &req), "MPI_Irecv");
        mpi_ok(MPI_Cancel(&req), "MPI_Cancel");
        mpi_ok(MPI_Wait(&req, &st), "MPI_Wait");
        MPI_Test_cancelled(&st, &cancelled);
        checks++;
        if (!cancelled) FAIL("the receive was not cancelled");
        same_as(x, n, 92u, 0, "a cancelled receive's buffer");
    }
    CONTEXT("short message into a longer receive");
    reset_object(obj, 93u);
    const size_t sent = block_words + 5;
    if (rank % 2 == 0) {
        make_state(x, sent, ST_DIRTY, 94u);
        mpi_ok(MPI_Send(x, (int)sent, MPI_UNSIGNED, partner, 8, MPI_COMM_WORLD), "MPI_Send");
    } else {
        MPI_Status st;
        int count = 0;
        make_state(x, n, ST_INVALID, 95u);
        mpi_ok(MPI_Recv(x, (int)n, MPI_UNSIGNED, partner, 8, MPI_COMM_WORLD, &st), "MPI_Recv");
        MPI_Get_count(&st, MPI_UNSIGNED, &count);
        checks++;
        if (count != (int)sent) FAIL("count %d, expected %zu", count, sent);
        same_as(x, sent, 94u, 0, "the part that arrived");
        same_as(x + sent, n - sent, 95u, sent, "the part past the message");
    }
}

/* A short message into a type whose elements go downwards (a negative extent): what arrived lands
 * where MPI puts it, the top elements, and nothing else changes (the run was cut from its low end:
 * the data went missing and two untouched elements were overwritten). And the bytes a status
 * reports past 2 GiB (an int count is MPI_UNDEFINED there, and such a receive delivered nothing):
 * set with MPI_Status_set_elements_x, no 2 GiB message needed. */
static void check_downward_and_large(void) {
    CONTEXT("short message, negative extent");
    const size_t n = 8, sent = 2;
    uint32_t *x = obj + REGION_OFF;
    reset_object(obj, 96u);
    if (rank % 2 == 0) {
        make_state(x, sent, ST_DIRTY, 97u);
        mpi_ok(MPI_Send(x, (int)sent, MPI_UNSIGNED, partner, 9, MPI_COMM_WORLD), "MPI_Send");
    } else {
        MPI_Datatype down;
        mpi_ok(MPI_Type_create_resized(MPI_UNSIGNED, 0, -(MPI_Aint)sizeof(uint32_t), &down), "MPI_Type_create_resized");
        mpi_ok(MPI_Type_commit(&down), "MPI_Type_commit");
        make_state(x, n, ST_INVALID, 98u);
        mpi_ok(MPI_Recv(x + n - 1, (int)n, down, partner, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
        MPI_Type_free(&down);
        same_as(x, n - sent, 98u, 0, "the elements no data reached");
        checks++;
        for (size_t k = 0; k < sent; k++)
            if (((volatile uint32_t *)x)[n - 1 - k] != pattern(97u, k))
                FAIL("element %zu of the message: %u, expected %u", k, x[n - 1 - k], pattern(97u, k));
    }
    CONTEXT("a status past 2 GiB");
    MPI_Status st;
    memset(&st, 0, sizeof st);
    mpi_ok(MPI_Status_set_elements_x(&st, MPI_BYTE, (MPI_Count)3 << 30), "MPI_Status_set_elements_x");
    checks++;
    if (adsm_mpi__arrived(&st) != (MPI_Aint)3 << 30)
        FAIL("3 GiB arrived, adsm_mpi__arrived says %lld", (long long)adsm_mpi__arrived(&st));
}

/* Matched probe: MPI_Mprobe + MPI_Mrecv, MPI_Improbe + MPI_Imrecv. */
static void check_matched(void) {
    CONTEXT("Mprobe/Mrecv and Improbe/Imrecv");
    const size_t n = block_words + 33;
    uint32_t *x = obj + REGION_OFF;
    reset_object(obj, 97u);
    for (int round = 0; round < 2; round++) {
        if (rank % 2 == 0) {
            make_state(x, n, round ? ST_READONLY : ST_DIRTY, 1200u + (uint32_t)round);
            mpi_ok(MPI_Send(x, (int)n, MPI_UNSIGNED, partner, 10, MPI_COMM_WORLD), "MPI_Send");
            continue;
        }
        make_state(x, n, ST_INVALID, 5u);
        MPI_Message msg;
        MPI_Status st;
        if (round == 0) {
            mpi_ok(MPI_Mprobe(partner, 10, MPI_COMM_WORLD, &msg, &st), "MPI_Mprobe");
            mpi_ok(MPI_Mrecv(x, (int)n, MPI_UNSIGNED, &msg, &st), "MPI_Mrecv");
        } else {
            int flag = 0;
            MPI_Request req;
            while (!flag) mpi_ok(MPI_Improbe(partner, 10, MPI_COMM_WORLD, &flag, &msg, &st), "MPI_Improbe");
            mpi_ok(MPI_Imrecv(x, (int)n, MPI_UNSIGNED, &msg, &req), "MPI_Imrecv");
            mpi_ok(MPI_Wait(&req, &st), "MPI_Wait");
        }
        same_as(x, n, 1200u + (uint32_t)round, 0, "the matched message");
    }
}

/* MPI_Pack and MPI_Unpack by the program on shared memory: under batch before adsm_sync too. */
static void check_pack(void) {
    CONTEXT("MPI_Pack / MPI_Unpack");
    const size_t n = block_words + 3;
    int pos = 0, size = 0;
    MPI_Pack_size((int)n, MPI_UNSIGNED, MPI_COMM_WORLD, &size);
    unsigned char *packed = malloc((size_t)size);
    reset_object(obj, 98u);
    make_state(obj, n, ST_INVALID, 1300u); /* no sync: batch's output is still on the device */
    mpi_ok(MPI_Pack(obj, (int)n, MPI_UNSIGNED, packed, size, &pos, MPI_COMM_WORLD), "MPI_Pack");
    make_state(obj2, n, ST_INVALID, 6u);
    int upos = 0;
    mpi_ok(MPI_Unpack(packed, pos, &upos, obj2, (int)n, MPI_UNSIGNED, MPI_COMM_WORLD), "MPI_Unpack");
    sync_ok(); /* batch: the kernel's output must not come home over the unpacked bytes */
    same_as(obj2, n, 1300u, 0, "the unpacked object");
    free(packed);
}

/* Plain buffers go to MPI untouched: nothing mirrored. */
static void check_plain_passes_through(void) {
    CONTEXT("plain memory");
    static uint32_t plain[4096];
    adsm_mpi_stats before, after;
    adsm_mpi_get_stats(&before);
    for (int i = 0; i < 4096; i++) plain[i] = (uint32_t)(rank * 4096 + i);
    mpi_ok(MPI_Sendrecv_replace(plain, 4096, MPI_UNSIGNED, partner, 11, partner, 11, MPI_COMM_WORLD,
                                MPI_STATUS_IGNORE), "MPI_Sendrecv_replace (plain)");
    adsm_mpi_get_stats(&after);
    checks++;
    if (after.mirrored != before.mirrored) FAIL("a plain buffer was mirrored");
    if (plain[10] != (uint32_t)(partner * 4096 + 10)) FAIL("wrong data: %u", plain[10]);
}

/* One-sided windows and Bsend buffers on shared memory are refused with the MPI error class. */
static void check_refusals(void) {
    CONTEXT("refusals");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    MPI_Win win;
    int rc = MPI_Win_create(obj, 4096, 1, MPI_INFO_NULL, MPI_COMM_SELF, &win), cls = -1;
    MPI_Error_class(rc, &cls);
    checks++;
    if (cls != MPI_ERR_BASE) FAIL("MPI_Win_create on shared memory: class %d, expected MPI_ERR_BASE", cls);
    if (!strstr(adsm_mpi_last_error(), "MPI_Win_create")) FAIL("no message: '%s'", adsm_mpi_last_error());
    void *attached; /* the Bsend buffer main attached: away, so only the refusal can fail */
    int attached_size;
    MPI_Buffer_detach(&attached, &attached_size);
    rc = MPI_Buffer_attach(obj, 65536);
    MPI_Error_class(rc, &cls);
    checks++;
    if (cls != MPI_ERR_BUFFER) FAIL("MPI_Buffer_attach of shared memory: class %d, expected MPI_ERR_BUFFER", cls);
    if (!strstr(adsm_mpi_last_error(), "MPI_Buffer_attach")) FAIL("no message: '%s'", adsm_mpi_last_error());
    MPI_Buffer_attach(attached, attached_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL);
}

/* Two threads per rank exchange with the partner at once (MPI_THREAD_MULTIPLE), each on its own
 * region of the same object and its own tag: requests and mirrors of both in flight together. */
typedef struct thread_arg {
    int id, bad;
} thread_arg;

static void *exchange_thread(void *p) {
    thread_arg *a = p;
    const size_t n = block_words + 77;
    uint32_t *send = obj2 + (size_t)a->id * 2 * (n + 16), *recv = send + n + 16;
    for (int it = 0; it < 20; it++) {
        uint32_t mine = 2000u + (uint32_t)(rank * 100 + a->id * 40 + it), theirs = mine - (uint32_t)rank * 100 +
                                                                                     (uint32_t)partner * 100;
        cpu_write(send, n, mine);
        MPI_Request r[2];
        MPI_Irecv(recv, (int)n, MPI_UNSIGNED, partner, 20 + a->id, MPI_COMM_WORLD, &r[0]);
        MPI_Isend(send, (int)n, MPI_UNSIGNED, partner, 20 + a->id, MPI_COMM_WORLD, &r[1]);
        MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
        for (size_t i = 0; i < n; i++)
            if (((volatile uint32_t *)recv)[i] != pattern(theirs, i)) {
                a->bad++;
                break;
            }
    }
    return NULL;
}

/* The same with one-word messages, many times: requests complete at once and Open MPI hands a
 * freed request's handle to the next request of either thread, so one thread's completion meets
 * handles the other thread's requests take (adsm_mpi once finished another thread's request there:
 * a use after free under ASan, once in several CI runs). */
static void *ping_thread(void *p) {
    thread_arg *a = p;
    uint32_t *send = obj2 + (size_t)a->id * 64, *recv = send + 32;
    for (int it = 0; it < 3000; it++) {
        uint32_t mine = (uint32_t)(rank * 1000000 + a->id * 100000 + it), theirs = mine - (uint32_t)rank * 1000000 +
                                                                                  (uint32_t)partner * 1000000;
        send[0] = mine;
        MPI_Request r[2];
        MPI_Irecv(recv, 1, MPI_UNSIGNED, partner, 40 + a->id, MPI_COMM_WORLD, &r[0]);
        MPI_Isend(send, 1, MPI_UNSIGNED, partner, 40 + a->id, MPI_COMM_WORLD, &r[1]);
        MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
        if (((volatile uint32_t *)recv)[0] != theirs) a->bad++;
    }
    return NULL;
}

static void check_threads(int level) {
    CONTEXT("two threads at once");
    if (level < MPI_THREAD_MULTIPLE) {
        FAIL("Open MPI gave thread level %d, not MPI_THREAD_MULTIPLE", level);
        return;
    }
    reset_object(obj2, 131u);
    pthread_t th[2];
    thread_arg args[2] = {{0, 0}, {1, 0}};
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, exchange_thread, &args[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    checks++;
    if (args[0].bad || args[1].bad) FAIL("%d and %d wrong messages", args[0].bad, args[1].bad);
    CONTEXT("two threads at once, one-word messages");
    reset_object(obj2, 137u);
    thread_arg pings[2] = {{0, 0}, {1, 0}};
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, ping_thread, &pings[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    checks++;
    if (pings[0].bad || pings[1].bad) FAIL("%d and %d wrong messages", pings[0].bad, pings[1].bad);
}

/* ---- main ----------------------------------------------------------------------------------- */
static void *alloc_or_die(size_t bytes) {
    void *p = adsm_alloc(bytes);
    if (!p) {
        fprintf(stderr, "rank %d: adsm_alloc: %s\n", rank, adsm_last_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

/* ---- errors and datatypes found wrong by a review -------------------------------------------- */
/* Compares a shared buffer with the plain one the same MPI calls filled. */
static void same_as_plain(const int *shared, const int *plain, int n, const char *what) {
    checks++;
    for (int i = 0; i < n; i++)
        if (shared[i] != plain[i]) {
            FAIL("%s: [%d] is %d in the object, %d in plain memory", what, i, shared[i], plain[i]);
            return;
        }
}

/* An hindexed_block receive (one uint32 in four; MPI 3's combiner, an enumerator in Open MPI, was
 * never taken apart) keeps the gap bytes the CPU writes while it is pending. A short message
 * ending inside an element of a gap-free type that lists its second int first lands as in plain
 * memory (the type was one run in address order, cut at the wrong end). */
static void check_odd_types(void) {
    enum { N = 64 };
    CONTEXT("hindexed_block receive, gaps written meanwhile");
    uint32_t *o = obj + REGION_OFF;
    MPI_Aint disp[N];
    for (int i = 0; i < N; i++) disp[i] = (MPI_Aint)i * 16;
    MPI_Datatype t;
    mpi_ok(MPI_Type_create_hindexed_block(N, 1, disp, MPI_UNSIGNED, &t), "MPI_Type_create_hindexed_block");
    mpi_ok(MPI_Type_commit(&t), "MPI_Type_commit");
    reset_object(obj, 131u);
    if (rank % 2 == 0) {
        cpu_write(o, 4 * N, 132u);
        mpi_ok(MPI_Send(o, 1, t, partner, 40, MPI_COMM_WORLD), "MPI_Send");
    } else {
        MPI_Request r;
        mpi_ok(MPI_Irecv(o, 1, t, partner, 40, MPI_COMM_WORLD, &r), "MPI_Irecv");
        for (int i = 0; i < 4 * N; i++)
            if (i % 4) o[i] = 555u;
        mpi_ok(MPI_Wait(&r, MPI_STATUS_IGNORE), "MPI_Wait");
        checks++;
        for (int i = 0; i < 4 * N; i++)
            if (o[i] != (i % 4 ? 555u : pattern(132u, (size_t)i))) {
                FAIL("[%d] is %u", i, o[i]);
                break;
            }
    }
    MPI_Type_free(&t);

    CONTEXT("short message ending inside a reversed gap-free element");
    int bl[2] = {1, 1};
    MPI_Aint d[2] = {sizeof(int), 0};
    MPI_Datatype ts[2] = {MPI_INT, MPI_INT};
    mpi_ok(MPI_Type_create_struct(2, bl, d, ts, &t), "MPI_Type_create_struct");
    mpi_ok(MPI_Type_commit(&t), "MPI_Type_commit");
    int *x = (int *)(obj + REGION_OFF), plain[4];
    if (rank % 2 == 0) {
        int sent[3] = {11, 22, 33};
        mpi_ok(MPI_Send(sent, 3, MPI_INT, partner, 41, MPI_COMM_WORLD), "MPI_Send");
        mpi_ok(MPI_Send(sent, 3, MPI_INT, partner, 42, MPI_COMM_WORLD), "MPI_Send");
    } else {
        for (int i = 0; i < 4; i++) x[i] = plain[i] = -1;
        mpi_ok(MPI_Recv(plain, 2, t, partner, 41, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv (plain)");
        mpi_ok(MPI_Recv(x, 2, t, partner, 42, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv (object)");
        same_as_plain(x, plain, 4, "the receive");
    }
    MPI_Type_free(&t);
}

/* Receives that fail with MPI_ERR_TRUNCATE (MPI_ERRORS_RETURN): the object holds what fit, as
 * plain memory does (nothing was delivered), and the request's record goes with the request: its
 * handle comes back for the next request, where the stale record made an Irecv into shared
 * memory wait for ever, and a Wait on a plain receive write the old message over the object.
 * Not MPI_Waitall: Open MPI 4.1 initialised with MPI_THREAD_MULTIPLE never returns from it on a
 * truncated receive, plain memory too (adsm_mpi takes Waitall's error completions the way of
 * Waitsome's, checked here). */
static void check_truncation(void) {
    MPI_Comm c;
    mpi_ok(MPI_Comm_dup(MPI_COMM_WORLD, &c), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    int *x = (int *)(obj + REGION_OFF), *y = (int *)(obj2 + REGION_OFF), plain[8];
    reset_object(obj, 141u);
    reset_object(obj2, 142u);
    for (int how = 0; how < 6; how++) {
        static const char *const names[] = {"MPI_Recv", "MPI_Irecv + MPI_Wait", "MPI_Irecv + MPI_Waitany",
                                            "MPI_Irecv + MPI_Waitsome", "MPI_Recv_init + MPI_Start + MPI_Wait",
                                            "MPI_Recv_init + MPI_Start + MPI_Waitany"};
        int persistent = how >= 4; /* Open MPI frees these after the error too */
        CONTEXT("truncated receive, %s", names[how]);
        if (rank % 2 == 0) {
            int sent[10];
            for (int i = 0; i < 10; i++) sent[i] = 100 * how + i;
            for (int tag = 50; tag < 54; tag++) mpi_ok(MPI_Send(sent, 10, MPI_INT, partner, tag, c), "MPI_Send");
            mpi_ok(MPI_Barrier(c), "MPI_Barrier");
            continue;
        }
        adsm_mpi_stats before, after;
        adsm_mpi_get_stats(&before);
        for (int i = 0; i < 8; i++) x[i] = plain[i] = -1;
        int rc_plain, rc;
        if (how == 0) {
            rc_plain = MPI_Recv(plain, 5, MPI_INT, partner, 50, c, MPI_STATUS_IGNORE);
            rc = MPI_Recv(x, 5, MPI_INT, partner, 51, c, MPI_STATUS_IGNORE);
        } else {
            MPI_Request r;
            MPI_Status st;
            int index, count;
            for (int pass = 0; pass < 2; pass++) {
                int *buf = pass ? x : plain, tag = 50 + pass;
                if (persistent) {
                    MPI_Recv_init(buf, 5, MPI_INT, partner, tag, c, &r);
                    MPI_Start(&r);
                } else {
                    MPI_Irecv(buf, 5, MPI_INT, partner, tag, c, &r);
                }
                int got = how % 3 == 1 ? MPI_Wait(&r, &st)
                          : how % 3 == 2 ? MPI_Waitany(1, &r, &index, &st) : MPI_Waitsome(1, &r, &count, &index, &st);
                *(pass ? &rc : &rc_plain) = got;
                checks++;
                if (persistent && r != MPI_REQUEST_NULL) MPI_Request_free(&r); /* an MPI that keeps it */
                else if (r != MPI_REQUEST_NULL) FAIL("the failed request's handle is not MPI_REQUEST_NULL");
            }
        }
        checks++;
        if (rc == MPI_SUCCESS || rc_plain == MPI_SUCCESS) FAIL("a truncated receive succeeded: %d, plain %d", rc, rc_plain);
        same_as_plain(x, plain, 8, "the truncated receive");
        adsm_mpi_get_stats(&after);
        checks++;
        if (after.pending != before.pending) FAIL("%llu requests left pending", (unsigned long long)(after.pending - before.pending));
        for (int i = 0; i < 5; i++) x[i] = 42; /* the program's own values from here */
        MPI_Request r;
        int more[10];
        mpi_ok(MPI_Irecv(more, 10, MPI_INT, partner, 52, c, &r), "MPI_Irecv (plain)");
        mpi_ok(MPI_Wait(&r, MPI_STATUS_IGNORE), "MPI_Wait (plain)");
        checks++;
        if (x[0] != 42) FAIL("the failed request's record wrote into the object: %d", x[0]);
        mpi_ok(MPI_Irecv(y, 10, MPI_INT, partner, 53, c, &r), "MPI_Irecv (object)"); /* waited for ever */
        mpi_ok(MPI_Wait(&r, MPI_STATUS_IGNORE), "MPI_Wait (object)");
        checks++;
        if (y[9] != 100 * how + 9) FAIL("the next receive into an object: [9] is %d", y[9]);
        mpi_ok(MPI_Barrier(c), "MPI_Barrier");
    }
    MPI_Comm_free(&c);
}

/* Collectives whose receive is too short (root sends 8 ints where the other takes 4; a Gather's
 * root takes 2 of the 8 its partner sends), in the pair of this rank: an error as in plain memory
 * (the same class), and the object keeps the bytes it held before. A collective reports no count,
 * so adsm_mpi cannot tell what fit and delivers nothing (MPI calls the buffer undefined after an
 * error; garbage from a mirror never filled would be worse). Nothing is left pending, and the
 * next collective into the object delivers. */
static void check_truncated_collectives(void) {
    MPI_Comm pair;
    mpi_ok(MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, &pair), "MPI_Comm_split");
    MPI_Comm_set_errhandler(pair, MPI_ERRORS_RETURN);
    int me = rank % 2, *x = (int *)(obj + REGION_OFF), sent[8], plain[16];
    for (int i = 0; i < 8; i++) sent[i] = 300 + i;
    for (int how = 0; how < 3; how++) {
        static const char *const names[] = {"MPI_Bcast", "MPI_Gather", "MPI_Ibcast + MPI_Wait"};
        CONTEXT("a truncated %s", names[how]);
        adsm_mpi_stats before, after;
        adsm_mpi_get_stats(&before);
        int rc[2], cls[2], truncated_side = how == 1 ? 0 : 1; /* the rank whose receive is short */
        for (int pass = 0; pass < 2; pass++) {
            int *buf = pass ? x : plain;
            for (int i = 0; i < 16; i++) buf[i] = -1 - i;
            if (how == 1) {
                rc[pass] = MPI_Gather(sent, me ? 8 : 2, MPI_INT, buf, 2, MPI_INT, 0, pair);
            } else {
                int *b = me == 0 ? sent : buf, count = me == 0 ? 8 : 4;
                if (how == 0) {
                    rc[pass] = MPI_Bcast(b, count, MPI_INT, 0, pair);
                } else {
                    MPI_Request r;
                    MPI_Errhandler world; /* Open MPI reports a collective request's error there */
                    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &world);
                    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
                    rc[pass] = MPI_Ibcast(b, count, MPI_INT, 0, pair, &r);
                    if (rc[pass] == MPI_SUCCESS) rc[pass] = MPI_Wait(&r, MPI_STATUS_IGNORE);
                    MPI_Comm_set_errhandler(MPI_COMM_WORLD, world);
                    MPI_Errhandler_free(&world);
                }
            }
            cls[pass] = MPI_SUCCESS;
            if (rc[pass] != MPI_SUCCESS) MPI_Error_class(rc[pass], &cls[pass]);
            mpi_ok(MPI_Barrier(pair), "MPI_Barrier");
        }
        checks++;
        if (cls[1] != cls[0]) FAIL("error class %d, in plain memory %d", cls[1], cls[0]);
        if (me == truncated_side) {
            checks++;
            if (cls[0] != MPI_ERR_TRUNCATE) FAIL("plain memory: class %d, not a truncation", cls[0]);
            int changed = 0;
            for (int i = 0; i < 16; i++) changed += x[i] != -1 - i;
            checks++;
            if (changed) FAIL("%d of the object's ints changed (first: %d)", changed, x[0]);
        }
        adsm_mpi_get_stats(&after);
        checks++;
        if (after.pending != before.pending) FAIL("%llu requests left pending", (unsigned long long)(after.pending - before.pending));
        mpi_ok(MPI_Bcast(me == 0 ? sent : x, 8, MPI_INT, 0, pair), "MPI_Bcast (fitting)");
        int wrong = 0;
        for (int i = 0; me == 1 && i < 8; i++) wrong += x[i] != 300 + i;
        checks++;
        if (wrong) FAIL("the next MPI_Bcast into the object: %d ints wrong", wrong);
    }
    MPI_Comm_free(&pair);
}

/* Receives freed while active whose messages are too long (an Irecv, a started Recv_init): as
 * with plain memory, their error reaches no error handler (adsm_mpi once tested them with
 * MPI_Test, which called the handler, and freed a persistent one MPI had freed already: the job
 * died inside an unrelated call), and what fit arrives, at MPI_Finalize at the latest (checked
 * after it, against the same receives into plain memory). */
static int freed_errors_seen;
static void count_freed_errors(MPI_Comm *comm, int *code, ...) {
    (void)comm, (void)code;
    freed_errors_seen++;
}

static int *freed_short, freed_short_plain[16]; /* [0..8): the Irecv's, [8..16): the Recv_init's */
static MPI_Comm freed_comm;

static void check_freed_truncation(void) {
    CONTEXT("truncated receives freed while active");
    MPI_Errhandler eh;
    mpi_ok(MPI_Comm_dup(MPI_COMM_WORLD, &freed_comm), "MPI_Comm_dup");
    mpi_ok(MPI_Comm_create_errhandler(count_freed_errors, &eh), "MPI_Comm_create_errhandler");
    mpi_ok(MPI_Comm_set_errhandler(freed_comm, eh), "MPI_Comm_set_errhandler");
    if (rank % 2 == 0) {
        int sent[10];
        for (int i = 0; i < 10; i++) sent[i] = 700 + i;
        for (int tag = 60; tag < 64; tag++) mpi_ok(MPI_Send(sent, 10, MPI_INT, partner, tag, freed_comm), "MPI_Send");
    } else {
        freed_short = (int *)alloc_or_die(16 * sizeof(int)); /* its own: later checks reuse the others */
        for (int i = 0; i < 16; i++) freed_short[i] = freed_short_plain[i] = -1;
        for (int pass = 0; pass < 2; pass++) {
            int *buf = pass ? freed_short : freed_short_plain, tag = 60 + 2 * pass;
            MPI_Request r;
            mpi_ok(MPI_Irecv(buf, 5, MPI_INT, partner, tag, freed_comm, &r), "MPI_Irecv");
            mpi_ok(MPI_Request_free(&r), "MPI_Request_free");
            mpi_ok(MPI_Recv_init(buf + 8, 5, MPI_INT, partner, tag + 1, freed_comm, &r), "MPI_Recv_init");
            mpi_ok(MPI_Start(&r), "MPI_Start");
            mpi_ok(MPI_Request_free(&r), "MPI_Request_free (persistent)");
        }
    }
    mpi_ok(MPI_Barrier(freed_comm), "MPI_Barrier");
    mpi_ok(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    MPI_Errhandler_free(&eh);
}

/* After MPI_Finalize: the freed truncated receives hold what fit, as plain memory does. */
static void check_freed_truncation_after_finalize(void) {
    context = "truncated receives freed while active, after MPI_Finalize";
    checks++;
    if (freed_errors_seen) FAIL("the communicator's error handler was called %d times", freed_errors_seen);
    if (freed_short) same_as_plain(freed_short, freed_short_plain, 16, "their buffers");
}

/* A start that fails (Open MPI refuses MPI_REQUEST_NULL in MPI_Startall, starting nothing)
 * leaves the request inactive: the buffer is the program's, and a Wait, which returns at once,
 * must not deliver the mirror the start filled (a padded type is taken whole, so its mirror holds
 * the buffer as it was at the start) over what the program wrote since. */
static void check_failed_start(void) {
    CONTEXT("a failed MPI_Startall");
    MPI_Comm c;
    mpi_ok(MPI_Comm_dup(MPI_COMM_WORLD, &c), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    int *x = (int *)(obj + REGION_OFF);
    adsm_mpi_stats before, after;
    adsm_mpi_get_stats(&before);
    for (int i = 0; i < 32; i++) x[i] = 1000 + i;
    MPI_Request r[2];
    mpi_ok(MPI_Recv_init(x, 10, MPI_SHORT_INT, partner, 70, c, &r[0]), "MPI_Recv_init");
    r[1] = MPI_REQUEST_NULL;
    MPI_Errhandler world; /* Open MPI reports a refused Startall on MPI_COMM_WORLD */
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &world);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rc = MPI_Startall(2, r);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, world);
    MPI_Errhandler_free(&world);
    if (rc == MPI_SUCCESS) { /* an MPI that accepts it: nothing to check */
        MPI_Cancel(&r[0]);
        MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    } else {
        for (int i = 0; i < 32; i++) x[i] = 2000 + i; /* inactive: the program's to write */
        mpi_ok(MPI_Wait(&r[0], MPI_STATUS_IGNORE), "MPI_Wait (inactive)");
        int changed = 0;
        for (int i = 0; i < 32; i++) changed += x[i] != 2000 + i;
        checks++;
        if (changed) FAIL("%d ints the program wrote after the failed start were overwritten", changed);
    }
    mpi_ok(MPI_Request_free(&r[0]), "MPI_Request_free");
    adsm_mpi_get_stats(&after);
    checks++;
    if (after.pending != before.pending) FAIL("%llu requests left pending", (unsigned long long)(after.pending - before.pending));
    mpi_ok(MPI_Barrier(c), "MPI_Barrier");
    MPI_Comm_free(&c);
}

int main(int argc, char **argv) {
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg); /* protocol and block size: ADSM_PROTOCOL, ADSM_BLOCK_SIZE */
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.emu_memory = (size_t)256 << 20;
    cfg.emu_workers = 1;
    cfg.rolling_size = 4; /* small: evictions happen */
    if (adsm_init(&cfg) != ADSM_OK) { /* before MPI_Init: the device process forks first */
        fprintf(stderr, "adsm_init: %s\n", adsm_last_error());
        return 2;
    }
    int level = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks % 2 || nranks > 8) {
        if (rank == 0) fprintf(stderr, "run with 2, 4, 6 or 8 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    partner = rank ^ 1;
    proto = adsm_protocol_name();
    block_words = adsm_block_size() / sizeof(uint32_t);
    obj_words = 12 * block_words;
    obj = alloc_or_die(obj_words * 4);
    obj2 = alloc_or_die(obj_words * 4);
    scratch = alloc_or_die(obj_words * 4);
    churn = alloc_or_die(obj_words * 4);
    expect = malloc(obj_words * 4);
    static char bsend_buffer[32 << 20]; /* every Bsend of the run may still hold its copy */
    MPI_Buffer_attach(bsend_buffer, sizeof bsend_buffer);

    for (int kind = 0; kind < P2P_KINDS; kind++)
        for (int ss = 0; ss < NSTATES; ss++)
            for (int rs = 0; rs < NSTATES; rs++)
                if (kind <= P2P_ISEND_WAIT || (ss + rs + kind) % 4 == 0) check_p2p(kind, ss, rs); /* all pairs for 5 kinds */
    for (int ss = 0; ss < NSTATES; ss++)
        for (int rs = 0; rs < NSTATES; rs++) {
            check_sendrecv(ss, rs);
            check_collectives(ss, rs);
            check_vector(ss, rs);
            check_spanning(ss, rs);
            if ((ss + rs) % 2 == 0) check_types(ss, rs);
        }
    for (int s = 0; s < NSTATES; s++) check_more_collectives(s, (s + 1) % NSTATES);
    check_persistent();
    check_cancel_and_short();
    check_downward_and_large();
    check_odd_types();
    check_truncation();
    check_truncated_collectives();
    check_freed_truncation();
    check_failed_start();
    check_matched();
    check_pack();
    check_plain_passes_through();
    check_refusals();
    check_threads(level);
    check_request_free();

    int total[2] = {failures, checks}, sum[2];
    int detach_size;
    void *detached;
    MPI_Buffer_detach(&detached, &detach_size);
    MPI_Reduce(total, sum, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD); /* plain memory */
    MPI_Finalize();
    check_freed_truncation_after_finalize();
    if (freed_recv) { /* delivered by MPI_Finalize at the latest */
        context = "a receive freed while active";
        same_as(freed_recv, 3 * block_words, 1100u, 0, "its buffer after MPI_Finalize");
    }
    if (rank == 0) printf("mpi_calls (%s, %d ranks): %d checks, %d failed on rank 0, %d failed in all before "
                          "MPI_Finalize\n", proto, nranks, sum[1], failures, sum[0]);
    adsm_shutdown();
    return failures || (rank == 0 && sum[0]) ? 1 : 0;
}
