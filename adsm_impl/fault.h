/* adsm_impl/fault.h -- the fault engine: a SIGSEGV handler that turns CPU accesses to protected
 * shared memory into protocol events, and passes every other fault on.
 *
 * Runs in signal context. It allocates nothing, calls no stdio, and takes only the runtime's
 * futex lock, after checking that the interrupted thread does not hold it already (a fault while
 * the runtime itself holds the lock is reported with write(2) and treated as a real crash).
 * Faults outside shared memory, before initialisation, or on freed shared memory go to the
 * handler installed before adsm, or get the default action, so the program dies as it would
 * have without adsm. */
#ifndef ADSM__FAULT_INCLUDED
#define ADSM__FAULT_INCLUDED

/* Hands the fault to whoever would have had it without adsm. */
ADSM__PRIVATE void adsm__chain(int sig, siginfo_t *si, void *context) {
    const struct sigaction *prev = &adsm__rt.prev_segv;
    if (prev->sa_flags & SA_SIGINFO) {
        if (prev->sa_sigaction) {
            prev->sa_sigaction(sig, si, context);
            return;
        }
    } else if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN) {
        prev->sa_handler(sig);
        return;
    }
    /* Default action: restore it and let the fault happen again (a real fault re-executes the
     * instruction; a raised signal is raised again), so the process dies with SIGSEGV. */
    adsm__default_action(sig);
    if (si->si_code <= 0) raise(sig);
}

/* Resolves a fault at address a; 0 when the access may be retried. When the protocol let the
 * runtime lock go (a copy ran, or this thread waited for another thread's copy), the object is
 * looked up again: it may have been freed meanwhile. */
ADSM__PRIVATE int adsm__resolve_fault(adsm__runtime *rt, uintptr_t a, int is_write) {
    int rc = ADSM__AGAIN, decided = is_write >= 0;
    adsm__lock(&rt->lock);
    while (rc == ADSM__AGAIN) {
        adsm__object *o = adsm__object_of(adsm__tree_find(&rt->objects, a));
        if (!o) {
            rc = -1;
            break;
        }
        size_t block = adsm__tree_block_index(&o->node, a, rt->cfg.block_shift);
        /* a write to a ReadOnly block is a write even where the decoder cannot tell; decided
         * once, so a fetch this fault made does not turn a read into a write */
        if (!decided) is_write = o->blocks[block].state != ADSM__INVALID;
        decided = 1;
        rc = rt->proto->on_access(rt, o, block, is_write, 0);
    }
    adsm__unlock(&rt->lock);
    return rc;
}

static void adsm__segv_handler(int sig, siginfo_t *si, void *context) {
    adsm__runtime *rt = &adsm__rt;
    uintptr_t a = (uintptr_t)si->si_addr;
    int saved_errno = errno;
    if (si->si_code <= 0 || !adsm__ready() || adsm__outside_reservation(rt, a, 1)) {
        adsm__chain(sig, si, context);
        errno = saved_errno;
        return;
    }
    if (adsm__tls_copy_thread) { /* a copy thread of adsm's own: waiting here could never end */
        adsm__write_stderr("adsm: internal error: a copy thread faulted on shared memory that is protected "
                           "(a copy was queued for pages that were then protected); please report this\n");
        adsm__chain(sig, si, context);
        errno = saved_errno;
        return;
    }
    if (adsm__tls_lock_depth > 0) {
        adsm__write_stderr("adsm: fault on shared memory while this thread holds the runtime lock "
                           "(shared memory touched from a signal handler?)\n");
        adsm__chain(sig, si, context);
        errno = saved_errno;
        return;
    }
    int is_write = adsm__fault_is_write(context);
    uint64_t t0 = adsm__now_ns();
    if (adsm__resolve_fault(rt, a, is_write) != 0) {
        adsm__chain(sig, si, context);
        errno = saved_errno;
        return;
    }
    ADSM__ADD(is_write == 0 ? &rt->stats.read_faults : &rt->stats.write_faults, 1);
    ADSM__ADD(&rt->stats.fault_ns, adsm__now_ns() - t0);
    errno = saved_errno;
}

ADSM__PRIVATE adsm_result adsm__fault_install(adsm__runtime *rt) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = adsm__segv_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    adsm__sigaction_fn real = adsm__real_sigaction();
    if (!real) return adsm__fail(ADSM_ERROR_SYSTEM, "cannot find libc's sigaction");
    if (real(SIGSEGV, &sa, &rt->prev_segv) != 0)
        return adsm__fail(ADSM_ERROR_SYSTEM, "cannot install the SIGSEGV handler: %s", strerror(errno));
    ADSM__STORE(&rt->handler_installed, 1);
    return ADSM_OK;
}

/* Puts back the previous handler unless somebody replaced ours in the meantime. */
ADSM__PRIVATE void adsm__fault_uninstall(adsm__runtime *rt) {
    struct sigaction cur;
    if (!rt->handler_installed) return;
    ADSM__STORE(&rt->handler_installed, 0);
    adsm__sigaction_fn real = adsm__real_sigaction();
    if (real(SIGSEGV, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == adsm__segv_handler)
        real(SIGSEGV, &rt->prev_segv, NULL);
}

#ifndef ADSM_NO_INTERPOSE_SIGNALS
/* While adsm's handler is installed, a program (or library) setting a SIGSEGV disposition sets
 * the one adsm passes foreign faults to, and reads it back; adsm's handler stays first, so
 * shared memory keeps working and the program's handler keeps getting every other fault.
 * Define ADSM_NO_INTERPOSE_SIGNALS to leave sigaction/signal alone (then install your SIGSEGV
 * handler before adsm_init). */
static adsm__lock_t adsm__disposition_lock;

int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    adsm__runtime *rt = &adsm__rt;
    if (sig != SIGSEGV || !ADSM__LOAD(&rt->handler_installed)) return adsm__real_sigaction()(sig, act, old);
    adsm__lock(&adsm__disposition_lock);
    struct sigaction prev = rt->prev_segv;
    if (act) rt->prev_segv = *act;
    adsm__unlock(&adsm__disposition_lock);
    if (old) *old = prev;
    return 0;
}

/* glibc's signal() semantics (BSD: SA_RESTART, the signal blocked in its handler), through the
 * sigaction above. */
sighandler_t signal(int sig, sighandler_t handler) {
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, sig);
    sa.sa_flags = SA_RESTART;
    if (sigaction(sig, &sa, &old) != 0) return SIG_ERR;
    return old.sa_handler;
}
#endif

#endif /* ADSM__FAULT_INCLUDED */
