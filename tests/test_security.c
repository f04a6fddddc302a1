/* tests/test_security.c -- what adsm exposes to other processes: shared and device memory live in
 * private anonymous mappings and an unnamed memfd (no file anyone could open by path), the
 * emulated device listens on an unnamed socket pair that only the parent holds and that no
 * exec'd program inherits, and every environment value is parsed with bounds (huge or junk
 * values are refused with a message, never overflow or crash). Emu backend; each Test is its own
 * process. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static void init_emu(void) {
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.emu_memory = (size_t)256 << 20;
    cfg.emu_workers = 2;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
}

/* Marks in `open` (indexed by descriptor, up to 1024) the descriptors open now. */
static void open_descriptors(unsigned char open[1024]) {
    memset(open, 0, 1024);
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] != '.' && fd >= 0 && fd < 1024 && fd != dirfd(d)) open[fd] = 1;
    }
    closedir(d);
}

/* Every mapping inside adsm's reservation is anonymous and private, or the device memfd. */
Test(security, memory_is_private_or_an_unnamed_memfd) {
    unsigned char before[1024], after[1024];
    open_descriptors(before);
    init_emu();
    char *p = adsm_alloc((size_t)4 << 20);
    memset(p, 7, (size_t)4 << 20);
    uintptr_t lo = adsm__rt.base, hi = adsm__rt.base + 2 * adsm__rt.half;
    FILE *maps = fopen("/proc/self/maps", "r");
    cr_assert_not_null(maps);
    char line[512];
    int inside = 0;
    while (fgets(line, sizeof line, maps)) {
        unsigned long start, end;
        char perms[8] = "", path[256] = "";
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %255[^\n]", &start, &end, perms, path) < 3) continue;
        if (end <= lo || start >= hi) continue;
        inside++;
        cr_assert_eq(perms[3], 'p', "a shared mapping inside the reservation: %s", line);
        cr_assert_eq(path[0], 0, "a file-backed mapping inside the reservation: %s", line);
    }
    fclose(maps);
    cr_assert_gt(inside, 0);
    /* the device memory: a memfd, reachable by no path */
    adsm__emu *e = (adsm__emu *)adsm__rt.be_ctx;
    char link[64], target[256] = "";
    snprintf(link, sizeof link, "/proc/self/fd/%d", e->devfd.fd);
    cr_assert_gt(readlink(link, target, sizeof target - 1), 0);
    cr_assert(strncmp(target, "/memfd:", 7) == 0, "device memory is %s", target);
    /* every descriptor adsm opened is the memfd, its socket, /proc/self/mem or the device process's
     * pidfd (backend_emu.h: it is no child of the program): no file by path */
    open_descriptors(after);
    for (int fd = 0; fd < 1024; fd++) {
        if (!after[fd] || before[fd]) continue;
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, target, sizeof target - 1);
        cr_assert_gt(n, 0);
        target[n] = 0;
        int ok = strncmp(target, "/memfd:", 7) == 0 || strncmp(target, "socket:", 7) == 0 ||
                 strcmp(target, "anon_inode:[pidfd]") == 0 ||
                 (strncmp(target, "/proc/", 6) == 0 && strstr(target, "/mem") != NULL);
        cr_assert(ok, "adsm opened %s (descriptor %d)", target, fd);
    }
    adsm_shutdown();
}

/* The device's command socket has no name (nobody can connect to it): an unnamed pair made
 * before the device process was forked. */
Test(security, device_socket_is_unnamed_and_private) {
    init_emu();
    adsm__emu *e = (adsm__emu *)adsm__rt.be_ctx;
    struct sockaddr_un addr;
    socklen_t len = sizeof addr;
    memset(&addr, 0, sizeof addr);
    cr_assert_eq(getsockname(e->sock.fd, (struct sockaddr *)&addr, &len), 0);
    cr_assert_eq(addr.sun_family, AF_UNIX);
    cr_assert(len <= offsetof(struct sockaddr_un, sun_path), "the socket has a name (%u bytes)", (unsigned)len);
    struct ucred peer;
    socklen_t plen = sizeof peer;
    cr_assert_eq(getsockopt(e->sock.fd, SOL_SOCKET, SO_PEERCRED, &peer, &plen), 0);
    /* a socket pair: both ends were made by this process before the fork, none came from
     * outside (connect() needs a name, and there is none) */
    cr_assert_eq(peer.pid, getpid(), "the socket's other end was made by this process");
    cr_assert_eq(peer.uid, getuid());
    struct sockaddr_un other;
    socklen_t olen = sizeof other;
    cr_assert_eq(getpeername(e->sock.fd, (struct sockaddr *)&other, &olen), 0);
    cr_assert(olen <= offsetof(struct sockaddr_un, sun_path), "the other end has a name");
    adsm_shutdown();
}

/* A program the application execs inherits none of adsm's descriptors. */
Test(security, exec_inherits_no_adsm_descriptor) {
    init_emu();
    int pipefd[2];
    cr_assert_eq(pipe(pipefd), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 1);
        execl("/bin/sh", "sh", "-c", "for f in /proc/self/fd/*; do readlink $f; done", (char *)NULL);
        _exit(127);
    }
    close(pipefd[1]);
    char out[8192];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof out - 1 && (r = read(pipefd[0], out + n, sizeof out - 1 - n)) > 0) n += (size_t)r;
    out[n] = 0;
    close(pipefd[0]);
    int status;
    waitpid(pid, &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cr_assert(strstr(out, "memfd:adsm") == NULL, "device memory leaked into an exec'd program:\n%s", out);
    cr_assert(strstr(out, "/mem\n") == NULL, "/proc/self/mem leaked:\n%s", out);
    /* the only socket-like thing the shell may see is none: adsm's socket is close-on-exec */
    cr_assert(strstr(out, "socket:") == NULL, "a socket leaked into an exec'd program:\n%s", out);
    adsm_shutdown();
}

/* Values far outside any sensible range, or of absurd length, are refused with a message. */
Test(security, environment_values_are_bounded) {
    static const char *const size_vars[] = {"ADSM_BLOCK_SIZE", "ADSM_ROLLING_SIZE", "ADSM_ROLLING_STEP",
                                            "ADSM_EMU_MEMORY", "ADSM_EMU_WORKERS", "ADSM_CUDA_STAGING",
                                            "ADSM_DEVICE", "ADSM_DEVICES"};
    static const char *const bad_values[] = {"99999999999999999999999999", "18446744073709551616", "16E",
                                             "-1", "0x10", "4K4", "1TiBB", " 4096"};
    for (size_t v = 0; v < sizeof size_vars / sizeof *size_vars; v++) {
        for (size_t b = 0; b < sizeof bad_values / sizeof *bad_values; b++) {
            setenv(size_vars[v], bad_values[b], 1);
            adsm_result r = adsm_init(NULL);
            cr_assert_eq(r, ADSM_ERROR_INVALID_CONFIG, "%s='%s' gave %d", size_vars[v], bad_values[b], r);
            cr_assert(strstr(adsm_last_error(), size_vars[v]) != NULL, "%s", adsm_last_error());
            unsetenv(size_vars[v]);
        }
    }
    size_t big = (size_t)1 << 20; /* a 1 MiB value */
    char *huge = malloc(big + 1);
    memset(huge, '7', big);
    huge[big] = 0;
    static const char *const all_vars[] = {"ADSM_BACKEND", "ADSM_PROTOCOL", "ADSM_LOG", "ADSM_BLOCK_SIZE",
                                           "ADSM_CUDA_DRIVER", "ADSM_NVRTC_LIBRARY", "ADSM_CUDA_SAME_ADDRESS",
                                           "ADSM_CUDA_DMA_VIEW"};
    for (size_t v = 0; v < sizeof all_vars / sizeof *all_vars; v++) {
        setenv(all_vars[v], huge, 1);
        cr_assert_eq(adsm_init(NULL), ADSM_ERROR_INVALID_CONFIG, "%s of 1 MiB", all_vars[v]);
        cr_assert_lt(strlen(adsm_last_error()), 512, "the message is bounded");
        unsetenv(all_vars[v]);
    }
    free(huge);
    init_emu(); /* and nothing stuck */
    adsm_shutdown();
}
