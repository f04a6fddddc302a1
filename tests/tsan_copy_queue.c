#define ADSM_IMPLEMENTATION
#include "adsm.h"
/* tests/tsan_copy_queue.c -- the copy queue (adsm_impl/copy_queue.h) under ThreadSanitizer.
 *
 * Criterion 2.4 aborts at start-up under TSan, so this is a plain program (exit status 0: all
 * well); tests/test_copy_queue.c checks the queue's properties one by one. Here producers hammer a
 * ring of two slots, so that every slot is reused while other producers wait on it, with
 * synchronous calls and asynchronous pushes; the worker adds each command's value to a sum that
 * only it touches (TSan reports any access the queue's ordering does not cover), and then the
 * queue is started and stopped many times with and without work queued. */
#include <pthread.h>
#include <stdio.h>

#define PRODUCERS 4
#define COUNT 5000

typedef struct work {
    long sum; /* the worker's: read by the main thread only after drain or stop */
    int ran;
} work;

static int add(void *ctx, void *slot) {
    work *w = (work *)ctx;
    int v = *(int *)slot;
    w->sum += v;
    w->ran++;
    return v + 1;
}

typedef struct producer {
    adsm__queue *q;
    int id, wrong;
} producer;

static void *produce(void *arg) {
    producer *p = (producer *)arg;
    for (int i = 0; i < COUNT; i++) {
        int v = p->id * COUNT + i, result = -1;
        if (i % 2) result = adsm__queue_call(p->q, &v, sizeof v);
        else adsm__queue_push(p->q, &v, sizeof v, i % 4 ? NULL : &result);
        if (i % 4 == 0) adsm__queue_drain(p->q); /* the pushed command ran: its result is in */
        if (i % 2 || i % 4 == 0) p->wrong += result != v + 1;
    }
    return NULL;
}

static int hammer(void) {
    adsm__queue q;
    work w = {0, 0};
    producer p[PRODUCERS];
    pthread_t t[PRODUCERS];
    if (adsm__queue_start(&q, sizeof(int), 2, add, NULL, &w) != 0) return 1;
    for (int i = 0; i < PRODUCERS; i++) {
        p[i] = (producer){&q, i, 0};
        pthread_create(&t[i], NULL, produce, &p[i]);
    }
    int wrong = 0;
    for (int i = 0; i < PRODUCERS; i++) {
        pthread_join(t[i], NULL);
        wrong += p[i].wrong;
    }
    adsm__queue_drain(&q);
    long n = (long)PRODUCERS * COUNT, want = n * (n - 1) / 2;
    int bad = wrong != 0 || w.ran != n || w.sum != want;
    if (bad)
        fprintf(stderr, "hammer: %d wrong results, %d of %ld ran, sum %ld (want %ld)\n", wrong, w.ran, n, w.sum, want);
    adsm__queue_stop(&q);
    return bad;
}

static int start_stop(void) {
    for (int round = 0; round < 200; round++) {
        adsm__queue q;
        work w = {0, 0};
        if (adsm__queue_start(&q, sizeof(int), 2, add, NULL, &w) != 0) return 1;
        for (int i = 0; i < round % 3; i++) adsm__queue_push(&q, &i, sizeof i, NULL);
        adsm__queue_stop(&q);
        if (w.ran != round % 3) {
            fprintf(stderr, "start_stop: round %d ran %d of %d\n", round, w.ran, round % 3);
            return 1;
        }
    }
    return 0;
}

int main(void) {
    int failed = hammer() + start_stop();
    printf("tsan_copy_queue: %s\n", failed ? "FAILED" : "ok");
    return failed != 0;
}
