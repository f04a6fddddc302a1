/* adsm_impl/emu/emu_streams.h -- the emulated device runs independent kernels at the same time.
 *
 * Launch messages reach the device process in issue order. Each becomes a task; a task starts once
 * a stream is idle and no earlier unfinished task conflicts with it: one of the two writes a range
 * the other reads or writes (read-after-write, write-after-read, write-after-write, from the
 * kernels' IN, OUT and INOUT objects), as task runtimes order work by its declared accesses. Two
 * kernels that conflict never overlap; two that do not may. Each stream is a thread with its own
 * worker pool (started at its first kernel), so kernels of different streams share the cores.
 * Completions are reported in issue order (a task's DONE waits for the earlier ones), so the
 * parent's "this device's launches up to seq are done" stays one number. ADSM_STREAMS=1 runs
 * kernels one at a time, in issue order.
 *
 * Context: the device process only: its main thread (adsm__emu_submit) and the stream threads,
 * under the scheduler's mutex; kernels run outside it. */
#ifndef ADSM__EMU_STREAMS_INCLUDED
#define ADSM__EMU_STREAMS_INCLUDED

#include "../common.h"
#include "../blocktree.h"
#include "../config.h"
#include "../backend.h"
#include "../kernel.h"

enum { ADSM__TASK_WAITING = 0, ADSM__TASK_RUNNING, ADSM__TASK_DONE };

typedef struct adsm__emu_task {
    void *launch; /* the backend's launch message (the task's own copy; freed with it) */
    const adsm__range *writable, *inputs; /* in it: what the kernel may write, and only read */
    uint32_t nwritable, ninputs;
    int state, status;
    uint32_t stream; /* the stream that ran it (ADSM_TRACE's track) */
    uint64_t ran_from, ran_to;
    char text[256];
} adsm__emu_task;

struct adsm__emu_sched;

typedef struct adsm__emu_stream {
    struct adsm__emu_sched *sched;
    adsm__pool pool;
    int pool_started;
    pthread_t thread;
    adsm__emu_task *task; /* assigned and not finished; NULL: idle */
    pthread_cond_t go;
} adsm__emu_stream;

typedef struct adsm__emu_sched {
    pthread_mutex_t mutex;
    adsm__emu_task **tasks; /* stb_ds array: tasks not yet reported done, in issue order */
    adsm__emu_stream streams[ADSM__MAX_STREAMS];
    unsigned nstreams, workers;
    adsm__chunk_runner runner;
    /* the backend's: runs a task's kernel on a pool (protections, timing, status), and reports a
     * finished task to the parent (called in issue order, mutex held) */
    void *ctx;
    void (*run)(void *ctx, adsm__pool *pool, adsm__emu_task *t);
    void (*report)(void *ctx, adsm__emu_task *t);
} adsm__emu_sched;

/* The launch whose kernel a pool is running (a crashing chunk's, for its error message). */
ADSM__PRIVATE const void *adsm__emu_pool_launch(adsm__pool *p) {
    adsm__emu_stream *s = ADSM__CONTAINER_OF(p, adsm__emu_stream, pool);
    return s->task ? s->task->launch : NULL;
}

/* Whether w writes anything o reads or writes. */
ADSM__PRIVATE int adsm__writes_into(const adsm__emu_task *w, const adsm__emu_task *o) {
    return adsm__ranges_meet(w->writable, w->nwritable, o->writable, o->nwritable) ||
           adsm__ranges_meet(w->writable, w->nwritable, o->inputs, o->ninputs);
}

ADSM__PRIVATE int adsm__tasks_conflict(const adsm__emu_task *a, const adsm__emu_task *b) {
    return adsm__writes_into(a, b) || adsm__writes_into(b, a);
}

/* Whether task k may start: no earlier unfinished task conflicts with it. */
ADSM__PRIVATE int adsm__task_ready(const adsm__emu_sched *s, ptrdiff_t k) {
    for (ptrdiff_t i = 0; i < k; i++)
        if (s->tasks[i]->state != ADSM__TASK_DONE && adsm__tasks_conflict(s->tasks[i], s->tasks[k])) return 0;
    return 1;
}

ADSM__PRIVATE adsm__emu_stream *adsm__idle_stream(adsm__emu_sched *s) {
    for (unsigned i = 0; i < s->nstreams; i++)
        if (!s->streams[i].task) return &s->streams[i];
    return NULL;
}

/* Starts every waiting task that may start, in issue order, while streams are idle. Mutex held. */
ADSM__PRIVATE void adsm__emu_dispatch(adsm__emu_sched *s) {
    for (ptrdiff_t k = 0; k < stbds_arrlen(s->tasks); k++) {
        adsm__emu_task *t = s->tasks[k];
        if (t->state != ADSM__TASK_WAITING || !adsm__task_ready(s, k)) continue;
        adsm__emu_stream *st = adsm__idle_stream(s);
        if (!st) return;
        t->state = ADSM__TASK_RUNNING;
        t->stream = (uint32_t)(st - s->streams);
        st->task = t;
        pthread_cond_signal(&st->go);
    }
}

/* Reports the finished tasks at the head of the issue order. Mutex held. */
ADSM__PRIVATE void adsm__emu_report_done(adsm__emu_sched *s) {
    while (stbds_arrlen(s->tasks) > 0 && s->tasks[0]->state == ADSM__TASK_DONE) {
        adsm__emu_task *t = s->tasks[0];
        stbds_arrdel(s->tasks, 0);
        s->report(s->ctx, t);
        free(t->launch);
        free(t);
    }
}

ADSM__PRIVATE void *adsm__emu_stream_main(void *arg) {
    adsm__emu_stream *st = (adsm__emu_stream *)arg;
    adsm__emu_sched *s = st->sched;
    pthread_mutex_lock(&s->mutex);
    for (;;) {
        while (!st->task) pthread_cond_wait(&st->go, &s->mutex);
        adsm__emu_task *t = st->task;
        pthread_mutex_unlock(&s->mutex);
        if (!st->pool_started && adsm__pool_start(&st->pool, s->workers, s->runner) != 0) _exit(4);
        st->pool_started = 1;
        s->run(s->ctx, &st->pool, t);
        pthread_mutex_lock(&s->mutex);
        t->state = ADSM__TASK_DONE;
        st->task = NULL;
        adsm__emu_report_done(s);
        adsm__emu_dispatch(s);
    }
    return NULL;
}

/* Starts the stream threads (their pools start with their first kernels). 0, or -1. */
ADSM__PRIVATE int adsm__emu_sched_start(adsm__emu_sched *s) {
    pthread_mutex_init(&s->mutex, NULL);
    for (unsigned i = 0; i < s->nstreams; i++) {
        adsm__emu_stream *st = &s->streams[i];
        st->sched = s;
        pthread_cond_init(&st->go, NULL);
        if (i == 0) { /* the first stream's pool now: most kernels run there, and start at once */
            if (adsm__pool_start(&st->pool, s->workers, s->runner) != 0) return -1;
            st->pool_started = 1;
        }
        if (adsm__thread_start(&st->thread, adsm__emu_stream_main, st) != 0) {
            s->nstreams = i; /* run with the streams we got */
            return i > 0 ? 0 : -1;
        }
    }
    return 0;
}

/* A launch arrived (launch: the backend's message, malloc'd, now the task's; the ranges lie in
 * it): it runs behind the earlier ones it conflicts with. */
ADSM__PRIVATE void adsm__emu_submit(adsm__emu_sched *s, void *launch, const adsm__range *writable, uint32_t nwritable,
                                    const adsm__range *inputs, uint32_t ninputs) {
    adsm__emu_task *t = (adsm__emu_task *)calloc(1, sizeof *t);
    if (!t) _exit(5); /* the parent sees the device lost */
    t->launch = launch;
    t->writable = writable;
    t->nwritable = nwritable;
    t->inputs = inputs;
    t->ninputs = ninputs;
    pthread_mutex_lock(&s->mutex);
    stbds_arrput(s->tasks, t);
    adsm__emu_dispatch(s);
    pthread_mutex_unlock(&s->mutex);
}

#endif /* ADSM__EMU_STREAMS_INCLUDED */
