/* adsm_impl/protection.h -- the fault engine's half that sets host page protection: how a
 * block state becomes what the CPU may do with its pages, so that the next access the state
 * forbids traps into adsm.
 *
 * Two engines (docs/design.md section 4, "Two ways to see a write"):
 * - mprotect: Invalid is PROT_NONE, ReadOnly PROT_READ, Dirty PROT_READ|PROT_WRITE. Every change
 *   is an mprotect, and a block whose protection differs from its neighbours' is a mapping of its
 *   own, so the kernel's cost of a change grows with the number of mappings (sparse writes to a
 *   large object split it into many).
 * - userfaultfd: Invalid is still PROT_NONE (write-protection cannot hide pages from reads), but
 *   ReadOnly and Dirty are both PROT_READ|PROT_WRITE; ReadOnly pages are write-protected in their
 *   page-table entries with UFFDIO_WRITEPROTECT (UFFD_FEATURE_SIGBUS: the writing thread gets
 *   SIGBUS and handles its own fault, as with SIGSEGV; UFFD_USER_MODE_ONLY: no privilege needed;
 *   UFFD_FEATURE_WP_UNPOPULATED, Linux 6.4: pages never touched are protected too). The common
 *   change, ReadOnly -> Dirty, is one ioctl that splits no mapping. Its price: write-protecting
 *   untouched memory fills page tables (about 5 ns a page, 2 MiB of tables per GiB) and keeps
 *   those pages off transparent huge pages, and every un-protect flushes the TLBs of the other
 *   CPUs running the process, so threads faulting at once scale worse than with mprotect; it is
 *   the program's choice (ADSM_FAULT_ENGINE, lifecycle.h), not the default.
 *   Write-protection bits live in page-table entries, so two rules keep them right: a range
 *   leaving Invalid is write-protected *before* it becomes writable, and registered again first
 *   where a fill moved staging pages over it with mremap (copy.h: an unregistered mapping); a
 *   ReadOnly range turning Invalid loses its bits after it became PROT_NONE, because the kernel
 *   refuses /proc/self/mem writes into write-protected pages (copy.h fills small pieces that
 *   way).
 *
 * Context: adsm__protect_state is signal-safe (system calls only) and runs under the runtime
 * lock, in the fault handler too. adsm__protection_open/_close run at start and stop. */
#ifndef ADSM__PROTECTION_INCLUDED
#define ADSM__PROTECTION_INCLUDED

#include "common.h"
#include "os.h"
#include "object.h"

#include <errno.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1 /* Linux 5.11 */
#endif
#define ADSM__UFFD_WP_UNPOPULATED ((unsigned long long)1 << 13) /* UFFD_FEATURE_WP_UNPOPULATED, Linux 6.4 */

typedef struct adsm__protection {
    int uffd; /* the userfaultfd of the userfaultfd engine; -1: the mprotect engine */
    uintptr_t canary; /* a page of adsm's own registered with that userfaultfd: it answers for
                         the descriptor only while the descriptor is still adsm's (below) */
    size_t page;
} adsm__protection;

/* Which states a range of blocks holds, as a mask of bits (1 << state). */
#define ADSM__HAS(state) (1u << (state))
#define ADSM__ALL_STATES (ADSM__HAS(ADSM__INVALID) | ADSM__HAS(ADSM__READONLY) | ADSM__HAS(ADSM__DIRTY))

/* Why userfaultfd(2) failed with err, and the way out. */
ADSM__PRIVATE const char *adsm__uffd_refusal(int err) {
    switch (err) {
    case ENOSYS: return "the kernel has no userfaultfd; leave it unset for mprotect";
    case EMFILE:
        return "userfaultfd(2) found no file descriptor free (EMFILE: raise ulimit -n, or close some); or leave it "
               "unset for mprotect";
    case ENFILE:
        return "userfaultfd(2) found the system's file table full (ENFILE: fs.file-max); leave it unset for mprotect";
    case ENOMEM: return "userfaultfd(2) ran out of kernel memory (ENOMEM); leave it unset for mprotect";
    default:
        return "userfaultfd(2) was refused (a container's seccomp profile refuses it by default); leave it unset "
               "for mprotect";
    }
}

/* The userfaultfd the engine needs, or -1 with *why saying what the kernel refused. */
ADSM__PRIVATE int adsm__uffd_open(const char **why) {
#ifdef SYS_userfaultfd
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
    if (fd < 0) {
        *why = adsm__uffd_refusal(errno);
        return -1;
    }
    struct uffdio_api api;
    memset(&api, 0, sizeof api);
    api.api = UFFD_API;
    api.features = UFFD_FEATURE_SIGBUS | ADSM__UFFD_WP_UNPOPULATED;
    if (ioctl(fd, UFFDIO_API, &api) != 0) {
        *why = "the kernel lacks write-protection of untouched pages with SIGBUS delivery (Linux 6.4+)";
        close(fd);
        return -1;
    }
    return fd;
#else
    *why = "built without userfaultfd";
    return -1;
#endif
}

/* ---- userfaultfd verbs (signal-safe) --------------------------------------------------------- */
ADSM__PRIVATE int adsm__uffd_register(const adsm__protection *p, uintptr_t addr, size_t len) {
    struct uffdio_register reg;
    memset(&reg, 0, sizeof reg);
    reg.range.start = addr;
    reg.range.len = len;
    reg.mode = UFFDIO_REGISTER_MODE_WP; /* registering a registered part again changes nothing */
    return ioctl(p->uffd, UFFDIO_REGISTER, &reg);
}

ADSM__PRIVATE int adsm__uffd_write_protect(const adsm__protection *p, uintptr_t addr, size_t len, int on) {
    struct uffdio_writeprotect wp;
    memset(&wp, 0, sizeof wp);
    wp.range.start = addr;
    wp.range.len = len;
    wp.mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0;
    return ioctl(p->uffd, UFFDIO_WRITEPROTECT, &wp);
}

/* Whether the userfaultfd is no longer adsm's: the program closed it (a daemon closing every
 * descriptor, a dup2 over its number), and the kernel dropped every registration and
 * write-protection with it, so writes to ReadOnly pages no longer stop. The canary, registered
 * at the start, answers only through adsm's own descriptor: a closed number, another kind of
 * file or another userfaultfd all refuse it. Signal-safe; keeps errno. */
ADSM__PRIVATE int adsm__protection_lost(const adsm__protection *p) {
    if (p->uffd < 0) return 0;
    int saved_errno = errno, lost = adsm__uffd_write_protect(p, p->canary, p->page, 0) != 0;
    errno = saved_errno;
    return lost;
}

/* Normal context: starts the engine (uffd: 1 for userfaultfd, 0 for mprotect). 0, or -1 with
 * *why set when userfaultfd was asked for and the kernel refused it. */
ADSM__PRIVATE int adsm__protection_open(adsm__protection *p, int uffd, const char **why) {
    p->canary = 0;
    p->uffd = uffd ? adsm__uffd_open(why) : -1;
    if (p->uffd < 0) return uffd ? -1 : 0;
    p->page = (size_t)sysconf(_SC_PAGESIZE);
    void *page = mmap(NULL, p->page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page != MAP_FAILED) p->canary = (uintptr_t)page;
    if (page == MAP_FAILED || adsm__uffd_register(p, p->canary, p->page) != 0) {
        *why = "userfaultfd(2) would not register a page";
        if (page != MAP_FAILED) munmap(page, p->page);
        close(p->uffd);
        p->uffd = -1;
        p->canary = 0;
        return -1;
    }
    return 0;
}

/* After the reservation is gone: the registrations went with its mappings. A descriptor the
 * program closed is not adsm's to close (its number may be another file's now). */
ADSM__PRIVATE void adsm__protection_close(adsm__protection *p) {
    if (p->uffd >= 0 && !adsm__protection_lost(p)) close(p->uffd);
    if (p->canary) munmap((void *)p->canary, p->page);
    p->uffd = -1;
    p->canary = 0;
}

/* Read by the fault handler without the runtime lock (whether a SIGBUS is adsm's). */
ADSM__PRIVATE int adsm__protection_uses_uffd(const adsm__protection *p) { return ADSM__LOAD(&p->uffd) >= 0; }

ADSM__PRIVATE const char *adsm__protection_name(const adsm__protection *p) {
    return p->uffd >= 0 ? "userfaultfd" : "mprotect";
}

/* The userfaultfd was lost: mprotect sees writes from now on (protocol.h takes the ReadOnly
 * data as written). Runtime lock held; signal-safe. */
ADSM__PRIVATE void adsm__protection_fall_back(adsm__protection *p) {
    ADSM__STORE(&p->uffd, -1);
}

/* Sets or clears write-protection over a range, registering it first where some part is not
 * (ENOENT: a fetch moved staging pages over it with mremap, which leaves an unregistered
 * mapping). Registering takes the process's mmap lock for writing, so it is done only then, and
 * never through a descriptor that is no longer adsm's (it could be the program's userfaultfd). */
ADSM__PRIVATE int adsm__uffd_set(const adsm__protection *p, uintptr_t addr, size_t len, int on) {
    if (adsm__uffd_write_protect(p, addr, len, on) == 0) return 0;
    if (errno != ENOENT || adsm__protection_lost(p) || adsm__uffd_register(p, addr, len) != 0) return -1;
    return adsm__uffd_write_protect(p, addr, len, on);
}

/* userfaultfd engine: [addr, addr + len), whose blocks are in the states of mask `from`, goes to
 * `state`. Every order below closes the window in which the CPU could write untracked. */
ADSM__PRIVATE int adsm__uffd_protect_state(const adsm__protection *p, uintptr_t addr, size_t len, unsigned from,
                                           int state) {
    if (state == ADSM__INVALID) {
        if (adsm__protect(addr, len, PROT_NONE) != 0) return -1;
        return (from & ADSM__HAS(ADSM__READONLY)) ? adsm__uffd_set(p, addr, len, 0) : 0;
    }
    /* ReadOnly: protected while still PROT_NONE when it leaves Invalid. Dirty: unprotected even
     * when already Dirty, so a write that faulted never faults again. Then writable. */
    if (adsm__uffd_set(p, addr, len, state == ADSM__READONLY) != 0) return -1;
    return (from & ADSM__HAS(ADSM__INVALID)) ? adsm__protect(addr, len, PROT_READ | PROT_WRITE) : 0;
}

/* Gives [addr, addr + len), whose blocks are now in the states of mask `from`, the protection
 * of `state`. 0, or -1 with errno set (ENOMEM: the mapping limit, protocol.h). */
ADSM__PRIVATE int adsm__protect_state(const adsm__protection *p, uintptr_t addr, size_t len, unsigned from,
                                      int state) {
    static const int prot[3] = {PROT_NONE, PROT_READ, PROT_READ | PROT_WRITE};
    if (p->uffd >= 0) return adsm__uffd_protect_state(p, addr, len, from, state);
    return adsm__protect(addr, len, prot[state]);
}

#endif /* ADSM__PROTECTION_INCLUDED */
