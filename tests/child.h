/* tests/child.h -- runs a function in a forked child and collects what it wrote to a pipe: for
 * tests whose subject ends the process (a death, a limit set for one process) or must not share
 * this process's state (the driver double started once per process).
 *
 * Test context: the parent does not initialise adsm before calling it; the child does. */
#ifndef TESTS_CHILD_H
#define TESTS_CHILD_H

#include <criterion/criterion.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs fn(fd) in a forked child (fd: the pipe's write end; the child exits 0 if fn returns),
 * reads all it wrote into said (NUL-terminated, at most cap - 1 bytes), and returns its wait
 * status. */
static inline int run_child(void (*fn)(int fd), char *said, size_t cap) {
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        close(fds[0]);
        fn(fds[1]);
        _exit(0);
    }
    close(fds[1]);
    memset(said, 0, cap);
    size_t used = 0;
    ssize_t n;
    while (used < cap - 1 && (n = read(fds[0], said + used, cap - 1 - used)) > 0) used += (size_t)n;
    close(fds[0]);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    return status;
}

#endif /* TESTS_CHILD_H */
