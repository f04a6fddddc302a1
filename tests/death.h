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

#include "tests/child.h"

/* The function the child runs, its stderr sent to the pipe. */
static void (*death_fn)(void);
static inline void death_child(int fd) {
    dup2(fd, STDERR_FILENO);
    death_fn();
}

/* Runs fn in a forked child and asserts that it dies of SIGSEGV having written `expected` on
 * stderr (a child that returns exits 0, which fails the assertion). */
static inline void expect_death_message(void (*fn)(void), const char *expected) {
    char text[2048];
    death_fn = fn;
    int status = run_child(death_child, text, sizeof text);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "child status %d, stderr [%s]", status, text);
    cr_assert(strstr(text, expected) != NULL, "stderr [%s] does not say [%s]", text, expected);
}

#endif /* TESTS_DEATH_H */
