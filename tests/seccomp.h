/* tests/seccomp.h -- makes this process a place where one system call is refused, as container
 * seccomp profiles and gVisor refuse some: the call fails with the given errno and does nothing.
 *
 * Test context: call it at the start of a test, before adsm_init. The filter holds for the rest of
 * the process and its children; each Criterion test runs in its own process, so it ends with the
 * test. */
#ifndef TESTS_SECCOMP_H
#define TESTS_SECCOMP_H

#include <criterion/criterion.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

static inline void refuse_system_call(long nr, int error) {
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((unsigned)error & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
    cr_assert_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0, "prctl: %s", strerror(errno));
    cr_assert_eq(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0, "seccomp: %s", strerror(errno));
}

/* ... only where its argument `arg` (its low 32 bits) is `value`: mprotect to PROT_READ alone, as
 * the kernel refuses a change that needs a new mapping at vm.max_map_count. Only this thread (and
 * those it starts) is filtered. */
static inline void refuse_system_call_with(long nr, unsigned arg, unsigned value, int error) {
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (unsigned)(offsetof(struct seccomp_data, args) + arg * sizeof(uint64_t))),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, value, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((unsigned)error & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
    cr_assert_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0, "prctl: %s", strerror(errno));
    cr_assert_eq(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0, "seccomp: %s", strerror(errno));
}

/* ... only where its argument `arg` is `value` and its argument `at_arg` (its low 32 bits: an
 * address, a length) is one of the n in `at`: mprotect of a few ranges only. */
static inline void refuse_system_call_at(long nr, unsigned arg, unsigned value, unsigned at_arg, const uintptr_t *at,
                                         unsigned n, int error) {
    enum { MAX_AT = 16 };
    cr_assert(n >= 1 && n <= MAX_AT, "refuse_system_call_at: 1 to %d addresses", MAX_AT);
    struct sock_filter code[6 + MAX_AT + 2];
    unsigned k = 0;
    code[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
    code[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, (unsigned char)(n + 3));
    code[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                             (unsigned)(offsetof(struct seccomp_data, args) + arg * sizeof(uint64_t)));
    code[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, value, 0, (unsigned char)(n + 1));
    code[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                             (unsigned)(offsetof(struct seccomp_data, args) + at_arg * sizeof(uint64_t)));
    for (unsigned i = 0; i < n; i++) /* a match jumps to the refusal, past the remaining tests and the allow */
        code[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)at[i], (unsigned char)(n - i), 0);
    code[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    code[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((unsigned)error & SECCOMP_RET_DATA));
    struct sock_fprog prog = {.len = (unsigned short)k, .filter = code};
    cr_assert_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0, "prctl: %s", strerror(errno));
    cr_assert_eq(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0, "seccomp: %s", strerror(errno));
}

/* No new thread for this process and those it forks from now on (as at the thread limit,
 * ulimit -u): clone with CLONE_THREAD fails with EAGAIN; clone3, whose flags seccomp cannot read,
 * with ENOSYS, so glibc falls back to clone. Processes may still fork. */
static inline void refuse_threads(void) {
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)SYS_clone3, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)SYS_clone, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args)),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAGAIN),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
    cr_assert_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0, "prctl: %s", strerror(errno));
    cr_assert_eq(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0, "seccomp: %s", strerror(errno));
}

#endif /* TESTS_SECCOMP_H */
