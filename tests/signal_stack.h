/* tests/signal_stack.h -- an alternate signal stack of a given size for the calling thread, with an
 * inaccessible page below it, so that a handler that needs more stack crashes instead of writing
 * over other memory (a stack in .bss or on the heap would hide the overflow).
 *
 * Test context: the thread that will take the faults calls both. */
#ifndef TESTS_SIGNAL_STACK_H
#define TESTS_SIGNAL_STACK_H

#include <criterion/criterion.h>
#include <signal.h>
#include <sys/mman.h>

typedef struct guarded_stack {
    unsigned char *area; /* the guard page, then the stack */
    size_t size;
} guarded_stack;

static inline guarded_stack guarded_stack_on(size_t size) {
    guarded_stack g = {(unsigned char *)mmap(NULL, 4096 + size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
                       size};
    cr_assert_neq(g.area, MAP_FAILED);
    cr_assert_eq(mprotect(g.area, 4096, PROT_NONE), 0);
    stack_t ss = {.ss_sp = g.area + 4096, .ss_flags = 0, .ss_size = size};
    cr_assert_eq(sigaltstack(&ss, NULL), 0);
    return g;
}

static inline void guarded_stack_off(guarded_stack *g) {
    stack_t off = {.ss_sp = NULL, .ss_flags = SS_DISABLE, .ss_size = 0};
    cr_assert_eq(sigaltstack(&off, NULL), 0);
    munmap(g->area, 4096 + g->size);
}

#endif /* TESTS_SIGNAL_STACK_H */
