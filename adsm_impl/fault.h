/* adsm_impl/fault.h -- the fault engine: a SIGSEGV handler (and, with the userfaultfd engine of
 * protection.h, a SIGBUS handler for writes to write-protected pages) that turns CPU accesses to
 * protected shared memory into protocol events, and passes every other fault on.
 *
 * Runs in signal context. It allocates nothing, calls no stdio, and takes only the runtime's
 * futex lock, after checking that the interrupted thread does not hold it already (a fault while
 * the runtime itself holds the lock is reported with write(2) and treated as a real crash).
 * Faults outside shared memory, before initialisation, or on freed shared memory go to the
 * program's own disposition (set before adsm_init, or recorded by the sigaction below), applied
 * as the kernel would have (its sa_mask, SA_NODEFER, SA_RESETHAND, SIG_IGN), or get the default
 * action, so the program dies as it would have without adsm; in a forked child, a fault on
 * shared memory is explained first. */
#ifndef ADSM__FAULT_INCLUDED
#define ADSM__FAULT_INCLUDED

#include "common.h"
#include "os.h"
#include "blocktree.h"
#include "object.h"
#include "protection.h"
#include "trace.h"
#include "runtime.h"
#include "reservation.h"
#include "protocol_vtbl.h"
#include "directory.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

/* The disposition adsm passes the foreign faults of signal `sig` to. */
ADSM__PRIVATE struct sigaction *adsm__prev_handler(int sig) {
    return sig == SIGBUS ? &adsm__rt.prev_bus : &adsm__rt.prev_segv;
}

/* A fault about to get the default action: the process dies of it. Does nothing; it is where a
 * debugger stops for real crashes once it lets adsm's own faults through (gdb: `handle SIGSEGV
 * nostop noprint pass` and `break adsm__fault_unresolved`; the backtrace goes on below the
 * signal handler's frame to the faulting line). Out of line, and kept by the empty asm. */
__attribute__((noinline)) static void adsm__fault_unresolved(int sig, uintptr_t addr) {
    (void)sig;
    (void)addr;
    __asm__ volatile("" ::: "memory");
}

/* The thread's signal mask while the program's handler runs, as the kernel would have set it on
 * delivering the signal to that handler: the mask of the interrupted code, plus the handler's
 * sa_mask, plus the signal itself unless SA_NODEFER. (adsm's own handler runs with nothing added:
 * SA_NODEFER, adsm__fault_install.) Set with the system call: libc's and adsm's sigprocmask both
 * filter. */
ADSM__PRIVATE void adsm__mask_as_kernel_would(int sig, const struct sigaction *act, const void *context) {
    sigset_t set;
    sigemptyset(&set);
    if (context) set = ((const ucontext_t *)context)->uc_sigmask;
    else (void)syscall(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &set, (size_t)(_NSIG / 8));
    for (int s = 1; s < _NSIG; s++)
        if (sigismember(&act->sa_mask, s) == 1) sigaddset(&set, s);
    if (!(act->sa_flags & SA_NODEFER)) sigaddset(&set, sig);
    else if (sigismember(&act->sa_mask, sig) != 1) sigdelset(&set, sig);
    (void)syscall(SYS_rt_sigprocmask, SIG_SETMASK, &set, NULL, (size_t)(_NSIG / 8));
}

/* Hands the fault to whoever would have had it without adsm, with the program's disposition in
 * full: its handler (SA_SIGINFO or not) with the mask the kernel would have given it (sa_mask,
 * SA_NODEFER), SA_RESETHAND (the disposition goes back to SIG_DFL as the handler is entered, so
 * a handler that returns from a real fault sees the fault again and the process dies of it, as
 * it would have), SIG_IGN (a signal someone sent is ignored; a real fault kills, as the kernel
 * does for an ignored fault), SIG_DFL. Signal context: no lock (the disposition adsm__sigaction
 * records is read field by field; SA_RESETHAND's reset is one atomic exchange, so of two threads
 * faulting at once only one gets the handler, as with the kernel's). */
ADSM__PRIVATE void adsm__chain(int sig, siginfo_t *si, void *context) {
    struct sigaction *prev = adsm__prev_handler(sig), act;
    memset(&act, 0, sizeof act);
    act.sa_flags = __atomic_load_n(&prev->sa_flags, __ATOMIC_ACQUIRE);
    act.sa_mask = prev->sa_mask;
    /* sa_handler and sa_sigaction share their storage */
    void (*handler)(int) = __atomic_load_n(&prev->sa_handler, __ATOMIC_ACQUIRE);
    if (act.sa_flags & SA_RESETHAND) /* as the handler is entered */
        while (handler != SIG_DFL && handler != SIG_IGN &&
               !__atomic_compare_exchange_n(&prev->sa_handler, &handler, SIG_DFL, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE)) {
        }
    if (handler == SIG_IGN && si->si_code <= 0) return; /* sent (kill, raise): ignored */
    if (handler != SIG_DFL && handler != SIG_IGN) {
        adsm__mask_as_kernel_would(sig, &act, context);
        if (act.sa_flags & SA_SIGINFO) /* void (*)(void): the cast every function type allows */
            ((void (*)(int, siginfo_t *, void *))(void (*)(void))handler)(sig, si, context);
        else
            handler(sig);
        return; /* the kernel puts the interrupted code's mask back (sigreturn) */
    }
    /* Default action: restore it and let the fault happen again (a real fault re-executes the
     * instruction; a raised signal is raised again), so the process dies of the signal. */
    adsm__fault_unresolved(sig, (uintptr_t)si->si_addr);
    adsm__default_action(sig);
    if (si->si_code <= 0) raise(sig);
}

/* Why a fault in adsm's range could not be resolved (FORKED: in a forked child, adsm__forked). */
enum {
    ADSM__FAULT_SYSTEM = -1,
    ADSM__FAULT_NO_OBJECT = -2,
    ADSM__FAULT_DEVICE_BUFFER = -3,
    ADSM__FAULT_FORKED = -4,
    ADSM__FAULT_OWN_COPY = ADSM__OWN_COPY, /* -5: a signal handler touched a unit this thread is copying */
    ADSM__FAULT_STOPPING = -6              /* adsm_shutdown (or adsm_init) runs in another thread */
};

/* What a fault that adsm could not resolve was about, for the message before the process dies. */
typedef struct adsm__fault_info {
    uintptr_t object; /* the object's start (0: none found) */
    size_t size;
    unsigned dev;     /* the device its data was to come from */
    int dev_lost;     /* that device was found lost */
    int err;          /* errno after the protocol's attempt */
} adsm__fault_info;

/* Notes which object and device a failed fault concerned. Signal-safe. */
ADSM__PRIVATE void adsm__note_fault(const adsm__runtime *rt, const adsm__object *o, size_t block,
                                    adsm__fault_info *info) {
    size_t head = rt->proto->whole_object ? 0 : block;
    info->object = o->host;
    info->size = o->size;
    info->dev = adsm__dev_source(rt, &o->blocks[head]);
    info->dev_lost = rt->ndev > 1 && (adsm__lost_devices(rt) & adsm__dev_bit(info->dev)) != 0;
}

/* Resolves a fault at address a; 0 when the access may be retried, else one of the reasons
 * above. When the protocol let the runtime lock go (a copy ran, or this thread waited for
 * another thread's copy), the object is looked up again: it may have been freed meanwhile. If
 * its unit now allows the access, the state change that made it so (this fault's own, after its
 * fetch, or another thread's) set the protection too: nothing is left to change. */
ADSM__PRIVATE int adsm__resolve_fault(adsm__runtime *rt, uintptr_t a, int is_write, adsm__fault_info *info) {
    int rc = ADSM__AGAIN, decided = is_write >= 0, again = 0;
    adsm__lock(&rt->lock);
    for (; rc == ADSM__AGAIN; again = 1) {
        adsm__object *o = adsm__object_of(adsm__tree_find(&rt->objects, a));
        if (!o) {
            rc = adsm__tree_find(&rt->safe_dev, adsm__dev_in(rt, a)) ? ADSM__FAULT_DEVICE_BUFFER
                                                                    : ADSM__FAULT_NO_OBJECT;
            break;
        }
        size_t block = adsm__tree_block_index(&o->node, a, rt->cfg.block_shift);
        /* a write to a ReadOnly block is a write even where the decoder cannot tell; decided
         * once, so a fetch this fault made does not turn a read into a write */
        if (!decided) is_write = o->blocks[block].state != ADSM__INVALID;
        decided = 1;
        if (again && adsm__state_allows(o->blocks[block].state, is_write)) {
            rc = 0;
            break;
        }
        rc = rt->proto->on_access(rt, o, block, is_write, 0);
        info->err = errno;
        if (rc < 0) adsm__note_fault(rt, o, block, info);
    }
    adsm__unlock(&rt->lock);
    return rc < 0 && rc != ADSM__FAULT_NO_OBJECT && rc != ADSM__FAULT_DEVICE_BUFFER && rc != ADSM__FAULT_OWN_COPY
               ? ADSM__FAULT_SYSTEM
               : rc;
}

ADSM__PRIVATE int adsm__program_handles(int sig) {
    const struct sigaction *prev = adsm__prev_handler(sig);
    return (prev->sa_flags & SA_SIGINFO) ? prev->sa_sigaction != NULL
                                         : prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN;
}

/* Says on stderr why a fault in adsm's range kills the process, before it dies. A mistake of the
 * program's (no live object there, a device buffer) is left to its own SIGSEGV handler when it has
 * one. info may be NULL for a forked child's fault. */
ADSM__PRIVATE void adsm__explain_fault(int sig, uintptr_t a, int reason, const adsm__fault_info *info) {
    char msg[512];
    if ((reason == ADSM__FAULT_NO_OBJECT || reason == ADSM__FAULT_DEVICE_BUFFER || reason == ADSM__FAULT_STOPPING) &&
        adsm__program_handles(sig))
        return;
    msg[0] = 0;
    adsm__append(msg, sizeof msg, sig == SIGBUS ? "adsm: bus error (a write to write-protected memory) at "
                                                : "adsm: segmentation fault at ");
    adsm__append_hex(msg, sizeof msg, a);
    if (reason == ADSM__FAULT_NO_OBJECT)
        adsm__append(msg, sizeof msg, ": shared memory that no live object holds (used after adsm_free, or "
                                      "past the end of an object?)\n");
    else if (reason == ADSM__FAULT_DEVICE_BUFFER)
        adsm__append(msg, sizeof msg, ": a device buffer from adsm_dev_alloc, which the CPU cannot touch "
                                      "(copy it with adsm_copy_from_device)\n");
    else if (reason == ADSM__FAULT_STOPPING)
        adsm__append(msg, sizeof msg, ": shared memory touched while adsm_shutdown (or adsm_init) runs in "
                                      "another thread: its objects are going, as after adsm_free\n");
    else if (reason == ADSM__FAULT_FORKED) {
        adsm__append(msg, sizeof msg, " (shared memory) in process ");
        adsm__append_dec(msg, sizeof msg, (size_t)getpid());
        adsm__append(msg, sizeof msg, ": " ADSM__FORKED_TEXT "\n");
    } else if (reason == ADSM__FAULT_OWN_COPY) {
        adsm__append(msg, sizeof msg, ", in the object at ");
        adsm__append_hex(msg, sizeof msg, info->object);
        adsm__append(msg, sizeof msg, ": a signal handler touched shared memory that this same thread was "
                                      "bringing to the CPU (a copy or first use it was in when the signal "
                                      "came); that copy cannot end before the handler returns, so neither "
                                      "can go on. Do not touch adsm objects in signal handlers\n");
    } else if (adsm__page_unmapped(a, adsm__rt.page))
        adsm__append(msg, sizeof msg, ": the program unmapped this shared memory (munmap, or a MAP_FIXED "
                                      "mapping over it), so adsm cannot bring its data there; give objects back "
                                      "with adsm_free only\n");
    else if (info->err == ENOMEM)
        adsm__append(msg, sizeof msg, ": adsm could not change the page protection (ENOMEM): " ADSM__MAP_LIMIT_HINT "\n");
    else if (info->dev_lost) {
        adsm__append(msg, sizeof msg, ", in the object at ");
        adsm__append_hex(msg, sizeof msg, info->object);
        adsm__append(msg, sizeof msg, " (");
        adsm__append_dec(msg, sizeof msg, info->size);
        adsm__append(msg, sizeof msg, " bytes): its only current copy is on device ");
        adsm__append_dec(msg, sizeof msg, info->dev);
        adsm__append(msg, sizeof msg, ", which is lost, so the CPU cannot read it (adsm_sync said why the "
                                      "device was lost)\n");
    } else
        adsm__append(msg, sizeof msg, ": adsm could not bring the data to the CPU (a copy from the device or "
                                      "a protection change failed; is the device lost?)\n");
    adsm__write_stderr(msg);
}

/* This thread's last fault resolved as a read: where, and the last launch then. */
static __thread uintptr_t adsm__tls_read_fault_at;
static __thread uint64_t adsm__tls_read_fault_seq;

/* What the decoder said, unless it lied: a read fault again at the address of this thread's last
 * read fault, with no kernel call between, found the page readable already, so the access was a
 * write the decoder called a read (gVisor's ptrace platform leaves the x86 error code at 0).
 * Taken as undecided (-1): a write where the block is readable, so the thread cannot fault there
 * for ever. Another thread's fetch racing with a read does not repeat on the same thread. */
ADSM__PRIVATE int adsm__checked_is_write(const adsm__runtime *rt, uintptr_t a, int is_write) {
    if (is_write != 0 || a != adsm__tls_read_fault_at) return is_write;
    return adsm__tls_read_fault_seq == ADSM__LOAD(&rt->launch_seq) ? -1 : 0;
}

ADSM__PRIVATE void adsm__remember_read_fault(const adsm__runtime *rt, uintptr_t a, int is_write) {
    adsm__tls_read_fault_at = is_write == 0 ? a : 0;
    adsm__tls_read_fault_seq = ADSM__LOAD(&rt->launch_seq);
}

/* A fault in adsm's range, with a use of the runtime held (shutdown waits for it): 0 when the
 * access may be retried, -1 when the fault is passed on. is_write: 1, 0, or -1 (unknown). */
ADSM__PRIVATE int adsm__handle_shared_fault(adsm__runtime *rt, int sig, uintptr_t a, int is_write) {
    if (!adsm__ready()) { /* shut down meanwhile: its objects are going */
        adsm__explain_fault(sig, a, ADSM__FAULT_STOPPING, NULL);
        return -1;
    }
    if (adsm__tls_copy_thread) { /* a copy thread of adsm's own: waiting here could never end */
        adsm__write_stderr("adsm: internal error: a copy thread faulted on shared memory that is protected "
                           "(a copy was queued for pages that were then protected); please report this\n");
        return -1;
    }
    if (adsm__tls_lock_depth > 0) {
        adsm__write_stderr("adsm: fault on shared memory while this thread holds the runtime lock "
                           "(shared memory touched from a signal handler?)\n");
        return -1;
    }
    adsm__fault_info info = {0, 0, 0, 0, 0};
    uint64_t t0 = adsm__now_ns();
    is_write = adsm__checked_is_write(rt, a, is_write);
    adsm__remember_read_fault(rt, a, is_write);
    int rc = adsm__resolve_fault(rt, a, is_write, &info);
    if (rc != 0) {
        adsm__explain_fault(sig, a, rc, &info);
        return -1;
    }
    ADSM__ADD(is_write == 0 ? &rt->stats.read_faults : &rt->stats.write_faults, 1);
    ADSM__ADD(&rt->stats.fault_ns, adsm__now_ns() - t0);
    adsm__trace(&rt->trace, is_write == 0 ? ADSM__TR_FAULT_READ : ADSM__TR_FAULT_WRITE, t0, a, 0);
    return 0;
}

/* Both signals: SIGSEGV for protection faults (the decoder says whether the access wrote), and,
 * with the userfaultfd engine, SIGBUS for a write to a write-protected ReadOnly page. */
static void adsm__fault_handler(int sig, siginfo_t *si, void *context) {
    adsm__runtime *rt = &adsm__rt;
    uintptr_t a = (uintptr_t)si->si_addr;
    int saved_errno = errno, rc = -1;
    /* a write-protection fault is BUS_ADRERR; other bus errors (a memory failure) are not ours */
    if (si->si_code > 0 && adsm__ready() && !adsm__outside_reservation(rt, a, 1) &&
        (sig == SIGSEGV || (si->si_code == BUS_ADRERR && adsm__protection_uses_uffd(&rt->protection)))) {
        adsm__use_begin();
        int is_write = sig == SIGBUS ? 1 : rt->decode_as_read ? 0 : adsm__fault_is_write(context);
        rc = adsm__handle_shared_fault(rt, sig, a, is_write);
        adsm__use_end();
    } else if (si->si_code > 0 && adsm__in_forked_child() && !adsm__outside_reservation(rt, a, 1)) {
        adsm__explain_fault(sig, a, ADSM__FAULT_FORKED, NULL); /* adsm__forked, lifecycle.h */
    } else if (si->si_code > 0 && sig == SIGSEGV && !adsm__outside_reservation(rt, a, 1)) {
        /* this handler still installed, the runtime not ready: adsm_shutdown or adsm_init runs */
        adsm__explain_fault(sig, a, ADSM__FAULT_STOPPING, NULL);
    } else if (si->si_code > 0 && sig == SIGSEGV && adsm__ready() && adsm__freed_outside(rt, a)) {
        adsm__explain_fault(sig, a, ADSM__FAULT_NO_OBJECT, NULL); /* a um or hmm object, given back */
    }
    if (rc != 0) adsm__chain(sig, si, context);
    errno = saved_errno;
}

/* Installs the handler for SIGSEGV, and for SIGBUS when the userfaultfd engine runs. */
ADSM__PRIVATE adsm_result adsm__fault_install(adsm__runtime *rt) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = adsm__fault_handler;
    /* SA_NODEFER: a fault inside this handler (a signal handler of the program's, run while adsm
     * waits for a copy, touching shared memory) comes here too and is explained; blocked, the
     * kernel would kill the process without a word */
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    adsm__sigaction_fn real = adsm__real_sigaction();
    if (!real) return adsm__fail(ADSM_ERROR_UNSUPPORTED, "%s", ADSM__NO_DLSYM_TEXT);
#ifndef ADSM_NO_INTERPOSE_SIGNALS
    (void)adsm__real_sigmask(0); /* cached now, for a first call from a signal handler */
    (void)adsm__real_sigmask(1);
#endif
    if (real(SIGSEGV, &sa, &rt->prev_segv) != 0)
        return adsm__fail(ADSM_ERROR_SYSTEM, "cannot install the SIGSEGV handler: %s", strerror(errno));
    ADSM__STORE(&rt->handler_installed, 1);
    if (!adsm__protection_uses_uffd(&rt->protection)) return ADSM_OK;
    if (real(SIGBUS, &sa, &rt->prev_bus) != 0)
        return adsm__fail(ADSM_ERROR_SYSTEM, "cannot install the SIGBUS handler: %s", strerror(errno));
    ADSM__STORE(&rt->bus_installed, 1);
    return ADSM_OK;
}

ADSM__PRIVATE int adsm__is_our_handler(const struct sigaction *sa) {
    return (sa->sa_flags & SA_SIGINFO) && sa->sa_sigaction == adsm__fault_handler;
}

/* Puts back the previous handlers unless somebody replaced ours in the meantime. */
ADSM__PRIVATE void adsm__fault_uninstall(adsm__runtime *rt) {
    struct sigaction cur;
    adsm__sigaction_fn real = adsm__real_sigaction();
    if (rt->bus_installed) {
        ADSM__STORE(&rt->bus_installed, 0);
        if (real(SIGBUS, NULL, &cur) == 0 && adsm__is_our_handler(&cur)) real(SIGBUS, &rt->prev_bus, NULL);
    }
    if (!rt->handler_installed) return;
    ADSM__STORE(&rt->handler_installed, 0);
    if (real(SIGSEGV, NULL, &cur) == 0 && adsm__is_our_handler(&cur)) real(SIGSEGV, &rt->prev_segv, NULL);
}

#ifndef ADSM_NO_INTERPOSE_SIGNALS
/* While adsm's handler is installed, a program (or library) setting a SIGSEGV disposition (or
 * SIGBUS, with the userfaultfd engine) sets the one adsm passes foreign faults to, and reads it
 * back; adsm's handler stays first, so shared memory keeps working and the program's handler
 * keeps getting every other fault.
 * Define ADSM_NO_INTERPOSE_SIGNALS to leave sigaction/signal alone (then install your SIGSEGV
 * handler before adsm_init). */
static adsm__lock_t adsm__disposition_lock;

/* Blocking SIGSEGV cannot work with adsm: the kernel delivers a fault's SIGSEGV anyway, with the
 * default action, so a thread that blocked it (thread pools often block every signal) would die
 * with no message on its first touch of shared memory; the same holds for the SIGBUS of the
 * userfaultfd engine. adsm keeps both deliverable: masks set through these calls, and the masks
 * of other signals' handlers, never contain SIGSEGV or SIGBUS. */
ADSM__PRIVATE const sigset_t *adsm__without_faults(const sigset_t *set, sigset_t *copy) {
    if (!set || (sigismember(set, SIGSEGV) != 1 && sigismember(set, SIGBUS) != 1)) return set;
    *copy = *set;
    sigdelset(copy, SIGSEGV);
    sigdelset(copy, SIGBUS);
    return copy;
}

/* Whether adsm's handler holds signal `sig` now (a disposition set for it is recorded instead). */
ADSM__PRIVATE int adsm__handler_holds(const adsm__runtime *rt, int sig) {
    if (sig == SIGSEGV) return ADSM__LOAD(&rt->handler_installed);
    return sig == SIGBUS && ADSM__LOAD(&rt->bus_installed);
}

ADSM__PRIVATE int adsm__set_mask(int which, int how, const sigset_t *set, sigset_t *old) {
    sigset_t copy;
    if (how != SIG_UNBLOCK) set = adsm__without_faults(set, &copy);
    adsm__sigmask_fn real = adsm__real_sigmask(which);
    if (real) return real(how, set, old);
    int rc = (int)syscall(SYS_rt_sigprocmask, how, set, old, (size_t)(_NSIG / 8)); /* no libc symbol found */
    return which == 0 && rc != 0 ? errno : rc;
}

int pthread_sigmask(int how, const sigset_t *set, sigset_t *old) ADSM__NOEXCEPT { return adsm__set_mask(0, how, set, old); }

int sigprocmask(int how, const sigset_t *set, sigset_t *old) ADSM__NOEXCEPT { return adsm__set_mask(1, how, set, old); }

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
/* ... nor the mask a thread starts with (glibc 2.32: the thread-pool habit that leaves the
 * creator's own mask alone): glibc applies it itself, past the calls above, so the thread died on
 * its first touch of shared memory without a word. (A fully static program, which adsm refuses to
 * run with these interposed, gets ENOSYS: dlsym finds nothing there.) */
typedef int (*adsm__attr_sigmask_fn)(pthread_attr_t *, const sigset_t *);
static adsm__attr_sigmask_fn adsm__real_attr_sigmask_fn;

int pthread_attr_setsigmask_np(pthread_attr_t *attr, const sigset_t *sigmask) { /* glibc: no __THROW */
    adsm__attr_sigmask_fn real = __atomic_load_n(&adsm__real_attr_sigmask_fn, __ATOMIC_ACQUIRE);
    if (!real) {
        *(void **)&real = dlsym(RTLD_NEXT, "pthread_attr_setsigmask_np");
        __atomic_store_n(&adsm__real_attr_sigmask_fn, real, __ATOMIC_RELEASE);
    }
    sigset_t copy;
    return real ? real(attr, adsm__without_faults(sigmask, &copy)) : ENOSYS;
}
#endif

int sigaction(int sig, const struct sigaction *act, struct sigaction *old) ADSM__NOEXCEPT {
    adsm__runtime *rt = &adsm__rt;
    if (!adsm__handler_holds(rt, sig)) {
        struct sigaction copy;
        if (act) { /* its handler may touch shared memory */
            copy = *act;
            (void)adsm__without_faults(&act->sa_mask, &copy.sa_mask);
            act = &copy;
        }
        return adsm__real_sigaction()(sig, act, old);
    }
    adsm__lock(&adsm__disposition_lock);
    struct sigaction *slot = adsm__prev_handler(sig), prev = *slot;
    if (act) *slot = *act;
    adsm__unlock(&adsm__disposition_lock);
    if (old) *old = prev;
    return 0;
}

/* glibc's signal() semantics (BSD: SA_RESTART, the signal blocked in its handler), through the
 * sigaction above. */
sighandler_t signal(int sig, sighandler_t handler) ADSM__NOEXCEPT {
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
