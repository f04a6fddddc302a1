/* adsm_impl/prepare.h -- preparing a large range of host memory on several threads: the kernel
 * allocates and zeroes a range's pages (a collapse into 2 MiB pages, or a populate) on the thread
 * that asks, at about 5 GB/s on the first GPU machine measured (96 MiB: 19 ms), while its other
 * CPUs idle. Split into runs of whole 2 MiB pages, several threads zero at once where memory
 * bandwidth allows (bench/host_pages, its "by threads" rows). adsm uses it for its objects' host
 * pages before the driver page-locks them, and for adsm_host_alloc's buffers, the explicit
 * program's memory, which gets the same care. ADSM_PREPARE_THREADS sets how many threads (0:
 * automatic, half the CPUs up to 8 where there are 4 or more, else none besides the caller).
 *
 * Normal thread context, no lock held: the threads touch only the range, which nothing else can
 * reach yet; never in the signal handler. */
#ifndef ADSM__PREPARE_INCLUDED
#define ADSM__PREPARE_INCLUDED

#include "common.h"
#include "os.h"

#include <pthread.h>
#include <signal.h>

/* The most threads a range is split over (the caller's included). */
#define ADSM__PREPARE_MAX_THREADS 16
/* Each thread takes at least this much: under it a thread's start costs more than it saves
 * (zeroing 4 MiB takes about 0.8 ms at 5 GB/s; starting a thread, tens of microseconds). */
#define ADSM__PREPARE_MIN_RUN ((size_t)4 << 20)

/* Prepares [at, at + n): 0, or the errno of a refusal. */
typedef int (*adsm__prepare_fn)(uintptr_t at, size_t n);

typedef struct adsm__prepare_run {
    adsm__prepare_fn work;
    uintptr_t at;
    size_t n;
    int result;
} adsm__prepare_run;

/* ADSM_PREPARE_THREADS=0: half the CPUs, at most 8, where there are at least 4 (a machine with
 * fewer has no CPU to spare: on the 2-vCPU build machine two threads did not help, 5.3 ms against
 * 5.0 for 96 MiB); else the caller alone. */
ADSM__PRIVATE unsigned adsm__prepare_threads_auto(size_t cpus) {
    return cpus >= 4 ? (unsigned)ADSM__MIN(cpus / 2, 8) : 1;
}

ADSM__PRIVATE void *adsm__prepare_main(void *arg) {
    adsm__prepare_run *r = (adsm__prepare_run *)arg;
    r->result = r->work(r->at, r->n);
    return NULL;
}

/* How many threads [at, at + n) is split over: at most `threads`, each with at least
 * ADSM__PREPARE_MIN_RUN. */
ADSM__PRIVATE unsigned adsm__prepare_split_count(unsigned threads, size_t n) {
    size_t most = n / ADSM__PREPARE_MIN_RUN;
    if (threads < 1) threads = 1; /* the caller, at least */
    if (threads > ADSM__PREPARE_MAX_THREADS) threads = ADSM__PREPARE_MAX_THREADS;
    return most < 2 ? 1 : (unsigned)ADSM__MIN((size_t)threads, most);
}

/* Runs `work` over [at, at + n) in up to `threads` runs of whole 2 MiB pages, the caller taking
 * the first and a thread each of the others (started with every signal blocked: they touch no
 * protected page, and a signal for the program must not land on them). A thread that cannot be
 * started leaves its run to the caller. Returns how many threads ran besides the caller, and the
 * first refusal in *result (0: none). */
ADSM__PRIVATE unsigned adsm__prepare_split(unsigned threads, uintptr_t at, size_t n, adsm__prepare_fn work,
                                           int *result) {
    unsigned count = adsm__prepare_split_count(threads, n), helpers = 0;
    size_t pages = n / ADSM__HUGE_PAGE;
    adsm__prepare_run runs[ADSM__PREPARE_MAX_THREADS];
    pthread_t tids[ADSM__PREPARE_MAX_THREADS];
    int started[ADSM__PREPARE_MAX_THREADS] = {0};
    /* run i: huge pages [pages i / count, pages (i + 1) / count), the last with the tail */
    for (unsigned i = 0; i < count; i++) {
        size_t from = pages * i / count * ADSM__HUGE_PAGE, to = pages * (i + 1) / count * ADSM__HUGE_PAGE;
        runs[i] = (adsm__prepare_run){work, at + from, i + 1 == count ? n - from : to - from, 0};
    }
    for (unsigned i = 1; i < count; i++)
        if (adsm__thread_start(&tids[i], adsm__prepare_main, &runs[i]) == 0) started[i] = 1, helpers++;
    *result = 0;
    for (unsigned i = 0; i < count; i++) {
        if (i > 0 && started[i]) pthread_join(tids[i], NULL);
        else runs[i].result = work(runs[i].at, runs[i].n);
        if (!*result) *result = runs[i].result;
    }
    return helpers;
}

/* Anonymous memory: its pages allocated and zeroed now (transparent huge pages where the range
 * asked for them), so that the driver's page-locking finds them there. 0 or errno; a kernel
 * without MADV_POPULATE_WRITE (before 5.14) leaves them to the first touch. */
ADSM__PRIVATE int adsm__populate_anonymous(uintptr_t at, size_t n) {
#ifdef MADV_POPULATE_WRITE
    return madvise((void *)at, n, MADV_POPULATE_WRITE) == 0 ? 0 : errno;
#else
    (void)at, (void)n;
    return 0;
#endif
}

#endif /* ADSM__PREPARE_INCLUDED */
