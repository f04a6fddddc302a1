/* tests/death.h -- runs a function that must kill its process with SIGSEGV, and checks what it
 * said on stderr first (adsm explains every fault it cannot resolve before the process dies).
 *
 * Test context: the parent never initialises adsm; the forked child does it all. */
#ifndef TESTS_DEATH_H
#define TESTS_DEATH_H

#include <criterion/criterion.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs fn in a forked child and asserts that it dies of SIGSEGV having written `expected` on
 * stderr (a child that returns exits 0, which fails the assertion). */
static inline void expect_death_message(void (*fn)(void), const char *expected) {
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        fn();
        _exit(0);
    }
    close(fds[1]);
    char text[2048] = {0};
    size_t used = 0;
    ssize_t n;
    while (used < sizeof text - 1 && (n = read(fds[0], text + used, sizeof text - 1 - used)) > 0) used += (size_t)n;
    close(fds[0]);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "child status %d, stderr [%s]", status, text);
    cr_assert(strstr(text, expected) != NULL, "stderr [%s] does not say [%s]", text, expected);
}

#endif /* TESTS_DEATH_H */
