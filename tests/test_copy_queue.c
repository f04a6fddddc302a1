#define ADSM_IMPLEMENTATION
#include "adsm.h"
/* tests/test_copy_queue.c -- the ordered command queue both device backends use
 * (adsm_impl/copy_queue.h), on its own: commands are small records, and the worker's execute
 * callback logs them and answers a value computed from each.
 *
 *   - Commands run in push order, on the worker thread, after its begin callback.
 *   - Past the ring size the slots are reused and every command still runs once, in order, with
 *     its own result.
 *   - Several producers on a small ring each get their own commands' results (never another's:
 *     a result does not stay in the reused slot), and each producer's commands run in its order.
 *   - drain waits for every command pushed before it; a full ring holds the next producer until
 *     the worker has retired a command, and never overwrites the command being executed.
 *   - run_if_idle runs a command on the caller only when nothing pushed is still to run.
 *   - stop runs what is still queued, then ends the worker; start and stop of an idle queue, many
 *     times over, never miss the wake-up. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <time.h>

TestSuite(copy_queue, .timeout = 60);

#define PRODUCERS 4
#define LOG_MAX 20000

typedef struct cmd {
    int producer, index, value;
} cmd;

/* What the worker saw. Only the worker writes it, except `gate`. */
typedef struct recorder {
    int gate;                    /* execute waits while 0 */
    int slow_us;                 /* and then sleeps this long */
    int executed;                /* commands run so far (the test reads it while the worker runs) */
    int log[LOG_MAX];            /* producer * 1000000 + index, in execution order */
    int next[PRODUCERS];         /* per producer: the index its next command must have */
    int out_of_order, foreign;   /* commands out of their producer's order; run on another thread */
    int began;                   /* begin ran, on the worker, before any command */
    pthread_t worker;
} recorder;

static void sleep_us(long us) {
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&t, &t) != 0) {}
}

static void begin(void *ctx) {
    recorder *r = (recorder *)ctx;
    r->worker = pthread_self();
    r->began = r->executed == 0 && adsm__tls_copy_thread;
}

static int answer(int value) { return value * 3 + 1; }

static int record(void *ctx, void *slot) {
    recorder *r = (recorder *)ctx;
    while (!__atomic_load_n(&r->gate, __ATOMIC_ACQUIRE)) sleep_us(100);
    if (r->slow_us) sleep_us(r->slow_us);
    const cmd *c = (const cmd *)slot; /* read after the wait: a producer overwriting it would show */
    int n = r->executed;
    if (n < LOG_MAX) r->log[n] = c->producer * 1000000 + c->index;
    if (c->index != r->next[c->producer]) r->out_of_order++;
    r->next[c->producer] = c->index + 1;
    if (!pthread_equal(pthread_self(), r->worker)) r->foreign++;
    __atomic_store_n(&r->executed, n + 1, __ATOMIC_RELEASE);
    return answer(c->value);
}

static int executed(recorder *r) { return __atomic_load_n(&r->executed, __ATOMIC_ACQUIRE); }

static void start(adsm__queue *q, recorder *r, unsigned capacity, int gate) {
    memset(r, 0, sizeof *r);
    r->gate = gate;
    cr_assert_eq(adsm__queue_start(q, sizeof(cmd), capacity, record, begin, r), 0);
}

static int push(adsm__queue *q, int producer, int index, int *result) {
    cmd c = {producer, index, producer * 100000 + index};
    return adsm__queue_push(q, &c, sizeof c, result);
}

/* ---- order ----------------------------------------------------------------------------------- */
Test(copy_queue, runs_commands_in_push_order_on_the_worker) {
    adsm__queue q;
    recorder r;
    start(&q, &r, 8, 1);
    for (int i = 0; i < 5; i++) cr_assert_eq(push(&q, 0, i, NULL), i, "tickets count the pushes");
    adsm__queue_drain(&q);
    cr_assert_eq(executed(&r), 5);
    for (int i = 0; i < 5; i++) cr_assert_eq(r.log[i], i, "position %d ran command %d", i, r.log[i]);
    cr_assert(r.began, "begin runs on the worker before the first command, which is a copy thread");
    cr_assert_eq(r.foreign, 0, "every command runs on the worker thread");
    adsm__queue_stop(&q);
}

Test(copy_queue, wraps_around_past_the_ring_size) {
    enum { CAP = 4, N = 10 * CAP + 3 };
    adsm__queue q;
    recorder r;
    int results[N];
    start(&q, &r, CAP, 1);
    for (int i = 0; i < N; i++) {
        results[i] = -7;
        if (i % 3 == 0) cr_assert_eq(adsm__queue_call(&q, &(cmd){0, i, i}, sizeof(cmd)), answer(i));
        else push(&q, 0, i, &results[i]);
    }
    adsm__queue_drain(&q);
    cr_assert_eq(executed(&r), N);
    cr_assert_eq(r.out_of_order, 0);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(r.log[i], i, "position %d ran command %d", i, r.log[i]);
        if (i % 3 != 0) cr_assert_eq(results[i], answer(i), "command %d: result %d", i, results[i]);
    }
    adsm__queue_stop(&q);
}

/* ---- producers ------------------------------------------------------------------------------- */
typedef struct producer {
    adsm__queue *q;
    int id, count, wrong, first_wrong, got;
} producer;

/* Alternates synchronous calls and push + await on its own variable. */
static void *produce(void *arg) {
    producer *p = (producer *)arg;
    for (int i = 0; i < p->count; i++) {
        int value = p->id * 100000 + i, result;
        if (i % 2) {
            result = adsm__queue_call(p->q, &(cmd){p->id, i, value}, sizeof(cmd));
        } else {
            result = -7;
            adsm__queue_await(p->q, push(p->q, p->id, i, &result));
        }
        if (result != answer(value) && p->wrong++ == 0) {
            p->first_wrong = i;
            p->got = result;
        }
    }
    return NULL;
}

Test(copy_queue, producers_each_get_their_own_results) {
    enum { COUNT = 3000 };
    adsm__queue q;
    recorder r;
    producer p[PRODUCERS];
    pthread_t t[PRODUCERS];
    start(&q, &r, 4, 1);
    for (int i = 0; i < PRODUCERS; i++) {
        p[i] = (producer){&q, i, COUNT, 0, 0, 0};
        cr_assert_eq(pthread_create(&t[i], NULL, produce, &p[i]), 0);
    }
    for (int i = 0; i < PRODUCERS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < PRODUCERS; i++)
        cr_assert_eq(p[i].wrong, 0, "producer %d: %d wrong results, first command %d got %d", i, p[i].wrong,
                     p[i].first_wrong, p[i].got);
    cr_assert_eq(executed(&r), PRODUCERS * COUNT);
    cr_assert_eq(r.out_of_order, 0, "each producer's commands run in its order");
    for (int i = 0; i < PRODUCERS; i++) cr_assert_eq(r.next[i], COUNT);
    adsm__queue_stop(&q);
}

/* ---- waits ----------------------------------------------------------------------------------- */
typedef struct waiter {
    adsm__queue *q;
    recorder *r;
    int returned, seen; /* seen: commands executed when the wait returned */
} waiter;

static void *returned(waiter *w) {
    w->seen = executed(w->r);
    __atomic_store_n(&w->returned, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void *drainer(void *arg) {
    adsm__queue_drain(((waiter *)arg)->q);
    return returned((waiter *)arg);
}

static void *fifth_push(void *arg) {
    push(((waiter *)arg)->q, 0, 4, NULL);
    return returned((waiter *)arg);
}

/* Runs `wait` on a thread of its own while the worker is held at the gate: it must not return
 * then. Opens the gate; the commands executed when it returned. */
static int seen_when_released(adsm__queue *q, recorder *r, void *(*wait)(void *)) {
    waiter w = {q, r, 0, 0};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, wait, &w), 0);
    sleep_us(100000);
    cr_assert_eq(__atomic_load_n(&w.returned, __ATOMIC_ACQUIRE), 0, "returned with the worker held");
    __atomic_store_n(&r->gate, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    return w.seen;
}

Test(copy_queue, drain_waits_for_everything_pushed) {
    adsm__queue q;
    recorder r;
    start(&q, &r, 16, 0);
    for (int i = 0; i < 10; i++) push(&q, 0, i, NULL);
    int seen = seen_when_released(&q, &r, drainer);
    cr_assert_eq(seen, 10, "drain returned after %d of 10 commands", seen);
    adsm__queue_stop(&q);
}

Test(copy_queue, a_full_ring_blocks_producers_until_the_worker_catches_up) {
    adsm__queue q;
    recorder r;
    start(&q, &r, 4, 0);
    for (int i = 0; i < 4; i++) push(&q, 0, i, NULL); /* the worker holds command 0 at the gate */
    cr_assert_geq(seen_when_released(&q, &r, fifth_push), 1,
                  "the fifth push went in before the worker retired a command");
    adsm__queue_drain(&q);
    cr_assert_eq(executed(&r), 5);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(r.log[i], i, "position %d ran command %d (a slot overwritten while queued?)", i, r.log[i]);
    adsm__queue_stop(&q);
}

/* emu sends a launch from the launching thread when nothing is queued before it: the command
 * runs there, in order, and never while an earlier one is still queued or running. */
Test(copy_queue, an_idle_queue_runs_a_command_on_the_caller_a_busy_one_leaves_it) {
    adsm__queue q;
    recorder r;
    start(&q, &r, 8, 0);
    push(&q, 0, 0, NULL); /* the worker holds it at the gate */
    cmd second = {0, 1, 1}, third = {0, 2, 2};
    int result = -1;
    cr_assert_eq(adsm__queue_run_if_idle(&q, &second, &result), 0, "ran beside a command still running");
    cr_assert_eq(result, -1);
    push(&q, 0, 1, NULL); /* so the caller queues it instead */
    __atomic_store_n(&r.gate, 1, __ATOMIC_RELEASE);
    adsm__queue_drain(&q);
    cr_assert_eq(adsm__queue_run_if_idle(&q, &third, &result), 1, "an idle queue left the command to the worker");
    cr_assert_eq(result, answer(2));
    cr_assert_eq(executed(&r), 3);
    for (int i = 0; i < 3; i++) cr_assert_eq(r.log[i], i, "position %d ran command %d", i, r.log[i]);
    cr_assert_eq(r.out_of_order, 0);
    cr_assert_eq(r.foreign, 1, "the third ran on the caller, the others on the worker");
    adsm__queue_stop(&q);
}

/* ---- stop ------------------------------------------------------------------------------------ */
Test(copy_queue, stop_runs_queued_work_then_ends_the_worker) {
    enum { N = 20 };
    adsm__queue q;
    recorder r;
    int results[N];
    start(&q, &r, 32, 1);
    r.slow_us = 2000; /* the worker is still busy when stop is called */
    for (int i = 0; i < N; i++) push(&q, 0, i, &results[i]);
    adsm__queue_stop(&q);
    cr_assert_eq(r.executed, N, "stop returned with %d of %d commands run", r.executed, N);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(r.log[i], i);
        cr_assert_eq(results[i], answer(i));
    }
    cr_assert_null(q.slots, "stop frees the ring");
}

Test(copy_queue, idle_start_and_stop_never_miss_the_wake_up) {
    adsm__queue q;
    recorder r;
    for (int round = 0; round < 500; round++) {
        start(&q, &r, 2, 1);
        if (round % 2) push(&q, 0, 0, NULL);
        adsm__queue_stop(&q); /* a lost wake-up hangs here: the suite's timeout fails it */
        cr_assert_eq(r.executed, round % 2);
    }
}
