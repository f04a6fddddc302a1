/* tests/test_trace.c -- ADSM_TRACE / adsm_config.trace: the file written at adsm_shutdown holds
 * one event per fault the runtime resolved (read and write apart), one per kernel, one per object
 * made and freed, copies whose bytes add up to adsm_stats' counts, every track named once, and no dropped events; without a path no file
 * is written, and one that cannot be written or whose writes fail is reported. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

ADSM_KERNEL(twice, ADSM_INOUT(int, x), ADSM_VALUE(size_t, n));
void twice(adsm_grid g, int *x, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) x[i] *= 2;
    }
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "no trace file at %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *text = malloc((size_t)n + 1);
    cr_assert_eq(fread(text, 1, (size_t)n, f), (size_t)n);
    text[n] = 0;
    fclose(f);
    return text;
}

static size_t count_events(const char *text, const char *name) {
    char key[64];
    snprintf(key, sizeof key, "\"name\":\"%s\"", name);
    size_t n = 0;
    for (const char *p = strstr(text, key); p; p = strstr(p + 1, key)) n++;
    return n;
}

/* Sum of the "bytes" arguments of the events called `name`. */
static unsigned long long sum_bytes(const char *text, const char *name) {
    char key[64];
    snprintf(key, sizeof key, "\"name\":\"%s\"", name);
    unsigned long long sum = 0;
    for (const char *p = strstr(text, key); p; p = strstr(p + 1, key)) {
        const char *b = strstr(p, "\"bytes\":");
        cr_assert_not_null(b);
        sum += strtoull(b + 8, NULL, 10);
    }
    return sum;
}

Test(trace, events_match_the_stats) {
    char path[] = "/tmp/adsm_trace_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.protocol = ADSM_PROTOCOL_ROLLING;
    cfg.block_size = 4096;
    cfg.rolling_size = 4;
    cfg.trace = path;
    struct timespec before;
    clock_gettime(CLOCK_MONOTONIC, &before);
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    const size_t n = 16 * 1024;
    int *x = adsm_alloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (int)i; /* 16 write faults, evictions past 4 dirty blocks */
    cr_assert_eq(ADSM_CALL(twice, adsm_grid_1d(n / 256, 256), x, n), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    long sum = 0;
    for (size_t i = 0; i < n; i += 1024) sum += x[i]; /* 16 read faults and fetches */
    cr_assert_eq(sum, 2 * (long)(1024 * 16 * 15 / 2));
    adsm_stats s;
    adsm_get_stats(&s);
    adsm_free(x);
    adsm_shutdown();
    char *text = slurp(path);
    cr_assert(strstr(text, "\"traceEvents\":["), "not a trace-event file");
    cr_assert(strstr(text, "\"dropped_events\":0"));
    /* where ts 0 lies on CLOCK_MONOTONIC, so a program's own clock readings can be set beside it
     * (bench/apps/report.py counts the spans inside a run's timed part) */
    const char *origin = strstr(text, "\"origin_ns\":");
    cr_assert_not_null(origin, "no origin_ns");
    unsigned long long origin_ns = strtoull(origin + strlen("\"origin_ns\":"), NULL, 10);
    unsigned long long before_ns = (unsigned long long)before.tv_sec * 1000000000ull + (unsigned long long)before.tv_nsec;
    cr_assert(origin_ns >= before_ns && origin_ns - before_ns < 60ull * 1000000000ull,
              "origin_ns %llu, the test began at %llu", origin_ns, before_ns);
    cr_assert_eq(count_events(text, "fault (write)"), s.write_faults);
    cr_assert_eq(count_events(text, "fault (read)"), s.read_faults);
    cr_assert_eq(count_events(text, "kernel"), 1);
    cr_assert_eq(count_events(text, "call"), 1, "the launch's CPU side");
    cr_assert_eq(count_events(text, "sync"), 1);
    cr_assert_eq(count_events(text, "protection change"), s.protection_changes, "each protection change a span");
    cr_assert_gt(s.protection_changes, 0);
    cr_assert_eq(count_events(text, "evict"), s.evictions);
    cr_assert_gt(s.evictions, 0);
    cr_assert_eq(sum_bytes(text, "copy to device"), s.h2d_bytes);
    cr_assert_eq(sum_bytes(text, "fetch"), s.d2h_bytes);
    /* making and freeing the object are spans too, so a breakdown of the run adds up */
    cr_assert_eq(count_events(text, "alloc"), 1);
    cr_assert_eq(sum_bytes(text, "alloc"), n * sizeof *x);
    cr_assert_eq(count_events(text, "free"), 1);
    /* and their parts: device memory given and taken back, the host pages given back */
    cr_assert_eq(count_events(text, "device memory"), 2);
    cr_assert_eq(sum_bytes(text, "device memory"), n * sizeof *x, "the alloc's part carries the bytes, the free's 0");
    cr_assert_eq(count_events(text, "free: page-unlock"), 1);
    cr_assert(strstr(text, "\"name\":\"emu copy engine\""), "the copy engine's track has no name");
    cr_assert(strstr(text, "\"name\":\"device 0: kernels, stream 0\""), "the kernels' track has no name");
    free(text);
    unlink(path);
}

Test(trace, no_path_no_file) {
    char path[] = "/tmp/adsm_notrace_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    unlink(path);
    unsetenv("ADSM_TRACE");
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK);
    int *x = adsm_alloc(4096);
    x[0] = 1;
    adsm_free(x);
    adsm_shutdown();
    cr_assert_eq(access(path, F_OK), -1);
    cr_assert_null(adsm__rt.trace.events);
}

/* A trace file that cannot be written (its directory is missing) costs nothing but warnings, at
 * adsm_init and at adsm_shutdown, naming the path and the reason. */
/* A short run traced to `path`: what adsm said on stderr (redirected) from adsm_init to adsm_shutdown. */
static void run_traced_to(const char *path, char *said, size_t cap) {
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.trace = path;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    int *x = adsm_alloc(4096);
    x[0] = 1;
    adsm_free(x);
    adsm_shutdown();
    fflush(stderr);
    size_t got = fread(said, 1, cap - 1, cr_get_redirected_stderr());
    said[got] = 0;
}

Test(trace, an_unwritable_path_is_reported_at_init_and_shutdown, .init = cr_redirect_stderr) {
    char said[1024];
    run_traced_to("/nonexistent-adsm-dir/trace.json", said, sizeof said);
    cr_assert(strstr(said, "ADSM_TRACE: /nonexistent-adsm-dir/trace.json cannot be written (No such file or directory)"),
              "init said: %s", said);
    cr_assert(strstr(said, "ADSM_TRACE: cannot write /nonexistent-adsm-dir/trace.json: No such file or directory"),
              "shutdown said: %s", said);
    cr_assert_null(adsm__rt.trace.events, "the event buffer was not given back");
}

/* A file whose writes fail (a full disk: /dev/full) is cut short: adsm_shutdown says so rather
 * than leave a broken trace behind in silence. */
Test(trace, a_write_that_fails_is_reported, .init = cr_redirect_stderr) {
    char said[1024];
    run_traced_to("/dev/full", said, sizeof said);
    cr_assert(strstr(said, "ADSM_TRACE: cannot write /dev/full: No space left on device"), "shutdown said: %s", said);
    cr_assert_null(strstr(said, "cannot be written"), "/dev/full can be opened: init said: %s", said);
}

/* ---- tracks, labels and ending without adsm_shutdown (issue 34, point 9) ---------------------- */

/* One kernel event as written on its own line: its track and its span (us). */
typedef struct kernel_span {
    int tid;
    double ts, dur;
} kernel_span;

static size_t kernel_spans(const char *text, kernel_span *out, size_t max) {
    size_t n = 0;
    for (const char *p = strstr(text, "{\"ph\":\"X\",\"name\":\"kernel\""); p && n < max;
         p = strstr(p + 1, "{\"ph\":\"X\",\"name\":\"kernel\"")) {
        kernel_span k;
        cr_assert_eq(sscanf(p, "{\"ph\":\"X\",\"name\":\"kernel\",\"pid\":1,\"tid\":%d,\"ts\":%lf,\"dur\":%lf", &k.tid,
                            &k.ts, &k.dur),
                     3, "a kernel event not as written: %.120s", p);
        cr_assert(strncmp(strstr(p, "\"args\":"), "\"args\":{\"launch\":", 17) == 0,
                  "a kernel's args are not its launch number: %.160s", p);
        out[n++] = k;
    }
    return n;
}

static int by_track_then_start(const void *a, const void *b) {
    const kernel_span *x = a, *y = b;
    if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
    return x->ts < y->ts ? -1 : x->ts > y->ts;
}

static char *trace_path(void) {
    static char path[] = "/tmp/adsm_trace_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    return path;
}

/* Kernels of two devices, several streams each: every device and stream has a track of its own,
 * named, and the spans on each track follow one another (Perfetto requires them to nest);
 * copies from one device to the other are labelled so, and each label's bytes are its stats'. */
Test(trace, every_device_and_stream_has_its_own_track) {
    char *path = trace_path();
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.protocol = ADSM_PROTOCOL_LAZY;
    cfg.emu_devices = 2;
    cfg.streams = 4;
    cfg.emu_memory = (size_t)64 << 20;
    cfg.trace = path;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    const size_t n = 64 * 1024;
    int *x[4];
    for (int k = 0; k < 4; k++) {
        x[k] = adsm_alloc(n * sizeof(int));
        cr_assert_not_null(x[k], "%s", adsm_last_error());
        for (size_t i = 0; i < n; i++) x[k][i] = (int)i;
    }
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < 4; k++) /* independent objects: the streams run them at once */
            cr_assert_eq(ADSM_CALL_ON(k % 2, twice, adsm_grid_1d(n / 256, 256), x[k], n), ADSM_OK, "%s",
                         adsm_last_error());
    cr_assert_eq(ADSM_CALL_ON(1, twice, adsm_grid_1d(n / 256, 256), x[0], n), ADSM_OK); /* x[0] moves 0 -> 1 */
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(x[0][5], 5 * 16);
    adsm_stats s;
    adsm_get_stats(&s);
    adsm_shutdown();
    char *text = slurp(path);
    cr_assert(strstr(text, "\"device 0: kernels, stream "), "no track for device 0's kernels");
    cr_assert(strstr(text, "\"device 1: kernels, stream "), "no track for device 1's kernels");
    kernel_span spans[64];
    size_t k = kernel_spans(text, spans, 64);
    cr_assert_eq(k, s.launches, "%zu kernel events for %llu launches", k, (unsigned long long)s.launches);
    qsort(spans, k, sizeof *spans, by_track_then_start);
    for (size_t i = 1; i < k; i++)
        if (spans[i].tid == spans[i - 1].tid)
            cr_assert_geq(spans[i].ts + 0.002, spans[i - 1].ts + spans[i - 1].dur,
                          "track %d: a kernel at %.3f us starts inside the one before (%.3f + %.3f)", spans[i].tid,
                          spans[i].ts, spans[i - 1].ts, spans[i - 1].dur);
    cr_assert_gt(s.d2d_bytes, 0, "no copy between the devices");
    cr_assert_eq(sum_bytes(text, "copy between devices"), s.d2d_bytes);
    cr_assert_eq(sum_bytes(text, "copy to device"), s.h2d_bytes);
    free(text);
    unlink(path);
}

/* A program that ends with exit() and no adsm_shutdown (README's usage example does) still gets
 * its trace, written at exit; a forked child of it that exits writes nothing over it. */
Test(trace, written_at_exit_without_shutdown) {
    char *path = trace_path();
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        adsm_config cfg = {0};
        cfg.backend = ADSM_BACKEND_EMU;
        cfg.trace = path;
        if (adsm_init(&cfg) != ADSM_OK) _exit(2);
        int *x = adsm_alloc(1 << 20);
        if (!x) _exit(3);
        x[0] = 1;
        if (ADSM_CALL(twice, adsm_grid_1d(1, 256), x, 256) != ADSM_OK || adsm_sync() != ADSM_OK) _exit(4);
        pid_t child = fork(); /* exits at once: the trace is not its own */
        if (child == 0) exit(0);
        waitpid(child, NULL, 0);
        exit(0);
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the traced program failed: status %d", st);
    char *text = slurp(path);
    cr_assert(strstr(text, "\"traceEvents\":["), "not a trace-event file");
    cr_assert(strstr(text, "\"dropped_events\":0"), "the file was not finished");
    cr_assert_eq(count_events(text, "alloc"), 1);
    cr_assert_eq(count_events(text, "kernel"), 1);
    free(text);
    unlink(path);
}

/* A second program thread's work, traced: an object made, written and freed on it. */
static void *work_on_another_thread(void *arg) {
    (void)arg;
    int *y = adsm_alloc(1 << 20);
    if (y) y[3] = 3;
    adsm_free(y);
    return y;
}

/* The tids of a trace's events (events) and of its track names (names), each at most once in
 * events, once per name in names. Each entry is on a line of its own. Returns how many of each. */
static void tracks_of(const char *text, int *events, size_t *nevents, int *names, size_t *nnames, size_t cap) {
    *nevents = *nnames = 0;
    for (const char *line = text; line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        const char *t = strstr(line, "\"tid\":"), *end = strchr(line, '\n');
        if (!t || (end && t > end)) continue;
        int tid = atoi(t + 6);
        const char *meta = strstr(line, "\"thread_name\"");
        if (meta && (!end || meta < end)) {
            cr_assert_lt(*nnames, cap);
            names[(*nnames)++] = tid;
            continue;
        }
        size_t i = 0;
        while (i < *nevents && events[i] != tid) i++;
        if (i == *nevents) {
            cr_assert_lt(*nevents, cap);
            events[(*nevents)++] = tid;
        }
    }
}

/* Every track with an event carries exactly one name: the first program thread's, a second
 * program thread's (it names no track itself), the copy engine's, the kernels'. */
Test(trace, every_track_is_named_once) {
    char *path = trace_path();
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.trace = path;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    int *x = adsm_alloc(1 << 20);
    cr_assert_not_null(x, "%s", adsm_last_error());
    x[0] = 1;
    cr_assert_eq(ADSM_CALL(twice, adsm_grid_1d(1, 256), x, 256), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(x[0], 2);
    pthread_t other;
    cr_assert_eq(pthread_create(&other, NULL, work_on_another_thread, NULL), 0);
    void *made = NULL;
    pthread_join(other, &made);
    cr_assert_not_null(made, "the second thread could not make its object");
    adsm_free(x);
    adsm_shutdown();
    char *text = slurp(path);
    int events[64], names[64];
    size_t nevents, nnames;
    tracks_of(text, events, &nevents, names, &nnames, 64);
    cr_assert_geq(nevents, 4, "expected tracks for two program threads, the copy engine and the kernels");
    for (size_t i = 0; i < nevents; i++) {
        size_t named = 0;
        for (size_t j = 0; j < nnames; j++) named += names[j] == events[i];
        cr_assert_eq(named, 1, "track %d has %zu names", events[i], named);
    }
    cr_assert(strstr(text, "\"program thread "), "the second program thread's track is not named");
    free(text);
    unlink(path);
}
