/* tests/test_backend_emu.c -- the emulated device process as a neighbour of the program: it holds
 * none of the program's descriptors (pipes reach end of file, pclose returns, file locks go with
 * the program's close), it does not print what the program had buffered before the fork, what
 * kernel bodies print reaches the program's stdout before adsm_sync returns, and it is not the
 * program's child (a loop that reaps every child ends; adsm reaps it itself where the program is
 * the reaper of orphans). */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/seccomp.h"

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

/* ---- programs that reap every child (issue 34, item 4) ------------------------------------- */
/* The emulated device is not a child of the program, so a program that forks a worker and reaps
 * every child (`while (wait(&st) > 0)`, or waitpid(-1) or waitid(P_ALL) likewise) sees its worker
 * and then ECHILD, instead of waiting for ever for the device, and adsm keeps its device: a kernel
 * call works afterwards. Nor does the program's SIGCHLD handler hear of the device, even when it
 * goes at adsm_shutdown. Each case runs in a forked child of the test with a 20 s alarm (the loop
 * used to hang there: the device was a child that never exits). */
typedef enum { REAP_WAIT, REAP_WAITPID, REAP_WAITID } reap_style;
static const char *const reap_names[] = {"while (wait(&st) > 0)", "while (waitpid(-1, &st, 0) > 0)",
                                         "while (waitid(P_ALL, 0, &si, WEXITED) == 0)"};

/* Exit codes of the reaping child: what went wrong. */
enum {
    REAPER_OK = 0,
    REAPER_NO_INIT = 10,
    REAPER_NO_FORK,
    REAPER_REAPED_OTHER, /* something besides the worker, or the worker's status wrong */
    REAPER_NOT_ECHILD,   /* the loop ended on another error */
    REAPER_DEVICE_GONE,  /* a kernel call after the loop failed */
    REAPER_SIGCHLD,      /* the SIGCHLD handler ran other than once (the worker) */
    REAPER_NO_WORKER,    /* the loop never reaped the worker */
};
static const char *reaper_says(int code) {
    switch (code) {
    case REAPER_NO_INIT: return "adsm_init failed";
    case REAPER_NO_FORK: return "fork failed";
    case REAPER_REAPED_OTHER: return "the loop reaped a process other than the worker (the device?)";
    case REAPER_NOT_ECHILD: return "the loop ended on an error other than ECHILD";
    case REAPER_DEVICE_GONE: return "a kernel call after the loop failed: adsm lost its device";
    case REAPER_SIGCHLD: return "the program's SIGCHLD handler heard of a process besides its worker";
    case REAPER_NO_WORKER: return "the worker was never reaped";
    default: return "?";
    }
}

static volatile sig_atomic_t sigchld_heard;
static void on_sigchld(int sig) {
    (void)sig;
    sigchld_heard++;
}

/* One reap of any child in the given style: its pid and exit code, or -1 with errno. */
static pid_t reap_one(reap_style how, int *code) {
    int st = 0;
    pid_t pid;
    if (how == REAP_WAITID) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_ALL, 0, &si, WEXITED) != 0) return -1;
        *code = si.si_code == CLD_EXITED ? si.si_status : -1;
        return si.si_pid;
    }
    pid = how == REAP_WAIT ? wait(&st) : waitpid(-1, &st, 0);
    *code = pid > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return pid;
}

static int reaping_program(reap_style how) {
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    if (adsm_init(&cfg) != ADSM_OK) return REAPER_NO_INIT;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigchld;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);
    int *c = adsm_alloc(4096);
    pid_t worker = fork();
    if (worker < 0) return REAPER_NO_FORK;
    if (worker == 0) _exit(3);
    pid_t pid;
    int code, reaped_worker = 0;
    while ((pid = reap_one(how, &code)) > 0) {
        if (pid != worker || code != 3) return REAPER_REAPED_OTHER;
        reaped_worker = 1;
    }
    if (errno != ECHILD) return REAPER_NOT_ECHILD;
    if (!reaped_worker) return REAPER_NO_WORKER;
    if (!c || ADSM_CALL(say, adsm_grid_1d(1, 64), c, 5) != ADSM_OK || adsm_sync() != ADSM_OK || c[63] != 5)
        return REAPER_DEVICE_GONE;
    adsm_free(c);
    adsm_shutdown(); /* the device goes: no SIGCHLD for the program */
    return sigchld_heard == 1 ? REAPER_OK : REAPER_SIGCHLD;
}

static int status_of_child(int (*body)(int), int arg) {
    fflush(stdout);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        alarm(20);
        _exit(body(arg));
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    return status;
}

static int reaping_program_arg(int how) { return reaping_program((reap_style)how); }

ParameterizedTestParameters(emu_process, program_reaping_every_child_keeps_its_device) {
    static reap_style styles[] = {REAP_WAIT, REAP_WAITPID, REAP_WAITID};
    return cr_make_param_array(reap_style, styles, sizeof styles / sizeof *styles);
}

ParameterizedTest(reap_style *how, emu_process, program_reaping_every_child_keeps_its_device, .timeout = 60) {
    int status = status_of_child(reaping_program_arg, (int)*how);
    cr_assert(!(WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM),
              "%s: still reaping after 20 s (waiting for the emulated device?)", reap_names[*how]);
    cr_assert(WIFEXITED(status), "%s: the program died of signal %d", reap_names[*how], WTERMSIG(status));
    cr_assert_eq(WEXITSTATUS(status), REAPER_OK, "%s: %s", reap_names[*how], reaper_says(WEXITSTATUS(status)));
}

/* Where the program reaps orphans itself (PID 1 in a container, or a child subreaper), the device
 * comes back to it as a child (the documented limit: a loop over every child waits for it there);
 * adsm knows, and reaps it at adsm_shutdown, leaving no zombie. */
static int subreaper_program(int unused) {
    (void)unused;
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) return 20;
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    if (adsm_init(&cfg) != ADSM_OK) return REAPER_NO_INIT;
    adsm__emu *e = (adsm__emu *)adsm__rt.be_ctx; /* white-box */
    if (!e->child_is_ours || waitpid(e->child, NULL, WNOHANG) != 0) return 21;
    int *c = adsm_alloc(4096);
    if (!c || ADSM_CALL(say, adsm_grid_1d(1, 64), c, 6) != ADSM_OK || adsm_sync() != ADSM_OK || c[63] != 6)
        return REAPER_DEVICE_GONE;
    adsm_shutdown();
    errno = 0;
    if (waitpid(-1, NULL, WNOHANG) != -1 || errno != ECHILD) return 22; /* the device, as a zombie */
    return REAPER_OK;
}

Test(emu_process, subreaper_program_gets_its_device_reaped_at_shutdown, .timeout = 60) {
    int status = status_of_child(subreaper_program, 0);
    cr_assert(WIFEXITED(status), "the program died of signal %d", WTERMSIG(status));
    cr_assert_eq(WEXITSTATUS(status), REAPER_OK,
                 "exit %d (20: prctl failed, 21: adsm did not take the device for its child, 22: a zombie was "
                 "left)",
                 WEXITSTATUS(status));
}

/* A kernel whose name takes 64 characters: its messages must still end whole. */
ADSM_KERNEL(fill_the_boundary_cells_of_every_block_of_the_grid_with_the_value, ADSM_OUT(int, c), ADSM_VALUE(int, v));
void fill_the_boundary_cells_of_every_block_of_the_grid_with_the_value(adsm_grid g, int *c, int v) {
    ADSM_FOR_EACH_THREAD(g, i) { c[i] = v; }
}

/* The device process cannot make a kernel's outputs writable (at vm.max_map_count the kernel
 * refuses the change; here seccomp refuses mprotect to read-write of the object's exact length,
 * installed before adsm_init so the device process inherits it). The kernel does not run, and the
 * sync says why. It used to run anyway, die writing its own output, and be blamed for writing
 * shared memory that is not one of its OUT/INOUT parameters. */
Test(emu_process, outputs_the_device_cannot_make_writable_are_named, .timeout = 30) {
    const size_t size = 7 * 4096; /* a length nothing else protects */
    uintptr_t lengths[] = {size};
    refuse_system_call_at(SYS_mprotect, 2, PROT_READ | PROT_WRITE, 1, lengths, 1, ENOMEM);
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.protocol = ADSM_PROTOCOL_ROLLING;
    cfg.block_size = 4096;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    int *c = adsm_alloc(size);
    cr_assert_not_null(c, "%s", adsm_last_error());
    cr_assert_eq(ADSM_CALL(fill_the_boundary_cells_of_every_block_of_the_grid_with_the_value, adsm_grid_1d(1, 64), c, 5),
                 ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_ERROR_SYSTEM, "%s", adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "could not make its outputs writable") &&
                  strstr(adsm_last_error(), "(sysctl vm.max_map_count)"), "cut short? %s", adsm_last_error());
    adsm_shutdown();
}

/* The device process cannot start its kernel threads (the thread limit, ulimit -u: here seccomp
 * refuses new threads to this process and its children). adsm_init says why; it used to say only
 * that the device process failed to start. */
Test(emu_process, a_device_process_without_threads_says_why, .timeout = 30) {
    refuse_threads();
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_BACKEND_UNAVAILABLE, "%s", adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "could not start its kernel threads") && strstr(adsm_last_error(), "ulimit -u"),
              "%s", adsm_last_error());
}

/* The pipes adsm makes to start the device process find no descriptor free (EMFILE): adsm_init
 * says so without blaming fork, which it used to name. */
Test(emu_process, no_descriptor_for_the_start_pipes_is_not_called_a_fork_failure, .timeout = 30) {
    refuse_system_call(SYS_pipe2, EMFILE);
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_BACKEND_UNAVAILABLE, "%s", adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "starting the device process") && strstr(adsm_last_error(), "Too many open files"),
              "%s", adsm_last_error());
    cr_assert_null(strstr(adsm_last_error(), "fork failed"), "%s", adsm_last_error());
}
