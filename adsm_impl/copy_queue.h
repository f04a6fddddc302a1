/* adsm_impl/copy_queue.h -- the ordered command queue of a device backend: emu's DMA thread and
 * cuda's engine are both one of these. A fixed ring of fixed-size command slots that any thread
 * fills and one worker thread empties in queue order, handing each command to the backend's
 * `execute` callback (a GPU stream's order: a launch runs after the copies pushed before it).
 *
 * Tickets: push returns one; await(ticket) returns once that command ran; drain waits for every
 * command pushed so far. A pusher that wants its command's result passes its own int, which the
 * worker writes before it retires the command: the slot may be reused at once, so the result
 * cannot stay there.
 *
 * Contexts: push, await, call and drain are signal-safe (producers push from inside the SIGSEGV
 * handler, and faults fetch outside the runtime lock, so there may be several at once): only
 * memcpy, atomics and futexes -- no malloc, no stdio, no pthread mutex. Producers serialise on
 * the queue's own futex lock, and a full ring makes a producer wait for the worker, never for
 * the runtime lock. start and stop run in normal thread context (they allocate the ring, create
 * and join the worker). The worker never takes the runtime lock, so waiting on it cannot
 * deadlock. */
#ifndef ADSM__COPY_QUEUE_INCLUDED
#define ADSM__COPY_QUEUE_INCLUDED

#include "common.h"
#include "os.h"

/* Worker thread: runs one command (the slot may be changed freely); the value is its result. */
typedef int (*adsm__queue_exec_fn)(void *ctx, void *cmd);

typedef struct adsm__queue {
    adsm__lock_t push_lock; /* producers, one at a time */
    unsigned char *slots;   /* capacity slots of slot_size bytes */
    int **results;          /* per slot: where its result goes, or NULL */
    size_t slot_size;
    unsigned capacity;
    int tail, done;         /* tickets pushed and tickets executed so far (both wrap) */
    int bell, quit;         /* bell changes at every push and at stop: the idle worker sleeps on it */
    adsm__queue_exec_fn execute;
    void (*begin)(void *ctx); /* optional: runs on the worker before its first command */
    void *ctx;
    pthread_t worker;
    int started;
} adsm__queue;

/* ---- producers (signal-safe) ----------------------------------------------------------------- */
/* Returns once the counter *done reached (or passed: more may be queued meanwhile) `target`;
 * the difference is taken unsigned, so tickets may wrap. */
ADSM__PRIVATE void adsm__wait_done(int *done, int target) {
    for (;;) {
        int d = ADSM__LOAD(done);
        if ((int)((unsigned)d - (unsigned)target) >= 0) return;
        adsm__futex_wait(done, d);
    }
}

/* The ticket after t, wrapping without signed overflow (which would be undefined). */
ADSM__PRIVATE int adsm__ticket_next(int t) { return (int)((unsigned)t + 1u); }

/* Wakes the worker. A release: a worker that reads the new bell also sees what was published
 * before it (the tail, the quit flag). */
ADSM__PRIVATE void adsm__queue_ring(adsm__queue *q) {
    __atomic_add_fetch(&q->bell, 1, __ATOMIC_RELEASE);
    adsm__futex_wake_all(&q->bell);
}

/* Queues the first `bytes` bytes of cmd (at most slot_size; the rest of the slot keeps stale
 * bytes) and returns its ticket; `result`, if not NULL, receives execute's value before the
 * ticket is done. Only after start, before stop. */
ADSM__PRIVATE int adsm__queue_push(adsm__queue *q, const void *cmd, size_t bytes, int *result) {
    adsm__lock(&q->push_lock);
    int tail = ADSM__LOAD(&q->tail);
    adsm__wait_done(&q->done, (int)((unsigned)tail - q->capacity + 1)); /* a free slot */
    unsigned at = (unsigned)tail % q->capacity;
    memcpy(q->slots + (size_t)at * q->slot_size, cmd, bytes);
    q->results[at] = result;
    ADSM__STORE(&q->tail, adsm__ticket_next(tail));
    adsm__unlock(&q->push_lock);
    adsm__queue_ring(q);
    return tail;
}

/* Returns once the command with this ticket ran. */
ADSM__PRIVATE void adsm__queue_await(adsm__queue *q, int ticket) {
    adsm__wait_done(&q->done, adsm__ticket_next(ticket));
}

/* Every command pushed before this call ran. */
ADSM__PRIVATE void adsm__queue_drain(adsm__queue *q) { adsm__wait_done(&q->done, ADSM__LOAD(&q->tail)); }

/* A synchronous command: queues it behind everything pushed before and returns its result. */
ADSM__PRIVATE int adsm__queue_call(adsm__queue *q, const void *cmd, size_t bytes) {
    int result = 0;
    adsm__queue_await(q, adsm__queue_push(q, cmd, bytes, &result));
    return ADSM__LOAD(&result);
}

/* Signal-safe: every command pushed so far ran. */
ADSM__PRIVATE int adsm__queue_idle(adsm__queue *q) { return ADSM__LOAD(&q->tail) == ADSM__LOAD(&q->done); }

/* When nothing is queued (every command pushed ran), runs cmd on the calling thread through
 * `execute`, with the push lock held so that nothing is queued meanwhile, and returns 1 with its
 * result in *result: what the worker would have done next, without waking it. Else returns 0
 * and leaves cmd to be pushed. Normal context only (execute may block, with the lock held). */
ADSM__PRIVATE int adsm__queue_run_if_idle(adsm__queue *q, void *cmd, int *result) {
    int ran = 0;
    adsm__lock(&q->push_lock);
    if (adsm__queue_idle(q)) {
        *result = q->execute(q->ctx, cmd);
        ran = 1;
    }
    adsm__unlock(&q->push_lock);
    return ran;
}

/* ---- the worker ------------------------------------------------------------------------------ */
ADSM__PRIVATE void adsm__queue_run_one(adsm__queue *q, int done) {
    unsigned at = (unsigned)done % q->capacity;
    int result = q->execute(q->ctx, q->slots + (size_t)at * q->slot_size);
    if (q->results[at]) ADSM__STORE(q->results[at], result);
    ADSM__STORE(&q->done, adsm__ticket_next(done));
    adsm__futex_wake_all(&q->done);
}

/* Runs commands until stop finds the queue empty. The bell is read before the queue, so a push
 * or a stop after that read changes it and the futex wait returns at once. */
ADSM__PRIVATE void *adsm__queue_main(void *arg) {
    adsm__queue *q = (adsm__queue *)arg;
    adsm__tls_passthrough = 1; /* copies read shared memory: never through interposed memcpy */
    adsm__tls_copy_thread = 1;
    if (q->begin) q->begin(q->ctx);
    for (;;) {
        int bell = ADSM__LOAD(&q->bell), done = ADSM__LOAD(&q->done);
        if (ADSM__LOAD(&q->tail) != done) {
            adsm__queue_run_one(q, done);
            continue;
        }
        if (ADSM__LOAD(&q->quit)) return NULL;
        adsm__futex_wait(&q->bell, bell);
    }
}

/* ---- lifetime (normal context) --------------------------------------------------------------- */
ADSM__PRIVATE void adsm__queue_stop(adsm__queue *q);

/* Allocates `capacity` slots of `slot_size` bytes (a multiple of the command's alignment; calloc
 * aligns the first) and starts the worker. 0, or -1 with the queue not started (stop is still
 * safe to call). */
ADSM__PRIVATE int adsm__queue_start(adsm__queue *q, size_t slot_size, unsigned capacity, adsm__queue_exec_fn execute,
                                    void (*begin)(void *ctx), void *ctx) {
    memset(q, 0, sizeof *q);
    q->slot_size = slot_size;
    q->capacity = capacity;
    q->execute = execute;
    q->begin = begin;
    q->ctx = ctx;
    q->slots = (unsigned char *)calloc(capacity, slot_size);
    q->results = (int **)calloc(capacity, sizeof *q->results);
    if (q->slots && q->results) q->started = adsm__thread_start(&q->worker, adsm__queue_main, q) == 0;
    if (q->started) return 0;
    adsm__queue_stop(q);
    return -1;
}

/* Runs everything already queued, then ends the worker and frees the ring. Nothing may push
 * any more (a ticket pushed after this would never be done). */
ADSM__PRIVATE void adsm__queue_stop(adsm__queue *q) {
    if (q->started) {
        ADSM__STORE(&q->quit, 1);
        adsm__queue_ring(q);
        pthread_join(q->worker, NULL);
        q->started = 0;
    }
    free(q->slots);
    free(q->results);
    q->slots = NULL;
    q->results = NULL;
}

#endif /* ADSM__COPY_QUEUE_INCLUDED */
