/* tests/test_backend_emu.c -- the emulated device process as a neighbour of the program: it holds
 * none of the program's descriptors (pipes reach end of file, pclose returns, file locks go with
 * the program's close), it does not print what the program had buffered before the fork, and
 * what kernel bodies print reaches the program's stdout before adsm_sync returns. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <unistd.h>

ADSM_KERNEL(say, ADSM_OUT(int, c), ADSM_VALUE(int, v));

void say(adsm_grid g, int *c, int v) {
    ADSM_FOR_EACH_THREAD(g, i) {
        c[i] = v;
        if (i == 0) printf("kernel says %d\n", v);
    }
}

static void init_emu(void) {
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
}

/* Waits up to 10 s for fd to become readable; a descriptor the device process still held would
 * never see end of file. */
static void assert_eof_soon(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    cr_assert_eq(poll(&p, 1, 10000), 1, "no end of file: another process holds the write end");
    char c;
    cr_assert_eq(read(fd, &c, 1), 0);
}

Test(emu_process, pipe_made_before_init_reaches_end_of_file, .timeout = 30) {
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    init_emu();
    close(fds[1]);
    assert_eof_soon(fds[0]);
    adsm_shutdown();
}

Test(emu_process, pclose_of_earlier_popen_returns, .timeout = 30) {
    FILE *f = popen("cat > /dev/null", "w");
    cr_assert_not_null(f);
    init_emu();
    cr_assert_eq(pclose(f), 0); /* cat exits only when every write end is closed */
    adsm_shutdown();
}

Test(emu_process, file_lock_goes_with_the_programs_close, .timeout = 30) {
    char path[] = "/tmp/adsm_lock_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(flock(fd, LOCK_EX), 0);
    init_emu();
    close(fd);
    int again = open(path, O_RDWR);
    cr_assert_eq(flock(again, LOCK_EX | LOCK_NB), 0, "the lock is still held by the device process");
    close(again);
    unlink(path);
    adsm_shutdown();
}

/* Redirects stdout into a temporary file, fully buffered, and returns the file's descriptor. */
static int capture_stdout(void) {
    char path[] = "/tmp/adsm_out_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    unlink(path);
    fflush(stdout);
    cr_assert_eq(dup2(fd, STDOUT_FILENO), STDOUT_FILENO);
    setvbuf(stdout, NULL, _IOFBF, 1 << 16);
    return fd;
}

static size_t count_of(const char *text, const char *what) {
    size_t n = 0;
    for (const char *p = strstr(text, what); p; p = strstr(p + 1, what)) n++;
    return n;
}

Test(emu_process, output_buffered_before_fork_is_printed_once_and_kernel_output_arrives, .timeout = 30) {
    int fd = capture_stdout();
    printf("buffered before the device starts\n"); /* still in the stdio buffer at the fork */
    init_emu();
    int *c = adsm_alloc(4096);
    cr_assert_eq(ADSM_CALL(say, adsm_grid_1d(1, 64), c, 7), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    char text[4096] = {0};
    cr_assert_geq(pread(fd, text, sizeof text - 1, 0), 0);
    cr_expect_eq(count_of(text, "kernel says 7"), 1, "kernel output not out at sync: [%s]", text);
    cr_assert_eq(c[63], 7);
    adsm_free(c);
    adsm_shutdown(); /* the device process is gone: nothing of it can print any more */
    fflush(stdout);
    memset(text, 0, sizeof text);
    cr_assert_geq(pread(fd, text, sizeof text - 1, 0), 0);
    cr_expect_eq(count_of(text, "buffered before the device starts"), 1, "[%s]", text);
    cr_expect_eq(count_of(text, "kernel says 7"), 1, "[%s]", text);
}
