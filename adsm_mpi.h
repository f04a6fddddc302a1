/* adsm_mpi.h -- MPI on adsm's shared objects, v0.1.0, MIT licence (as adsm.h)

   A companion to adsm.h for MPI programs (the MPI 3.1 C interface; checked with Open MPI 4.1).
   It makes the program's own MPI_* calls right when their buffers lie in shared objects, through
   MPI's profiling interface: it defines MPI_Send, MPI_Recv, ... and does the work with PMPI_Send,
   PMPI_Recv, ... Programs that do not include it are unaffected.

   DO THIS in exactly one C file of your program, after adsm.h and mpi.h:

       #include "adsm.h"            (with ADSM_IMPLEMENTATION here or in another file)
       #include <mpi.h>
       #define ADSM_MPI_IMPLEMENTATION
       #include "adsm_mpi.h"

   and build with mpicc:  mpicc -std=c11 -I<dir of adsm.h> app.c -pthread -ldl
   Other files include adsm_mpi.h only for adsm_mpi_get_stats and friends; their MPI calls are
   the ones defined here (the linker binds them). Run with mpirun as usual (README, "MPI").

   WHY
   Without it a shared object handed to MPI breaks. A protected page (Invalid: PROT_NONE,
   ReadOnly: PROT_READ) is fine for the MPI library's own loads and stores, which fault and adsm
   resolves, but not for the kernel's accesses on MPI's behalf, which fail with EFAULT and raise
   no signal adsm could see: Open MPI's shared-memory transport moves a large message with
   process_vm_readv/writev (CMA; Open MPI 4.1 prints "Read -1, expected ..." and falls back to a
   slower copy, other versions and UCX fail), its TCP transport's writev fails ("Bad address") and
   the job dies, RDMA reads pages adsm has not filled. Under batch, a kernel's output is not home
   before adsm_sync at all. A CUDA-aware MPI (or UCX) sees that adsm's pointers lie in a device
   virtual address range on cuda and reads or writes the device copy behind adsm, which may be
   stale or be overwritten by adsm's next flush.

   WHAT adsm_mpi HANDS MPI
   Never a shared object's address. A buffer that reaches into a shared object (adsm_is_shared
   over the bytes its datatype covers) is mirrored: MPI gets plain host memory laid out like the
   program's buffer (the same datatype and count work on it), from malloc, so every transport,
   CUDA-aware or not, takes it for ordinary host memory and uses its host path.
     - Data sent (a send buffer, a collective's input): copied into the mirror with adsm_memcpy
       before the PMPI call, which fetches what is not current on the host: the bytes sent are
       the host's newest (a Dirty block's, not the device's stale copy; a kernel's output is
       waited for and, under batch, brought home). The object's blocks are left current and
       readable on the host.
     - Data received: after the operation completes, the bytes that arrived (the status's count
       for a point-to-point receive) are copied into the object with adsm_memcpy: they are Dirty
       on the host, every device copy stale. A datatype with gaps is taken apart into its runs of
       bytes (MPI_Type_get_envelope/contents; darray and padded predefined pairs are taken whole)
       and only those are written: bytes between them keep their values, even if the CPU wrote
       them meanwhile.
     - Buffers in plain memory go to PMPI unchanged (a datatype query and one adsm_is_shared).
   The mirror has the layout of the bytes the datatype covers, so MPI gets the program's own
   datatype and count; where they are spread far apart (MPI_BOTTOM and absolute addresses) it is
   a sparse mapping that only the data's pages ever occupy. The cost is one host copy of each
   message on each side that is in shared memory; what adsm fetches or flushes is what the CPU
   touching those bytes would move (rolling: a fetch takes its 2 MiB huge page's Invalid blocks).

   NONBLOCKING AND PERSISTENT REQUESTS
   MPI_Isend, Issend, Irsend, Ibsend, Irecv, Imrecv and the nonblocking collectives below keep
   their mirror until the request completes in MPI_Wait, Waitall, Waitany, Waitsome, Test,
   Testall, Testany, Testsome or MPI_Request_get_status; a receive's bytes reach the object then.
   Meanwhile the program may read a send buffer (MPI 3); writing it, or touching a receive buffer
   before completion, is an MPI error as always (here: the write does not change the message; a
   receive buffer still holds its old bytes). Bytes of the same object outside the buffer are
   free to use, by the CPU and by kernels. MPI_Send_init, Ssend_init, Rsend_init, Bsend_init and
   MPI_Recv_init make the mirror once; MPI_Start / MPI_Startall copy the data to send, each
   completion copies what arrived. MPI_Request_free of an active request: adsm_mpi keeps the
   request and completes it itself, at the next MPI call of this header that finds it done, at
   the latest in MPI_Finalize (a freed receive's bytes arrive then); as with plain memory, an
   error of a freed request (a truncation) reaches no error handler. Cancelled requests deliver
   nothing.

   CALLS INTERCEPTED
       point to point  MPI_Send Ssend Rsend Bsend Recv Mrecv Sendrecv Sendrecv_replace, the
                       nonblocking and persistent forms above, MPI_Start Startall, the Wait and
                       Test families, Request_get_status, Request_free
       collectives     MPI_Bcast Reduce Allreduce Allgather Allgatherv Alltoall Alltoallv
                       Alltoallw Gather Gatherv Scatter Scatterv Reduce_scatter
                       Reduce_scatter_block Scan Exscan (MPI_IN_PLACE included, and
                       intercommunicators), MPI_Ibcast Ireduce Iallreduce Iallgather Ialltoall,
                       MPI_Barrier (only to complete freed requests)
       local           MPI_Reduce_local, MPI_Pack, MPI_Unpack (adsm_touch before the CPU work,
                       so batch's pending kernel outputs come home first), MPI_Finalize
       refused         MPI_Win_create and MPI_Win_attach over shared memory (MPI_ERR_BASE) and
                       MPI_Buffer_attach of shared memory (MPI_ERR_BUFFER): one-sided RMA writes
                       a window from other processes at any time, and a Bsend buffer is read by
                       them; adsm cannot keep either coherent.
   Interior pointers, MPI_BOTTOM with absolute displacements, datatypes with gaps, negative
   extents and buffers spanning several objects and plain memory all work.

   NOT SUPPORTED (do not give them shared memory; use a plain buffer and adsm_memcpy)
   MPI-IO (MPI_File_*: or adsm_read/adsm_write on a file descriptor), the origin buffers of
   MPI_Put/Get/Accumulate and friends, neighbourhood collectives, the nonblocking collectives not
   listed, MPI 4's large-count (_c) and partitioned calls, the Fortran and C++ bindings, buffers
   from adsm_dev_alloc (not host memory: on cuda a CUDA-aware MPI takes them as device memory,
   which is what the explicit path wants). MPI calls made from other shared libraries reach these
   definitions only where the executable exports them (it does by default with GNU ld, as it
   overrides libmpi's symbols; link with -rdynamic otherwise).

   PROCESSES AND THREADS
   The emu backend forks its device process at adsm_init; that child keeps only descriptors 0-2,
   so it works before or after MPI_Init (checked with Open MPI 4.1: no fork warning with the
   shared-memory and TCP transports). Calling adsm_init before MPI_Init forks before MPI opens
   anything, which InfiniBand verbs prefer. One GPU per rank on cuda: adsm_config.device (or
   ADSM_DEVICE) from the node-local rank, which adsm_mpi_local_rank() reads from the launcher's
   environment before MPI_Init. adsm_mpi is thread safe as MPI_THREAD_MULTIPLE needs (a lock
   around its table of requests; copies run outside it).

   ERRORS
   When adsm cannot copy a buffer (device lost, out of memory) the call fails: a message naming
   the MPI call and adsm's reason goes to stderr and to adsm_mpi_last_error(), and the error class
   (MPI_ERR_OTHER, MPI_ERR_NO_MEM, or the refusals' classes above) is raised on the call's
   communicator (completion calls: MPI_COMM_WORLD) as MPI does: MPI_ERRORS_ARE_FATAL ends the job
   with MPI's own report, MPI_ERRORS_RETURN returns the code. A point-to-point receive into shared
   memory that fails with MPI_ERR_TRUNCATE leaves what fit, as in plain memory. A collective that
   fails so leaves the object as it was: it reports no count, and MPI may have left parts of the
   buffer unwritten (MPI calls it undefined after an error), so adsm_mpi delivers nothing.
*/
#ifndef ADSM_MPI_H_INCLUDED
#define ADSM_MPI_H_INCLUDED

#ifndef ADSM_H_INCLUDED
#error "adsm_mpi.h: include adsm.h first"
#endif
#ifndef MPI_VERSION
#error "adsm_mpi.h: include <mpi.h> first"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* What adsm_mpi did since the start or the last adsm_mpi_reset_stats (this process). */
typedef struct adsm_mpi_stats {
    uint64_t calls;       /* intercepted calls that had a buffer */
    uint64_t mirrored;    /* buffers that reached into shared memory, so MPI got a mirror */
    uint64_t bytes_out;   /* bytes copied out of shared memory into mirrors (data sent) */
    uint64_t bytes_in;    /* bytes copied from mirrors into shared memory (data received) */
    uint64_t pending;     /* requests holding a mirror now (not reset) */
} adsm_mpi_stats;

ADSM_API void adsm_mpi_get_stats(adsm_mpi_stats *out);
ADSM_API void adsm_mpi_reset_stats(void);
/* The calling thread's last adsm_mpi failure, or "" when there was none. */
ADSM_API const char *adsm_mpi_last_error(void);
/* The process's rank among those of its node, from the launcher's environment (Open MPI, MPICH,
   Slurm), so it works before MPI_Init; -1 when none says. */
ADSM_API int adsm_mpi_local_rank(void);

#ifdef __cplusplus
}
#endif
#endif /* ADSM_MPI_H_INCLUDED */

/* ============================================================================================ */
#if defined(ADSM_MPI_IMPLEMENTATION) && !defined(ADSM_MPI__IMPL_INCLUDED)
#define ADSM_MPI__IMPL_INCLUDED

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* The implementation: the MPI_* definitions run in the threads that call MPI, in normal thread
 * context (never in a signal handler); they call adsm's public functions only. A mutex guards the
 * table of requests with mirrors; copies run outside it. */
#define ADSM_MPI__PRIVATE static

/* ---- state ----------------------------------------------------------------------------------- */
enum { ADSM_MPI__IN = 1, ADSM_MPI__OUT = 2, ADSM_MPI__INOUT = 3 };

typedef struct adsm_mpi__pending adsm_mpi__pending;

#define ADSM_MPI__TOMB ((adsm_mpi__pending *)1)

static struct {
    pthread_mutex_t mutex;
    adsm_mpi__pending **slots; /* open addressing on the request handle; ADSM_MPI__TOMB = removed */
    size_t cap, used, live;    /* used counts tombstones too */
    adsm_mpi__pending **detached;
    size_t ndetached, detached_cap;
    adsm_mpi_stats stats;
} adsm_mpi__st = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 0, NULL, 0, 0, {0, 0, 0, 0, 0}};

static __thread char adsm_mpi__error[512];

#define ADSM_MPI__ADD(field, n) __atomic_fetch_add(&adsm_mpi__st.stats.field, (uint64_t)(n), __ATOMIC_RELAXED)
#define ADSM_MPI__LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

/* ---- errors ---------------------------------------------------------------------------------- */
/* Records and prints why fn failed; returns code. */
ADSM_MPI__PRIVATE int adsm_mpi__fail(int code, const char *fn, const char *fmt, ...) {
    int n = snprintf(adsm_mpi__error, sizeof adsm_mpi__error, "adsm_mpi: %s: ", fn);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof adsm_mpi__error)
        vsnprintf(adsm_mpi__error + n, sizeof adsm_mpi__error - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", adsm_mpi__error);
    return code;
}

/* Hands an error to the communicator's error handler, as MPI would; returns it. */
ADSM_MPI__PRIVATE int adsm_mpi__raise(MPI_Comm comm, int code) {
    if (code != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, code);
    return code;
}

/* ---- datatypes as byte runs ---------------------------------------------------------------- */
/* What a (count, datatype) buffer covers, as runs of bytes in the datatype's own order (the order
 * the data travels in), offsets from the buffer's base. Built from MPI_Type_get_envelope and
 * MPI_Type_get_contents; elements whose data lies in address order without a gap are one run. */
typedef struct adsm_mpi__run {
    MPI_Aint off, len;
} adsm_mpi__run;

typedef struct adsm_mpi__runs {
    adsm_mpi__run *r;
    size_t n, cap;
    int inexact; /* some element was taken whole, bytes between its data included */
} adsm_mpi__runs;

/* Appends a run, joining it to the last one when they touch. 0, or -1 out of memory. */
ADSM_MPI__PRIVATE int adsm_mpi__run_add(adsm_mpi__runs *rs, MPI_Aint off, MPI_Aint len) {
    if (len <= 0) return 0;
    if (rs->n && rs->r[rs->n - 1].off + rs->r[rs->n - 1].len == off) {
        rs->r[rs->n - 1].len += len;
        return 0;
    }
    if (rs->n == rs->cap) {
        size_t cap = rs->cap ? 2 * rs->cap : 8;
        adsm_mpi__run *r = (adsm_mpi__run *)realloc(rs->r, cap * sizeof *r);
        if (!r) return -1;
        rs->r = r;
        rs->cap = cap;
    }
    rs->r[rs->n].off = off;
    rs->r[rs->n++].len = len;
    return 0;
}

/* count copies of the runs of one element (sub), extent apart, from disp. */
ADSM_MPI__PRIVATE int adsm_mpi__place(adsm_mpi__runs *rs, const adsm_mpi__runs *sub, MPI_Aint extent, MPI_Aint disp,
                                      MPI_Aint count) {
    rs->inexact |= sub->inexact;
    for (MPI_Aint i = 0; i < count; i++)
        for (size_t j = 0; j < sub->n; j++)
            if (adsm_mpi__run_add(rs, disp + i * extent + sub->r[j].off, sub->r[j].len) != 0) return -1;
    return 0;
}

typedef struct adsm_mpi__shape {
    int size;
    MPI_Aint lb, extent, tlb, textent;
} adsm_mpi__shape;

ADSM_MPI__PRIVATE adsm_mpi__shape adsm_mpi__shape_of(MPI_Datatype t) {
    adsm_mpi__shape s;
    PMPI_Type_size(t, &s.size);
    PMPI_Type_get_extent(t, &s.lb, &s.extent);
    PMPI_Type_get_true_extent(t, &s.tlb, &s.textent);
    return s;
}

ADSM_MPI__PRIVATE int adsm_mpi__element_runs(MPI_Datatype t, adsm_mpi__runs *out, int depth);

/* An element type taken apart once, to be placed any number of times (a vector's blocks, a
 * subarray's rows): taking it apart costs MPI_Type_get_contents calls and allocations, so it is
 * not done per block. `one`: its data lies in one run in address order, so elements side by side
 * are one run too. Not otherwise, though no gap is left: a struct listing its second half first
 * sends that first, and a short message's bytes are cut in data order (adsm_mpi__deliver); nor
 * with a negative extent, which lays the elements downwards. */
typedef struct adsm_mpi__elem {
    adsm_mpi__runs sub;
    adsm_mpi__shape s;
    int one;
} adsm_mpi__elem;

ADSM_MPI__PRIVATE int adsm_mpi__elem_of(adsm_mpi__elem *e, MPI_Datatype t, int depth) {
    memset(e, 0, sizeof *e);
    e->s = adsm_mpi__shape_of(t);
    if (e->s.size <= 0) return 0;
    int rc = adsm_mpi__element_runs(t, &e->sub, depth + 1);
    e->one = rc == 0 && e->sub.n == 1 && e->sub.r[0].len == e->s.size && !e->sub.inexact;
    return rc;
}

/* count elements e at disp, extent apart. */
ADSM_MPI__PRIVATE int adsm_mpi__elem_place(adsm_mpi__runs *rs, const adsm_mpi__elem *e, MPI_Aint disp, MPI_Aint count) {
    if (count <= 0 || e->s.size <= 0) return 0;
    if (e->one && (count == 1 || e->s.extent == e->s.size))
        return adsm_mpi__run_add(rs, disp + e->sub.r[0].off, count * e->s.size);
    return adsm_mpi__place(rs, &e->sub, e->s.extent, disp, count);
}

/* count elements of t at disp, extent apart. */
ADSM_MPI__PRIVATE int adsm_mpi__type_runs(adsm_mpi__runs *rs, MPI_Datatype t, MPI_Aint disp, MPI_Aint count,
                                          int depth) {
    if (count <= 0) return 0;
    adsm_mpi__elem e;
    int rc = adsm_mpi__elem_of(&e, t, depth);
    if (rc == 0) rc = adsm_mpi__elem_place(rs, &e, disp, count);
    free(e.sub.r);
    return rc;
}

/* A subarray's runs: every row of its fastest dimension, in the array's order (e: its element). */
ADSM_MPI__PRIVATE int adsm_mpi__subarray_runs(adsm_mpi__runs *out, const int *ints, const adsm_mpi__elem *e) {
    int nd = ints[0];
    const int *sizes = ints + 1, *subs = ints + 1 + nd, *starts = ints + 1 + 2 * nd;
    int c_order = ints[1 + 3 * nd] == MPI_ORDER_C;
    MPI_Aint ext = e->s.extent, stride[32], idx[32] = {0};
    if (nd < 1 || nd > 32) return -1;
    for (int k = 0; k < nd; k++) { /* elements between neighbours along dimension d (d = k, fastest first) */
        int d = c_order ? nd - 1 - k : k, faster = c_order ? d + 1 : d - 1;
        stride[d] = k == 0 ? 1 : stride[faster] * sizes[faster];
    }
    int fast = c_order ? nd - 1 : 0;
    for (;;) {
        MPI_Aint at = 0;
        for (int d = 0; d < nd; d++) at += (starts[d] + idx[d]) * stride[d];
        if (adsm_mpi__elem_place(out, e, at * ext, subs[fast]) != 0) return -1;
        int k = 1; /* the next row: count in the slower dimensions */
        for (; k < nd; k++) {
            int d = c_order ? nd - 1 - k : k;
            if (++idx[d] < subs[d]) break;
            idx[d] = 0;
        }
        if (k == nd) return 0;
    }
}

/* The runs of the blocks of a (h)vector, (h)indexed (block) or subarray whose element is e. */
ADSM_MPI__PRIVATE int adsm_mpi__blocks_runs(adsm_mpi__runs *out, int comb, const int *ints, const MPI_Aint *addrs,
                                            const adsm_mpi__elem *e) {
    MPI_Aint ext = e->s.extent;
    int n = ints[0], rc = 0;
    /* a (h)vector whose blocks touch, upwards: its elements side by side, one run at once */
    MPI_Aint stride = comb == MPI_COMBINER_VECTOR ? (MPI_Aint)ints[2] * ext : comb == MPI_COMBINER_HVECTOR ? addrs[0] : -1;
    if (e->one && ext == e->s.size && stride == (MPI_Aint)ints[1] * ext && n > 0)
        return adsm_mpi__elem_place(out, e, 0, (MPI_Aint)n * ints[1]);
    for (int j = 0; j < n && rc == 0; j++) {
        switch (comb) {
        case MPI_COMBINER_VECTOR: rc = adsm_mpi__elem_place(out, e, (MPI_Aint)j * ints[2] * ext, ints[1]); break;
        case MPI_COMBINER_HVECTOR: rc = adsm_mpi__elem_place(out, e, j * addrs[0], ints[1]); break;
        case MPI_COMBINER_INDEXED: rc = adsm_mpi__elem_place(out, e, (MPI_Aint)ints[1 + n + j] * ext, ints[1 + j]); break;
        case MPI_COMBINER_HINDEXED: rc = adsm_mpi__elem_place(out, e, addrs[j], ints[1 + j]); break;
        case MPI_COMBINER_INDEXED_BLOCK: rc = adsm_mpi__elem_place(out, e, (MPI_Aint)ints[2 + j] * ext, ints[1]); break;
        default: rc = adsm_mpi__elem_place(out, e, addrs[j], ints[1]); break; /* hindexed block */
        }
    }
    return rc;
}

/* The runs of one element of t given its construction (ints, addrs, types). */
ADSM_MPI__PRIVATE int adsm_mpi__combiner_runs(adsm_mpi__runs *out, int comb, const int *ints, const MPI_Aint *addrs,
                                              const MPI_Datatype *types, int depth) {
    int n = ints ? ints[0] : 0, rc = 0;
    switch (comb) {
    case MPI_COMBINER_DUP:
    case MPI_COMBINER_RESIZED: return adsm_mpi__type_runs(out, types[0], 0, 1, depth); /* same typemap */
    case MPI_COMBINER_CONTIGUOUS: return adsm_mpi__type_runs(out, types[0], 0, n, depth);
    case MPI_COMBINER_VECTOR:
    case MPI_COMBINER_HVECTOR:
    case MPI_COMBINER_INDEXED:
    case MPI_COMBINER_HINDEXED:
    case MPI_COMBINER_INDEXED_BLOCK:
#if MPI_VERSION >= 3 /* MPI 3.0's; an enumerator in Open MPI, so #ifdef never saw it */
    case MPI_COMBINER_HINDEXED_BLOCK:
#endif
    case MPI_COMBINER_SUBARRAY: break; /* below */
    case MPI_COMBINER_STRUCT:
        for (int j = 0; j < n && rc == 0; j++) rc = adsm_mpi__type_runs(out, types[j], addrs[j], ints[1 + j], depth);
        return rc;
    default: return 1; /* darray, Fortran-made types: not taken apart */
    }
    adsm_mpi__elem e; /* blocks of one element type: taken apart once */
    rc = adsm_mpi__elem_of(&e, types[0], depth);
    if (rc == 0) rc = comb == MPI_COMBINER_SUBARRAY ? adsm_mpi__subarray_runs(out, ints, &e)
                                                    : adsm_mpi__blocks_runs(out, comb, ints, addrs, &e);
    out->inexact |= e.sub.inexact;
    free(e.sub.r);
    return rc;
}

/* The runs of one element of t, from its base. Types not taken apart (predefined ones with
 * padding inside, darray) are their true extent: exact for data sent, and for data received
 * the bytes in between come back as they were when the mirror was filled (adsm_mpi__prepare
 * fills it then). */
ADSM_MPI__PRIVATE int adsm_mpi__element_runs(MPI_Datatype t, adsm_mpi__runs *out, int depth) {
    int ni = 0, na = 0, nt = 0, comb = MPI_COMBINER_NAMED;
    adsm_mpi__shape s = adsm_mpi__shape_of(t);
    PMPI_Type_get_envelope(t, &ni, &na, &nt, &comb);
    if (comb == MPI_COMBINER_NAMED || depth > 64) {
        out->inexact |= s.size != s.textent; /* a predefined pair type with padding inside */
        return adsm_mpi__run_add(out, s.tlb, s.textent);
    }
    int *ints = (int *)malloc((size_t)(ni + 1) * sizeof *ints);
    MPI_Aint *addrs = (MPI_Aint *)malloc((size_t)(na + 1) * sizeof *addrs);
    MPI_Datatype *types = (MPI_Datatype *)malloc((size_t)(nt + 1) * sizeof *types);
    int rc = -1;
    if (ints && addrs && types && PMPI_Type_get_contents(t, ni, na, nt, ints, addrs, types) == MPI_SUCCESS) {
        rc = adsm_mpi__combiner_runs(out, comb, ints, addrs, types, depth);
        for (int j = 0; j < nt; j++) { /* derived types returned are new handles: ours to free */
            int i2, a2, t2, c2;
            PMPI_Type_get_envelope(types[j], &i2, &a2, &t2, &c2);
            if (c2 != MPI_COMBINER_NAMED) PMPI_Type_free(&types[j]);
        }
    }
    free(ints);
    free(addrs);
    free(types);
    if (rc == 1) { /* not taken apart: the element's true extent */
        out->n = 0;
        out->inexact = 1;
        rc = adsm_mpi__run_add(out, s.tlb, s.textent);
    }
    return rc;
}

ADSM_MPI__PRIVATE int adsm_mpi__run_cmp(const void *a, const void *b) {
    MPI_Aint x = ((const adsm_mpi__run *)a)->off, y = ((const adsm_mpi__run *)b)->off;
    return x < y ? -1 : x > y;
}

/* The runs sorted by address (a copy when they were not already), NULL out of memory. */
ADSM_MPI__PRIVATE adsm_mpi__run *adsm_mpi__sorted(const adsm_mpi__run *r, size_t n, adsm_mpi__run **owned) {
    *owned = NULL;
    size_t i = 1;
    while (i < n && r[i - 1].off <= r[i].off) i++;
    if (i >= n) return (adsm_mpi__run *)r;
    *owned = (adsm_mpi__run *)malloc(n * sizeof *r);
    if (*owned) {
        memcpy(*owned, r, n * sizeof *r);
        qsort(*owned, n, sizeof *r, adsm_mpi__run_cmp);
    }
    return *owned;
}

/* Runs closer than this are copied as one piece when reading them (the bytes between are read
 * for nothing, but one adsm_memcpy costs more than a page of copying) and made writable with one
 * adsm_touch when writing them. */
#define ADSM_MPI__CLUSTER_GAP ((MPI_Aint)4096)

/* The cluster of sorted runs starting at i: returns one past its last run, *end the end of its
 * bytes. */
ADSM_MPI__PRIVATE size_t adsm_mpi__cluster(const adsm_mpi__run *r, size_t n, size_t i, MPI_Aint *end) {
    size_t j = i + 1;
    *end = r[i].off + r[i].len;
    for (; j < n && r[j].off - *end < ADSM_MPI__CLUSTER_GAP; j++)
        if (r[j].off + r[j].len > *end) *end = r[j].off + r[j].len;
    return j;
}

/* ---- buffers --------------------------------------------------------------------------------- */
/* count elements of type at byte offset disp from a buffer's base. */
typedef struct adsm_mpi__block {
    MPI_Aint disp, count;
    MPI_Datatype type;
} adsm_mpi__block;

/* A buffer of one MPI call. dir 0: plain memory, MPI gets the program's pointer. Otherwise the
 * mirror holds the bytes [base + lo, base + hi) at the same offsets (MPI gets mirror - lo as the
 * base, with the program's datatypes) and runs says which of them are data. */
typedef struct adsm_mpi__buf {
    uintptr_t base;
    int dir;
    MPI_Aint lo, hi;
    unsigned char *mirror;
    void *mem;      /* what was allocated for the mirror */
    size_t mem_len; /* its length when mapped (a sparse mirror), 0 when from malloc */
    adsm_mpi__runs runs;
} adsm_mpi__buf;

ADSM_MPI__PRIVATE adsm_mpi__block adsm_mpi__blk(MPI_Aint disp, MPI_Aint count, MPI_Datatype type) {
    adsm_mpi__block k;
    k.disp = disp;
    k.count = count;
    k.type = type;
    return k;
}

ADSM_MPI__PRIVATE void adsm_mpi__release(adsm_mpi__buf *b) {
    if (b->mem_len) munmap(b->mem, b->mem_len);
    else free(b->mem);
    free(b->runs.r);
    memset(&b->runs, 0, sizeof b->runs);
    b->mem = NULL;
    b->mirror = NULL;
    b->mem_len = 0;
    b->dir = 0;
}

/* Plain host memory for the bytes [base + lo, base + hi), at the same offset within 64 bytes as
 * the program's buffer (vector loads in MPI's copies and reductions see the same alignment).
 * A box much larger than its data (a datatype over distant addresses, MPI_BOTTOM) is a sparse
 * mapping: only the pages the data lands on are ever touched. */
ADSM_MPI__PRIVATE int adsm_mpi__mirror(adsm_mpi__buf *b, MPI_Aint data, const char *fn) {
    size_t len = (size_t)(b->hi - b->lo) + 128, shift = (size_t)((b->base + (uintptr_t)b->lo) & 63);
    if ((MPI_Aint)len <= 4 * data + ((MPI_Aint)1 << 20)) {
        b->mem = malloc(len);
    } else {
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        b->mem = p == MAP_FAILED ? NULL : p;
        b->mem_len = b->mem ? len : 0;
    }
    if (!b->mem)
        return adsm_mpi__fail(MPI_ERR_NO_MEM, fn, "no memory for a %zu-byte mirror of a shared buffer (%lld bytes "
                              "of data)", len, (long long)data);
    b->mirror = (unsigned char *)((((uintptr_t)b->mem + 63) & ~(uintptr_t)63) + shift);
    return MPI_SUCCESS;
}

/* The base address MPI gets: the program's, or the mirror's counterpart of it. */
ADSM_MPI__PRIVATE void *adsm_mpi__handed(const adsm_mpi__buf *b) {
    return b->dir ? (void *)((uintptr_t)b->mirror - (uintptr_t)b->lo) : (void *)b->base;
}

/* Copies the data from shared memory into the mirror, a cluster of runs at a time. */
ADSM_MPI__PRIVATE int adsm_mpi__fill(adsm_mpi__buf *b, const char *fn) {
    adsm_mpi__run *owned, *r = adsm_mpi__sorted(b->runs.r, b->runs.n, &owned);
    if (!r) return adsm_mpi__fail(MPI_ERR_NO_MEM, fn, "out of memory");
    int rc = MPI_SUCCESS;
    for (size_t i = 0, j; i < b->runs.n && rc == MPI_SUCCESS; i = j) {
        MPI_Aint from = r[i].off, to;
        j = adsm_mpi__cluster(r, b->runs.n, i, &to);
        if (adsm_memcpy(b->mirror + (from - b->lo), (const void *)(b->base + (uintptr_t)from), (size_t)(to - from)) !=
            ADSM_OK)
            rc = adsm_mpi__fail(MPI_ERR_OTHER, fn, "copying the data to send out of shared memory: %s",
                                adsm_last_error());
        else ADSM_MPI__ADD(bytes_out, to - from);
    }
    free(owned);
    return rc;
}

/* Copies sorted runs from the mirror into the program's buffer: a lone run with adsm_memcpy,
 * a cluster by CPU stores after adsm_touch (bytes between runs keep their values). */
ADSM_MPI__PRIVATE int adsm_mpi__store(adsm_mpi__buf *b, const adsm_mpi__run *r, size_t n, const char *fn) {
    for (size_t i = 0, j; i < n; i = j) {
        MPI_Aint end;
        j = adsm_mpi__cluster(r, n, i, &end);
        void *at = (void *)(b->base + (uintptr_t)r[i].off);
        const unsigned char *from = b->mirror + (r[i].off - b->lo);
        if (j == i + 1) {
            if (adsm_memcpy(at, from, (size_t)r[i].len) != ADSM_OK)
                return adsm_mpi__fail(MPI_ERR_OTHER, fn, "copying the received data into shared memory: %s",
                                      adsm_last_error());
            ADSM_MPI__ADD(bytes_in, r[i].len);
            continue;
        }
        if (adsm_touch(at, (size_t)(end - r[i].off), 1) != ADSM_OK)
            return adsm_mpi__fail(MPI_ERR_OTHER, fn, "making the receive buffer writable: %s", adsm_last_error());
        for (size_t k = i; k < j; k++) {
            memcpy((void *)(b->base + (uintptr_t)r[k].off), b->mirror + (r[k].off - b->lo), (size_t)r[k].len);
            ADSM_MPI__ADD(bytes_in, r[k].len);
        }
    }
    return MPI_SUCCESS;
}

/* Looks at a buffer of n blocks. Plain memory: b->dir stays 0. Shared memory: a mirror, filled
 * now for data to send when fill is set (persistent requests fill at MPI_Start), and for data
 * received whose type was not taken apart exactly (so the bytes between come back unchanged). */
/* Whether the bytes n blocks can reach from base touch shared memory: the bounding box from each
 * type's true extent, no taking apart (a plain buffer costs a few queries, whatever its type). */
ADSM_MPI__PRIVATE int adsm_mpi__may_be_shared(uintptr_t base, const adsm_mpi__block *blocks, int n) {
    MPI_Aint lo = 0, hi = 0;
    int any = 0;
    for (int i = 0; i < n; i++) {
        if (blocks[i].type == MPI_DATATYPE_NULL || blocks[i].count <= 0) continue;
        adsm_mpi__shape s = adsm_mpi__shape_of(blocks[i].type);
        if (s.size <= 0) continue;
        MPI_Aint span = (blocks[i].count - 1) * s.extent, l = blocks[i].disp + s.tlb + (span < 0 ? span : 0),
                 h = blocks[i].disp + s.tlb + s.textent + (span > 0 ? span : 0);
        lo = any && lo < l ? lo : l;
        hi = any && hi > h ? hi : h;
        any = 1;
    }
    return any && adsm_is_shared((const void *)(base + (uintptr_t)lo), (size_t)(hi - lo));
}

ADSM_MPI__PRIVATE int adsm_mpi__prepare(adsm_mpi__buf *b, const char *fn, const void *base,
                                        const adsm_mpi__block *blocks, int n, int dir, int fill) {
    memset(b, 0, sizeof *b);
    b->base = (uintptr_t)base;
    if (n <= 0 || base == MPI_IN_PLACE) return MPI_SUCCESS;
    ADSM_MPI__ADD(calls, 1);
    if (!adsm_mpi__may_be_shared(b->base, blocks, n)) return MPI_SUCCESS; /* plain memory: MPI takes it as it is */
    MPI_Aint data = 0;
    for (int i = 0; i < n; i++) {
        if (blocks[i].type == MPI_DATATYPE_NULL || blocks[i].count <= 0) continue;
        if (adsm_mpi__type_runs(&b->runs, blocks[i].type, blocks[i].disp, blocks[i].count, 0) != 0) {
            adsm_mpi__release(b);
            return adsm_mpi__fail(MPI_ERR_NO_MEM, fn, "out of memory");
        }
    }
    for (size_t i = 0; i < b->runs.n; i++) {
        const adsm_mpi__run *r = &b->runs.r[i];
        b->lo = i == 0 || r->off < b->lo ? r->off : b->lo;
        b->hi = i == 0 || r->off + r->len > b->hi ? r->off + r->len : b->hi;
        data += r->len;
    }
    if (!b->runs.n || !adsm_is_shared((const void *)(b->base + (uintptr_t)b->lo), (size_t)(b->hi - b->lo))) {
        adsm_mpi__release(b); /* the box held shared memory between the data, not in it */
        return MPI_SUCCESS;
    }
    ADSM_MPI__ADD(mirrored, 1);
    b->dir = dir;
    int rc = adsm_mpi__mirror(b, data, fn);
    int in = fill && (dir & ADSM_MPI__IN), inexact_out = (dir & ADSM_MPI__OUT) && b->runs.inexact;
    if (rc == MPI_SUCCESS && (in || inexact_out)) rc = adsm_mpi__fill(b, fn);
    if (rc != MPI_SUCCESS) adsm_mpi__release(b);
    return rc;
}

ADSM_MPI__PRIVATE int adsm_mpi__prepare1(adsm_mpi__buf *b, const char *fn, const void *base, MPI_Aint count,
                                         MPI_Datatype type, int dir) {
    adsm_mpi__block k = adsm_mpi__blk(0, count, type);
    return adsm_mpi__prepare(b, fn, base, &k, 1, dir, 1);
}

/* Bytes that arrived: the status's count for a point-to-point receive (in bytes: Open MPI and
 * MPICH keep bytes, and the datatype may be freed by now), else all. In an MPI_Count: an int
 * count is MPI_UNDEFINED past 2 GiB, which delivered nothing of a larger message. */
ADSM_MPI__PRIVATE MPI_Aint adsm_mpi__arrived(const MPI_Status *st) {
    MPI_Count c = 0;
    if (!st) return -1;
    if (PMPI_Get_elements_x(st, MPI_BYTE, &c) != MPI_SUCCESS || c == MPI_UNDEFINED) return -1;
    return (MPI_Aint)c;
}

/* Copies what arrived from the mirror into the program's buffer: the runs in the datatype's
 * order up to the bytes received, then by address. */
ADSM_MPI__PRIVATE int adsm_mpi__deliver(adsm_mpi__buf *b, const MPI_Status *st, const char *fn) {
    if (!(b->dir & ADSM_MPI__OUT)) return MPI_SUCCESS;
    MPI_Aint left = adsm_mpi__arrived(st);
    size_t n = b->runs.n;
    MPI_Aint cut = 0; /* the last run's length when a short message ends inside it */
    if (left >= 0 && !b->runs.inexact) { /* inexact runs hold more than data: all go back (the
                                            mirror was filled from the buffer, so what did not
                                            arrive goes back as it was) */
        for (n = 0; n < b->runs.n && left > 0; n++) {
            cut = left < b->runs.r[n].len ? left : 0;
            left -= b->runs.r[n].len;
        }
    }
    if (n == 0) return MPI_SUCCESS;
    MPI_Aint whole = b->runs.r[n - 1].len;
    if (cut) b->runs.r[n - 1].len = cut;
    adsm_mpi__run *owned, *r = adsm_mpi__sorted(b->runs.r, n, &owned);
    int rc = r ? adsm_mpi__store(b, r, n, fn) : adsm_mpi__fail(MPI_ERR_NO_MEM, fn, "out of memory");
    b->runs.r[n - 1].len = whole; /* a persistent request delivers again */
    free(owned);
    return rc;
}

/* Whether an error is MPI_ERR_TRUNCATE: the receive buffer holds what fit, as MPI leaves plain
 * memory, so the mirror's bytes go to the program as after a success. */
ADSM_MPI__PRIVATE int adsm_mpi__truncated(int err) {
    int cls = MPI_SUCCESS;
    if (err == MPI_SUCCESS || PMPI_Error_class(err, &cls) != MPI_SUCCESS) return 0;
    return cls == MPI_ERR_TRUNCATE;
}

/* After a blocking call: delivers what arrived (rc MPI_SUCCESS or a truncation), frees the
 * mirrors, raises an adsm failure on comm. */
ADSM_MPI__PRIVATE int adsm_mpi__finish(adsm_mpi__buf *bufs, int n, int rc, const MPI_Status *st, const char *fn,
                                       MPI_Comm comm) {
    /* a truncation says how much arrived only in a point-to-point status: a collective's mirror
     * (not filled first, where taken apart exactly) would give back bytes MPI never wrote */
    int mine = MPI_SUCCESS, arrived = rc == MPI_SUCCESS || (st && adsm_mpi__truncated(rc));
    for (int i = 0; i < n; i++) {
        if (arrived && mine == MPI_SUCCESS) mine = adsm_mpi__deliver(&bufs[i], st, fn);
        adsm_mpi__release(&bufs[i]);
    }
    return rc != MPI_SUCCESS ? rc : adsm_mpi__raise(comm, mine);
}

/* ---- the table of requests --------------------------------------------------------------- */
/* A request whose buffers are mirrored. req is the handle the program holds (while detached,
 * after MPI_Request_free, only adsm_mpi holds it). */
struct adsm_mpi__pending {
    MPI_Request req;
    int persistent, active, delivered, detached;
    int by_status; /* a point-to-point receive: the status says how much arrived */
    adsm_mpi__buf bufs[2];
};

ADSM_MPI__PRIVATE uint64_t adsm_mpi__key(MPI_Request r) {
    uint64_t k = 0;
    memcpy(&k, &r, sizeof r < sizeof k ? sizeof r : sizeof k);
    k ^= k >> 33; /* handles are pointers (Open MPI) or small integers (MPICH): spread both */
    k *= 0xff51afd7ed558ccdull;
    return k ^ (k >> 33);
}

ADSM_MPI__PRIVATE int adsm_mpi__same(MPI_Request a, MPI_Request b) { return memcmp(&a, &b, sizeof a) == 0; }

/* The slot holding req, or the free slot it would go in. Lock held; cap > 0. */
ADSM_MPI__PRIVATE size_t adsm_mpi__slot(MPI_Request req, int for_insert) {
    size_t mask = adsm_mpi__st.cap - 1, i = (size_t)adsm_mpi__key(req) & mask;
    for (;; i = (i + 1) & mask) {
        adsm_mpi__pending *p = adsm_mpi__st.slots[i];
        if (!p || (for_insert && p == ADSM_MPI__TOMB)) return i;
        if (p != ADSM_MPI__TOMB && adsm_mpi__same(p->req, req)) return i;
    }
}

/* Twice the live entries, tombstones dropped. Lock held. */
ADSM_MPI__PRIVATE int adsm_mpi__grow(void) {
    size_t old = adsm_mpi__st.cap, cap = 64;
    while (cap < 4 * (adsm_mpi__st.live + 1)) cap *= 2;
    adsm_mpi__pending **slots = (adsm_mpi__pending **)calloc(cap, sizeof *slots), **was = adsm_mpi__st.slots;
    if (!slots) return -1;
    adsm_mpi__st.slots = slots;
    adsm_mpi__st.cap = cap;
    adsm_mpi__st.used = adsm_mpi__st.live;
    for (size_t i = 0; i < old; i++)
        if (was[i] && was[i] != ADSM_MPI__TOMB) slots[adsm_mpi__slot(was[i]->req, 1)] = was[i];
    free(was);
    return 0;
}

/* 0 inserted, -1 out of memory, 1 the handle is in the table already: one MPI gives every
 * request that is complete from the start (Open MPI: to and from MPI_PROC_NULL). */
ADSM_MPI__PRIVATE int adsm_mpi__insert(adsm_mpi__pending *p) {
    pthread_mutex_lock(&adsm_mpi__st.mutex);
    int rc = 0;
    if (adsm_mpi__st.cap) {
        adsm_mpi__pending *q = adsm_mpi__st.slots[adsm_mpi__slot(p->req, 0)];
        rc = q && q != ADSM_MPI__TOMB;
    }
    if (rc == 0 && 2 * (adsm_mpi__st.used + 1) > adsm_mpi__st.cap) rc = adsm_mpi__grow();
    if (rc == 0) {
        size_t i = adsm_mpi__slot(p->req, 1);
        if (!adsm_mpi__st.slots[i]) adsm_mpi__st.used++;
        adsm_mpi__st.slots[i] = p;
        __atomic_store_n(&adsm_mpi__st.live, adsm_mpi__st.live + 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&adsm_mpi__st.mutex);
    return rc;
}

/* Puts back an entry a completion call took out (below): its slot, or another free one, is still
 * there (the table keeps twice its entries' room), so this cannot fail. */
ADSM_MPI__PRIVATE void adsm_mpi__put_back(adsm_mpi__pending *p) {
    pthread_mutex_lock(&adsm_mpi__st.mutex);
    size_t i = adsm_mpi__slot(p->req, 1);
    if (!adsm_mpi__st.slots[i]) adsm_mpi__st.used++;
    adsm_mpi__st.slots[i] = p;
    __atomic_store_n(&adsm_mpi__st.live, adsm_mpi__st.live + 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&adsm_mpi__st.mutex);
}

/* The entry of req, taken out of the table when take is set. */
ADSM_MPI__PRIVATE adsm_mpi__pending *adsm_mpi__lookup(MPI_Request req, int take) {
    adsm_mpi__pending *p = NULL;
    if (ADSM_MPI__LOAD(adsm_mpi__st.live) == 0 || req == MPI_REQUEST_NULL) return NULL;
    pthread_mutex_lock(&adsm_mpi__st.mutex);
    if (adsm_mpi__st.cap) {
        size_t i = adsm_mpi__slot(req, 0);
        p = adsm_mpi__st.slots[i];
        if (p && take) {
            adsm_mpi__st.slots[i] = ADSM_MPI__TOMB;
            __atomic_store_n(&adsm_mpi__st.live, adsm_mpi__st.live - 1, __ATOMIC_RELAXED);
        }
    }
    pthread_mutex_unlock(&adsm_mpi__st.mutex);
    return p;
}

ADSM_MPI__PRIVATE void adsm_mpi__discard(adsm_mpi__pending *p) {
    adsm_mpi__release(&p->bufs[0]);
    adsm_mpi__release(&p->bufs[1]);
    free(p);
    ADSM_MPI__ADD(pending, (uint64_t)-1);
}

/* A request whose handle MPI shares among requests complete from the start: what arrived (nothing,
 * from MPI_PROC_NULL) is delivered now, the mirrors go, and the program's later Wait or Test on
 * the handle passes straight to MPI. */
ADSM_MPI__PRIVATE int adsm_mpi__born_complete(MPI_Request *req, adsm_mpi__buf *a, adsm_mpi__buf *b, int by_status,
                                              const char *fn, MPI_Comm comm) {
    MPI_Status st;
    int flag = 0, rc;
    PMPI_Request_get_status(*req, &flag, &st);
    if (!flag) PMPI_Wait(req, &st); /* not so after all: the mirrors must outlive the transfer */
    rc = adsm_mpi__deliver(a, by_status ? &st : NULL, fn);
    if (rc == MPI_SUCCESS && b) rc = adsm_mpi__deliver(b, NULL, fn);
    adsm_mpi__release(a);
    if (b) adsm_mpi__release(b);
    return adsm_mpi__raise(comm, rc);
}

/* A request just made on mirrored buffers: remembered until it completes. Plain buffers: no
 * entry. On failure the request is waited for, so no transfer outlives its mirror. */
ADSM_MPI__PRIVATE int adsm_mpi__track(MPI_Request *req, adsm_mpi__buf *a, adsm_mpi__buf *b, int persistent,
                                      int by_status, const char *fn, MPI_Comm comm) {
    if (!a->dir && (!b || !b->dir)) return MPI_SUCCESS;
    adsm_mpi__pending *p = (adsm_mpi__pending *)calloc(1, sizeof *p);
    if (p) {
        p->req = *req;
        p->persistent = persistent;
        p->active = !persistent;
        p->by_status = by_status;
        p->bufs[0] = *a;
        if (b) p->bufs[1] = *b;
        ADSM_MPI__ADD(pending, 1);
        int in = adsm_mpi__insert(p);
        if (in == 0) return MPI_SUCCESS;
        memset(p->bufs, 0, sizeof p->bufs); /* the caller's copies still own the mirrors */
        adsm_mpi__discard(p);
        if (in > 0 && !persistent) return adsm_mpi__born_complete(req, a, b, by_status, fn, comm);
    }
    if (!persistent) PMPI_Wait(req, MPI_STATUS_IGNORE);
    else PMPI_Request_free(req);
    adsm_mpi__release(a);
    if (b) adsm_mpi__release(b);
    return adsm_mpi__raise(comm, adsm_mpi__fail(MPI_ERR_NO_MEM, fn, "out of memory for the request's record"));
}

/* The request p stood for has completed with status st (NULL: a collective). Delivers what
 * arrived unless it was cancelled or already delivered; a persistent request becomes inactive
 * and keeps its mirrors, any other goes. Returns an MPI error class. */
ADSM_MPI__PRIVATE int adsm_mpi__completed(adsm_mpi__pending *p, const MPI_Status *st, const char *fn) {
    int cancelled = 0, rc = MPI_SUCCESS;
    if (st && p->by_status) PMPI_Test_cancelled(st, &cancelled);
    if (p->active && !cancelled && !p->delivered) {
        rc = adsm_mpi__deliver(&p->bufs[0], p->by_status ? st : NULL, fn);
        if (rc == MPI_SUCCESS) rc = adsm_mpi__deliver(&p->bufs[1], NULL, fn);
    }
    p->active = p->delivered = 0;
    if (!p->persistent || p->detached) adsm_mpi__discard(p);
    return rc;
}

/* ---- requests the program freed while active ------------------------------------------------ */
ADSM_MPI__PRIVATE void adsm_mpi__detach(adsm_mpi__pending *p) {
    p->detached = 1;
    pthread_mutex_lock(&adsm_mpi__st.mutex);
    if (adsm_mpi__st.ndetached == adsm_mpi__st.detached_cap) {
        size_t cap = adsm_mpi__st.detached_cap ? 2 * adsm_mpi__st.detached_cap : 8;
        adsm_mpi__pending **d = (adsm_mpi__pending **)realloc(adsm_mpi__st.detached, cap * sizeof *d);
        if (d) {
            adsm_mpi__st.detached = d;
            adsm_mpi__st.detached_cap = cap;
        }
    }
    int kept = adsm_mpi__st.ndetached < adsm_mpi__st.detached_cap;
    if (kept) adsm_mpi__st.detached[__atomic_fetch_add(&adsm_mpi__st.ndetached, 1, __ATOMIC_RELAXED)] = p;
    pthread_mutex_unlock(&adsm_mpi__st.mutex);
    if (!kept) { /* no room to remember it: finish it now */
        MPI_Status st;
        PMPI_Wait(&p->req, &st);
        adsm_mpi__completed(p, &st, "MPI_Request_free");
    }
}

/* Whether the request of a detached entry p completed, with its status in *st (wait: until it
 * does). MPI_Request_get_status, not Test or Wait: those hand an error of the request (a
 * truncation) to its communicator's error handler, which plain memory's freed requests never
 * reach, and free the request themselves (a persistent one too, in Open MPI, after an error).
 * Where even that call fails, the entry is kept out of every list and its mirrors are never given
 * back, since MPI may still write them: a leak, said once, rather than freed memory written. */
ADSM_MPI__PRIVATE int adsm_mpi__detached_done(adsm_mpi__pending *p, int wait, MPI_Status *st) {
    for (;;) {
        int flag = 0;
        if (PMPI_Request_get_status(p->req, &flag, st) != MPI_SUCCESS) {
            adsm_mpi__fail(MPI_SUCCESS, "MPI_Request_free", "the state of a freed request on shared memory "
                           "cannot be had; its mirror is kept for ever");
            return -1;
        }
        if (flag || !wait) return flag;
    }
}

/* Completes the detached requests that are done (wait: all of them). Each is taken off the list
 * while it is tested, so two threads never finish the same one. */
ADSM_MPI__PRIVATE void adsm_mpi__poll_detached(int wait) {
    if (ADSM_MPI__LOAD(adsm_mpi__st.ndetached) == 0) return;
    for (;;) {
        pthread_mutex_lock(&adsm_mpi__st.mutex);
        size_t n = adsm_mpi__st.ndetached;
        adsm_mpi__pending **list = adsm_mpi__st.detached;
        adsm_mpi__st.detached = NULL;
        adsm_mpi__st.detached_cap = 0;
        __atomic_store_n(&adsm_mpi__st.ndetached, 0, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&adsm_mpi__st.mutex);
        if (n == 0) break;
        for (size_t i = 0; i < n; i++) {
            adsm_mpi__pending *p = list[i];
            MPI_Status st;
            int done = adsm_mpi__detached_done(p, wait, &st);
            if (done == 0) adsm_mpi__detach(p); /* not yet: back on the list */
            if (done <= 0) continue;
            PMPI_Request_free(&p->req); /* complete: MPI lets it go now */
            adsm_mpi__completed(p, &st, "MPI_Request_free");
        }
        free(list);
        if (!wait) break;
    }
}

/* ---- completion calls ------------------------------------------------------------------------ */
/* The entries of an array of requests, looked up before PMPI overwrites completed handles. */
typedef struct adsm_mpi__snap {
    adsm_mpi__pending **p, *small[16];
    MPI_Status *st, own_small[16];
    int any;
} adsm_mpi__snap;

ADSM_MPI__PRIVATE void adsm_mpi__snap_free(adsm_mpi__snap *s) {
    if (s->p != s->small) free(s->p);
    if (s->st && s->st != s->own_small) free(s->st);
}

/* Takes the entries of reqs[0..n) out of the table (any: whether one has an entry); *statuses is
 * replaced by adsm_mpi's own array when the program ignores them and adsm_mpi needs them. 0 or -1.
 * Out of the table while MPI may complete them: once MPI frees a completed request its handle may
 * come back at once for a request another thread makes, whose entry must not meet this one's
 * (the two threads would both finish it). What did not complete is put back
 * (adsm_mpi__snap_put_back). */
ADSM_MPI__PRIVATE int adsm_mpi__snap_take(adsm_mpi__snap *s, int n, const MPI_Request *reqs, MPI_Status **statuses) {
    memset(s, 0, sizeof *s);
    if (n <= 0 || ADSM_MPI__LOAD(adsm_mpi__st.live) == 0) return 0;
    s->p = n <= 16 ? s->small : (adsm_mpi__pending **)calloc((size_t)n, sizeof *s->p);
    if (!s->p) return -1;
    for (int i = 0; i < n; i++) s->any |= (s->p[i] = adsm_mpi__lookup(reqs[i], 1)) != NULL;
    if (s->any && *statuses == MPI_STATUSES_IGNORE) {
        s->st = n <= 16 ? s->own_small : (MPI_Status *)malloc((size_t)n * sizeof *s->st);
        if (!s->st) { /* nothing happened: the entries go back */
            for (int i = 0; i < n; i++)
                if (s->p[i]) adsm_mpi__put_back(s->p[i]);
            adsm_mpi__snap_free(s);
            return -1;
        }
        *statuses = s->st;
    }
    return 0;
}

/* Entry p, taken out of the table, whose request completed with status st: a persistent request
 * keeps its entry (inactive) unless the program freed it. */
ADSM_MPI__PRIVATE int adsm_mpi__request_done(adsm_mpi__pending *p, const MPI_Status *st, const char *fn) {
    int keep = p->persistent && !p->detached;
    int rc = adsm_mpi__completed(p, st, fn);
    if (keep) adsm_mpi__put_back(p);
    return rc;
}

/* Entry p, taken out of the table, whose request MPI completed with error err. A truncated
 * receive delivers what fit (st, when known, says how much); other errors deliver nothing. gone:
 * MPI freed the request (its handle came back MPI_REQUEST_NULL; Open MPI does so after an error
 * to a persistent request too) and may hand the handle out again at once, so the entry must not
 * stay, or a later request given the same handle would meet it; else a persistent request stays,
 * inactive, as after a success. */
ADSM_MPI__PRIVATE void adsm_mpi__failed_done(adsm_mpi__pending *p, const MPI_Status *st, int err, int gone,
                                             const char *fn) {
    if (!(p->by_status && st && adsm_mpi__truncated(err))) p->active = 0; /* collectives: as adsm_mpi__finish */
    int kept = p->persistent && !p->detached; /* adsm_mpi__completed keeps these */
    (void)adsm_mpi__completed(p, st, fn);
    if (kept && gone) adsm_mpi__discard(p);
    else if (kept) adsm_mpi__put_back(p);
}

/* After a completion call on a snapshot that returned rc: the entries whose requests MPI
 * completed with an error. Request i's status is statuses[i], or, where indices is given
 * (Waitany, Waitsome), statuses[j] for the j with indices[j] == i; none where the call reported
 * none. A handle MPI_REQUEST_NULL now was freed by MPI; a persistent request still there
 * completed only where its status says so (a Waitall's MPI_ERR_IN_STATUS, an index given). */
ADSM_MPI__PRIVATE void adsm_mpi__snap_failed(adsm_mpi__snap *s, int n, const MPI_Request reqs[], int rc,
                                             const MPI_Status *statuses, const int *indices, int nindices,
                                             const char *fn) {
    if (rc == MPI_SUCCESS || !s->any) return;
    for (int i = 0; i < n; i++) {
        adsm_mpi__pending *p = s->p[i];
        int gone = reqs[i] == MPI_REQUEST_NULL;
        if (!p || (!gone && !p->persistent)) continue;
        const MPI_Status *st = NULL;
        if (statuses && !indices) st = &statuses[i];
        for (int j = 0; indices && j < nindices; j++)
            if (indices[j] == i) st = &statuses[j];
        int err = st && rc == MPI_ERR_IN_STATUS ? st->MPI_ERROR : rc;
        if (!gone && (!st || (!indices && rc != MPI_ERR_IN_STATUS) || err == MPI_SUCCESS || err == MPI_ERR_PENDING))
            continue; /* not known to have completed: back into the table */
        s->p[i] = NULL;
        adsm_mpi__failed_done(p, st, err, gone, fn);
    }
}

/* Request i of a snapshot completed with status st. */
ADSM_MPI__PRIVATE int adsm_mpi__snap_done(adsm_mpi__snap *s, int i, const MPI_Status *st, const char *fn) {
    adsm_mpi__pending *p = s->p ? s->p[i] : NULL;
    if (!p) return MPI_SUCCESS;
    s->p[i] = NULL;
    return adsm_mpi__request_done(p, st, fn);
}

/* The entries of a snapshot whose requests did not complete go back into the table. */
ADSM_MPI__PRIVATE void adsm_mpi__snap_put_back(adsm_mpi__snap *s, int n) {
    for (int i = 0; s->any && i < n; i++)
        if (s->p[i]) {
            adsm_mpi__put_back(s->p[i]);
            s->p[i] = NULL;
        }
}

/* Whether request i of a Waitall/Testall that returned rc completed (MPI_ERR_IN_STATUS: its
 * status says), and successfully. */
ADSM_MPI__PRIVATE int adsm_mpi__all_done(int rc, const MPI_Status *st) {
    return rc == MPI_SUCCESS || (rc == MPI_ERR_IN_STATUS && st->MPI_ERROR == MPI_SUCCESS);
}

ADSM_MPI__PRIVATE int adsm_mpi__wait_or_test(MPI_Request *req, int *flag, MPI_Status *status, const char *fn) {
    adsm_mpi__poll_detached(0);
    adsm_mpi__pending *p = req ? adsm_mpi__lookup(*req, 1) : NULL; /* out while MPI may complete it */
    if (!p) return flag ? PMPI_Test(req, flag, status) : PMPI_Wait(req, status);
    MPI_Status own, *st = status == MPI_STATUS_IGNORE ? &own : status;
    int done = 1, rc = flag ? PMPI_Test(req, &done, st) : PMPI_Wait(req, st);
    if (flag) *flag = done;
    /* completed with an error: freed by MPI, or a persistent request made inactive */
    if (rc != MPI_SUCCESS && (*req == MPI_REQUEST_NULL || (p->persistent && done))) {
        adsm_mpi__failed_done(p, st, rc, *req == MPI_REQUEST_NULL, fn);
        return rc;
    }
    if (rc != MPI_SUCCESS || !done) {
        adsm_mpi__put_back(p);
        return rc;
    }
    return adsm_mpi__raise(MPI_COMM_WORLD, adsm_mpi__request_done(p, st, fn));
}

int MPI_Wait(MPI_Request *request, MPI_Status *status) {
    return adsm_mpi__wait_or_test(request, NULL, status, "MPI_Wait");
}

int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status) {
    return adsm_mpi__wait_or_test(request, flag, status, "MPI_Test");
}

/* Waitall and Testall (flag NULL: wait). */
ADSM_MPI__PRIVATE int adsm_mpi__all(int n, MPI_Request reqs[], int *flag, MPI_Status *statuses, const char *fn) {
    adsm_mpi__poll_detached(0);
    adsm_mpi__snap s;
    MPI_Status *st = statuses;
    if (adsm_mpi__snap_take(&s, n, reqs, &st) != 0)
        return adsm_mpi__raise(MPI_COMM_WORLD, adsm_mpi__fail(MPI_ERR_NO_MEM, fn, "out of memory"));
    int done = 1, rc = flag ? PMPI_Testall(n, reqs, &done, st) : PMPI_Waitall(n, reqs, st);
    if (flag) *flag = done;
    int mine = MPI_SUCCESS;
    for (int i = 0; s.any && done && i < n; i++)
        if (s.p[i] && adsm_mpi__all_done(rc, &st[i])) {
            int r = adsm_mpi__snap_done(&s, i, &st[i], fn);
            if (mine == MPI_SUCCESS) mine = r;
        }
    adsm_mpi__snap_failed(&s, n, reqs, rc, st, NULL, 0, fn);
    adsm_mpi__snap_put_back(&s, n);
    adsm_mpi__snap_free(&s);
    return rc != MPI_SUCCESS ? rc : adsm_mpi__raise(MPI_COMM_WORLD, mine);
}

int MPI_Waitall(int count, MPI_Request array_of_requests[], MPI_Status *array_of_statuses) {
    return adsm_mpi__all(count, array_of_requests, NULL, array_of_statuses, "MPI_Waitall");
}

int MPI_Testall(int count, MPI_Request array_of_requests[], int *flag, MPI_Status array_of_statuses[]) {
    return adsm_mpi__all(count, array_of_requests, flag, array_of_statuses, "MPI_Testall");
}

/* Waitany and Testany (flag NULL: wait). */
ADSM_MPI__PRIVATE int adsm_mpi__any(int n, MPI_Request reqs[], int *index, int *flag, MPI_Status *status,
                                    const char *fn) {
    adsm_mpi__poll_detached(0);
    adsm_mpi__snap s;
    MPI_Status *ignored = MPI_STATUSES_IGNORE; /* Waitany has one status: taken care of below */
    if (adsm_mpi__snap_take(&s, n, reqs, &ignored) != 0)
        return adsm_mpi__raise(MPI_COMM_WORLD, adsm_mpi__fail(MPI_ERR_NO_MEM, fn, "out of memory"));
    MPI_Status own, *st = status == MPI_STATUS_IGNORE ? &own : status;
    int done = 1, rc = flag ? PMPI_Testany(n, reqs, index, &done, st) : PMPI_Waitany(n, reqs, index, st);
    if (flag) *flag = done;
    int mine = MPI_SUCCESS;
    if (rc == MPI_SUCCESS && s.any && done && *index != MPI_UNDEFINED) mine = adsm_mpi__snap_done(&s, *index, st, fn);
    adsm_mpi__snap_failed(&s, n, reqs, rc, st, index, *index != MPI_UNDEFINED, fn);
    adsm_mpi__snap_put_back(&s, n);
    adsm_mpi__snap_free(&s);
    return rc != MPI_SUCCESS ? rc : adsm_mpi__raise(MPI_COMM_WORLD, mine);
}

int MPI_Waitany(int count, MPI_Request array_of_requests[], int *index, MPI_Status *status) {
    return adsm_mpi__any(count, array_of_requests, index, NULL, status, "MPI_Waitany");
}

int MPI_Testany(int count, MPI_Request array_of_requests[], int *index, int *flag, MPI_Status *status) {
    return adsm_mpi__any(count, array_of_requests, index, flag, status, "MPI_Testany");
}

/* Waitsome and Testsome. */
ADSM_MPI__PRIVATE int adsm_mpi__some(int n, MPI_Request reqs[], int *outcount, int indices[], MPI_Status *statuses,
                                     int test, const char *fn) {
    adsm_mpi__poll_detached(0);
    adsm_mpi__snap s;
    MPI_Status *st = statuses;
    if (adsm_mpi__snap_take(&s, n, reqs, &st) != 0)
        return adsm_mpi__raise(MPI_COMM_WORLD, adsm_mpi__fail(MPI_ERR_NO_MEM, fn, "out of memory"));
    int rc = test ? PMPI_Testsome(n, reqs, outcount, indices, st) : PMPI_Waitsome(n, reqs, outcount, indices, st);
    int mine = MPI_SUCCESS;
    for (int j = 0; s.any && (rc == MPI_SUCCESS || rc == MPI_ERR_IN_STATUS) && *outcount != MPI_UNDEFINED &&
                    j < *outcount;
         j++)
        if (adsm_mpi__all_done(rc, &st[j])) {
            int r = adsm_mpi__snap_done(&s, indices[j], &st[j], fn);
            if (mine == MPI_SUCCESS) mine = r;
        }
    adsm_mpi__snap_failed(&s, n, reqs, rc, st, indices, *outcount == MPI_UNDEFINED ? 0 : *outcount, fn);
    adsm_mpi__snap_put_back(&s, n);
    adsm_mpi__snap_free(&s);
    return rc != MPI_SUCCESS ? rc : adsm_mpi__raise(MPI_COMM_WORLD, mine);
}

int MPI_Waitsome(int incount, MPI_Request array_of_requests[], int *outcount, int array_of_indices[],
                 MPI_Status array_of_statuses[]) {
    return adsm_mpi__some(incount, array_of_requests, outcount, array_of_indices, array_of_statuses, 0,
                          "MPI_Waitsome");
}

int MPI_Testsome(int incount, MPI_Request array_of_requests[], int *outcount, int array_of_indices[],
                 MPI_Status array_of_statuses[]) {
    return adsm_mpi__some(incount, array_of_requests, outcount, array_of_indices, array_of_statuses, 1,
                          "MPI_Testsome");
}

/* Completion without freeing the request: the bytes are delivered now (the program may read
 * them), and the later Wait or Test that frees the request does not deliver them again. */
int MPI_Request_get_status(MPI_Request request, int *flag, MPI_Status *status) {
    adsm_mpi__pending *p = adsm_mpi__lookup(request, 0);
    if (!p) return PMPI_Request_get_status(request, flag, status);
    MPI_Status own, *st = status == MPI_STATUS_IGNORE ? &own : status;
    int rc = PMPI_Request_get_status(request, flag, st), mine = MPI_SUCCESS, cancelled = 0;
    if (rc != MPI_SUCCESS || !*flag || !p->active || p->delivered) return rc;
    if (p->by_status) PMPI_Test_cancelled(st, &cancelled);
    if (!cancelled) {
        mine = adsm_mpi__deliver(&p->bufs[0], p->by_status ? st : NULL, "MPI_Request_get_status");
        if (mine == MPI_SUCCESS) mine = adsm_mpi__deliver(&p->bufs[1], NULL, "MPI_Request_get_status");
    }
    p->delivered = 1;
    return adsm_mpi__raise(MPI_COMM_WORLD, mine);
}

int MPI_Request_free(MPI_Request *request) {
    adsm_mpi__pending *p = request ? adsm_mpi__lookup(*request, 1) : NULL;
    if (!p) return PMPI_Request_free(request);
    if (p->persistent && !p->active) { /* nothing in flight: the mirrors can go */
        int rc = PMPI_Request_free(request);
        adsm_mpi__discard(p);
        return rc;
    }
    adsm_mpi__detach(p); /* in flight: adsm_mpi completes it later, the program's handle is gone */
    *request = MPI_REQUEST_NULL;
    return MPI_SUCCESS;
}

/* ---- point to point ---------------------------------------------------------------------- */
typedef int (*adsm_mpi__send_fn)(const void *, int, MPI_Datatype, int, int, MPI_Comm);
typedef int (*adsm_mpi__isend_fn)(const void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);

ADSM_MPI__PRIVATE int adsm_mpi__send(adsm_mpi__send_fn fn, const char *name, const void *buf, int count,
                                     MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
    adsm_mpi__poll_detached(0);
    if (dest == MPI_PROC_NULL) return fn(buf, count, type, dest, tag, comm); /* moves nothing */
    adsm_mpi__buf b;
    int rc = adsm_mpi__prepare1(&b, name, buf, count, type, ADSM_MPI__IN);
    if (rc != MPI_SUCCESS) return adsm_mpi__raise(comm, rc);
    rc = fn(adsm_mpi__handed(&b), count, type, dest, tag, comm);
    return adsm_mpi__finish(&b, 1, rc, NULL, name, comm);
}

int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm) {
    return adsm_mpi__send(PMPI_Send, "MPI_Send", buf, count, datatype, dest, tag, comm);
}

int MPI_Ssend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm) {
    return adsm_mpi__send(PMPI_Ssend, "MPI_Ssend", buf, count, datatype, dest, tag, comm);
}

int MPI_Rsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm) {
    return adsm_mpi__send(PMPI_Rsend, "MPI_Rsend", buf, count, datatype, dest, tag, comm);
}

int MPI_Bsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm) {
    return adsm_mpi__send(PMPI_Bsend, "MPI_Bsend", buf, count, datatype, dest, tag, comm);
}

/* Nonblocking and persistent sends (persistent: the mirror is filled at MPI_Start). */
ADSM_MPI__PRIVATE int adsm_mpi__isend(adsm_mpi__isend_fn fn, const char *name, int persistent, const void *buf,
                                      int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                                      MPI_Request *req) {
    adsm_mpi__poll_detached(0);
    if (dest == MPI_PROC_NULL) return fn(buf, count, type, dest, tag, comm, req); /* moves nothing */
    adsm_mpi__buf b;
    adsm_mpi__block k = adsm_mpi__blk(0, count, type);
    int rc = adsm_mpi__prepare(&b, name, buf, &k, 1, ADSM_MPI__IN, !persistent);
    if (rc != MPI_SUCCESS) return adsm_mpi__raise(comm, rc);
    rc = fn(adsm_mpi__handed(&b), count, type, dest, tag, comm, req);
    if (rc != MPI_SUCCESS) {
        adsm_mpi__release(&b);
        return rc;
    }
    return adsm_mpi__track(req, &b, NULL, persistent, 0, name, comm);
}

int MPI_Isend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
              MPI_Request *request) {
    return adsm_mpi__isend(PMPI_Isend, "MPI_Isend", 0, buf, count, datatype, dest, tag, comm, request);
}

int MPI_Issend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
               MPI_Request *request) {
    return adsm_mpi__isend(PMPI_Issend, "MPI_Issend", 0, buf, count, datatype, dest, tag, comm, request);
}

int MPI_Irsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
               MPI_Request *request) {
    return adsm_mpi__isend(PMPI_Irsend, "MPI_Irsend", 0, buf, count, datatype, dest, tag, comm, request);
}

int MPI_Ibsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
               MPI_Request *request) {
    return adsm_mpi__isend(PMPI_Ibsend, "MPI_Ibsend", 0, buf, count, datatype, dest, tag, comm, request);
}

int MPI_Send_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                  MPI_Request *request) {
    return adsm_mpi__isend(PMPI_Send_init, "MPI_Send_init", 1, buf, count, datatype, dest, tag, comm, request);
}

int MPI_Ssend_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                   MPI_Request *request) {
    return adsm_mpi__isend(PMPI_Ssend_init, "MPI_Ssend_init", 1, buf, count, datatype, dest, tag, comm, request);
}

int MPI_Rsend_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                   MPI_Request *request) {
    return adsm_mpi__isend(PMPI_Rsend_init, "MPI_Rsend_init", 1, buf, count, datatype, dest, tag, comm, request);
}

int MPI_Bsend_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                   MPI_Request *request) {
    return adsm_mpi__isend(PMPI_Bsend_init, "MPI_Bsend_init", 1, buf, count, datatype, dest, tag, comm, request);
}

int MPI_Recv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Status *status) {
    adsm_mpi__poll_detached(0);
    if (source == MPI_PROC_NULL) return PMPI_Recv(buf, count, datatype, source, tag, comm, status);
    adsm_mpi__buf b;
    int rc = adsm_mpi__prepare1(&b, "MPI_Recv", buf, count, datatype, ADSM_MPI__OUT);
    if (rc != MPI_SUCCESS) return adsm_mpi__raise(comm, rc);
    MPI_Status own, *st = status == MPI_STATUS_IGNORE ? &own : status;
    rc = PMPI_Recv(adsm_mpi__handed(&b), count, datatype, source, tag, comm, st);
    return adsm_mpi__finish(&b, 1, rc, st, "MPI_Recv", comm);
}

int MPI_Mrecv(void *buf, int count, MPI_Datatype type, MPI_Message *message, MPI_Status *status) {
    adsm_mpi__poll_detached(0);
    adsm_mpi__buf b;
    int rc = adsm_mpi__prepare1(&b, "MPI_Mrecv", buf, count, type, ADSM_MPI__OUT);
    if (rc != MPI_SUCCESS) return adsm_mpi__raise(MPI_COMM_WORLD, rc);
    MPI_Status own, *st = status == MPI_STATUS_IGNORE ? &own : status;
    rc = PMPI_Mrecv(adsm_mpi__handed(&b), count, type, message, st);
    return adsm_mpi__finish(&b, 1, rc, st, "MPI_Mrecv", MPI_COMM_WORLD);
}

/* Nonblocking and persistent receives (message: MPI_Imrecv's matched message, else NULL). */
ADSM_MPI__PRIVATE int adsm_mpi__irecv(const char *name, int persistent, void *buf, int count, MPI_Datatype type,
                                      int source, int tag, MPI_Comm comm, MPI_Message *message, MPI_Request *req) {
    adsm_mpi__poll_detached(0);
    adsm_mpi__buf b;
    int none = !message && source == MPI_PROC_NULL; /* nothing arrives: no mirror */
    int rc = adsm_mpi__prepare1(&b, name, buf, none ? 0 : count, type, ADSM_MPI__OUT);
    if (rc != MPI_SUCCESS) return adsm_mpi__raise(comm, rc);
    void *h = adsm_mpi__handed(&b);
    rc = message ? PMPI_Imrecv(h, count, type, message, req)
         : persistent ? PMPI_Recv_init(h, count, type, source, tag, comm, req)
                      : PMPI_Irecv(h, count, type, source, tag, comm, req);
    if (rc != MPI_SUCCESS) {
        adsm_mpi__release(&b);
        return rc;
    }
    return adsm_mpi__track(req, &b, NULL, persistent, 1, name, comm);
}

int MPI_Irecv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Request *request) {
    return adsm_mpi__irecv("MPI_Irecv", 0, buf, count, datatype, source, tag, comm, NULL, request);
}

int MPI_Recv_init(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                  MPI_Request *request) {
    return adsm_mpi__irecv("MPI_Recv_init", 1, buf, count, datatype, source, tag, comm, NULL, request);
}

int MPI_Imrecv(void *buf, int count, MPI_Datatype type, MPI_Message *message, MPI_Request *request) {
    return adsm_mpi__irecv("MPI_Imrecv", 0, buf, count, type, 0, 0, MPI_COMM_WORLD, message, request);
}

/* A persistent request starts: the data to send is copied into its mirror now. */
ADSM_MPI__PRIVATE int adsm_mpi__start_one(MPI_Request req) {
    adsm_mpi__pending *p = adsm_mpi__lookup(req, 0);
    if (!p) return MPI_SUCCESS;
    adsm_mpi__buf *b = &p->bufs[0]; /* a receive's mirror is filled only for a type taken whole */
    int rc = (b->dir & ADSM_MPI__IN) || b->runs.inexact ? adsm_mpi__fill(b, "MPI_Start") : MPI_SUCCESS;
    p->active = rc == MPI_SUCCESS;
    p->delivered = 0;
    return rc;
}

/* A start that failed (adsm_mpi's fill, or MPI's): the requests stay inactive, so that no
 * completion delivers a mirror MPI never wrote over what the program wrote meanwhile, and a free
 * lets them go at once. Open MPI starts none of an array it refuses. */
ADSM_MPI__PRIVATE void adsm_mpi__unstart(const MPI_Request *reqs, int n) {
    for (int i = 0; i < n; i++) {
        adsm_mpi__pending *p = adsm_mpi__lookup(reqs[i], 0);
        if (p) p->active = 0;
    }
}

int MPI_Start(MPI_Request *request) {
    adsm_mpi__poll_detached(0);
    int rc = request ? adsm_mpi__start_one(*request) : MPI_SUCCESS;
    if (rc != MPI_SUCCESS) return adsm_mpi__raise(MPI_COMM_WORLD, rc);
    rc = PMPI_Start(request);
    if (rc != MPI_SUCCESS && request) adsm_mpi__unstart(request, 1);
    return rc;
}

int MPI_Startall(int count, MPI_Request array_of_requests[]) {
    adsm_mpi__poll_detached(0);
    for (int i = 0; i < count; i++) {
        int rc = adsm_mpi__start_one(array_of_requests[i]);
        if (rc != MPI_SUCCESS) {
            adsm_mpi__unstart(array_of_requests, i); /* none was handed to MPI */
            return adsm_mpi__raise(MPI_COMM_WORLD, rc);
        }
    }
    int rc = PMPI_Startall(count, array_of_requests);
    if (rc != MPI_SUCCESS) adsm_mpi__unstart(array_of_requests, count);
    return rc;
}

int MPI_Sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Status *status) {
    adsm_mpi__poll_detached(0);
    adsm_mpi__buf b[2];
    int rc = adsm_mpi__prepare1(&b[0], "MPI_Sendrecv", recvbuf, source == MPI_PROC_NULL ? 0 : recvcount, recvtype,
                                ADSM_MPI__OUT); /* to and from MPI_PROC_NULL nothing moves */
    if (rc != MPI_SUCCESS) return adsm_mpi__raise(comm, rc);
    rc = adsm_mpi__prepare1(&b[1], "MPI_Sendrecv", sendbuf, dest == MPI_PROC_NULL ? 0 : sendcount, sendtype,
                            ADSM_MPI__IN);
    if (rc != MPI_SUCCESS) {
        adsm_mpi__release(&b[0]);
        return adsm_mpi__raise(comm, rc);
    }
    MPI_Status own, *st = status == MPI_STATUS_IGNORE ? &own : status;
    rc = PMPI_Sendrecv(adsm_mpi__handed(&b[1]), sendcount, sendtype, dest, sendtag, adsm_mpi__handed(&b[0]),
                       recvcount, recvtype, source, recvtag, comm, st);
    return adsm_mpi__finish(b, 2, rc, st, "MPI_Sendrecv", comm); /* the status counts the receive (b[0]) */
}

int MPI_Sendrecv_replace(void *buf, int count, MPI_Datatype datatype, int dest, int sendtag, int source, int recvtag,
                         MPI_Comm comm, MPI_Status *status) {
    adsm_mpi__poll_detached(0);
    adsm_mpi__buf b;
    int rc = adsm_mpi__prepare1(&b, "MPI_Sendrecv_replace", buf, count, datatype, ADSM_MPI__INOUT);
    if (rc != MPI_SUCCESS) return adsm_mpi__raise(comm, rc);
    MPI_Status own, *st = status == MPI_STATUS_IGNORE ? &own : status;
    rc = PMPI_Sendrecv_replace(adsm_mpi__handed(&b), count, datatype, dest, sendtag, source, recvtag, comm, st);
    return adsm_mpi__finish(&b, 1, rc, st, "MPI_Sendrecv_replace", comm);
}

/* ---- collectives ------------------------------------------------------------------------- */
ADSM_MPI__PRIVATE int adsm_mpi__is_inter(MPI_Comm comm) {
    int inter = 0;
    PMPI_Comm_test_inter(comm, &inter);
    return inter;
}

/* Whether this process is a collective's root: 1 yes, 0 another member, -1 a member of the
 * root's group that takes no part (intercommunicators: MPI_PROC_NULL). */
ADSM_MPI__PRIVATE int adsm_mpi__role(MPI_Comm comm, int root) {
    int me = -1;
    if (adsm_mpi__is_inter(comm)) return root == MPI_ROOT ? 1 : root == MPI_PROC_NULL ? -1 : 0;
    PMPI_Comm_rank(comm, &me);
    return me == root;
}

/* The number of blocks a collective's gathered buffer holds: the group's size, or the remote
 * group's on an intercommunicator. */
ADSM_MPI__PRIVATE int adsm_mpi__peers(MPI_Comm comm) {
    int n = 0;
    if (adsm_mpi__is_inter(comm)) PMPI_Comm_remote_size(comm, &n);
    else PMPI_Comm_size(comm, &n);
    return n;
}

/* A collective's two buffers: b[0] the data received, b[1] the data sent. A side this process
 * does not use (the root's input of a Bcast elsewhere, MPI_IN_PLACE) is given no blocks. */
typedef struct adsm_mpi__coll {
    const char *fn;
    MPI_Comm comm;
    adsm_mpi__buf b[2];
} adsm_mpi__coll;

ADSM_MPI__PRIVATE adsm_mpi__coll adsm_mpi__coll_of(const char *fn, MPI_Comm comm) {
    adsm_mpi__coll c;
    memset(&c, 0, sizeof c);
    c.fn = fn;
    c.comm = comm;
    return c;
}

/* Prepares both sides (ns, nr: their blocks, 0 when unused); on failure releases both and
 * raises the error on the communicator. */
ADSM_MPI__PRIVATE int adsm_mpi__coll_prepare(adsm_mpi__coll *c, const void *sbase, const adsm_mpi__block *sb, int ns,
                                             const void *rbase, const adsm_mpi__block *rb, int nr, int rdir) {
    adsm_mpi__poll_detached(0);
    int rc = adsm_mpi__prepare(&c->b[0], c->fn, rbase, rb, nr, rdir, 1);
    if (rc == MPI_SUCCESS) rc = adsm_mpi__prepare(&c->b[1], c->fn, sbase, sb, ns, ADSM_MPI__IN, 1);
    if (rc != MPI_SUCCESS) {
        adsm_mpi__release(&c->b[0]);
        adsm_mpi__release(&c->b[1]);
        adsm_mpi__raise(c->comm, rc);
    }
    return rc;
}

/* The base MPI gets for a buffer the program passed as p (MPI_IN_PLACE and plain memory stay). */
ADSM_MPI__PRIVATE void *adsm_mpi__arg(const adsm_mpi__buf *b, const void *p) {
    return p == MPI_IN_PLACE || !b->dir ? (void *)p : adsm_mpi__handed(b);
}

#define ADSM_MPI__SEND(c, p) adsm_mpi__arg(&(c).b[1], (p))
#define ADSM_MPI__RECV(c, p) adsm_mpi__arg(&(c).b[0], (p))

ADSM_MPI__PRIVATE int adsm_mpi__coll_finish(adsm_mpi__coll *c, int rc) {
    return adsm_mpi__finish(c->b, 2, rc, NULL, c->fn, c->comm);
}

/* A nonblocking collective just started: its mirrors live until the request completes. */
ADSM_MPI__PRIVATE int adsm_mpi__coll_track(adsm_mpi__coll *c, int rc, MPI_Request *req) {
    if (rc != MPI_SUCCESS) {
        adsm_mpi__release(&c->b[0]);
        adsm_mpi__release(&c->b[1]);
        return rc;
    }
    return adsm_mpi__track(req, &c->b[0], &c->b[1], 0, 0, c->fn, c->comm);
}

/* Blocks of a "v" buffer: counts[i] elements at displs[i] (in extents of type, or in bytes with
 * types[i], as Alltoallw). NULL when there is no memory (the error recorded). */
ADSM_MPI__PRIVATE adsm_mpi__block *adsm_mpi__vblocks(int n, const int counts[], const int displs[], MPI_Datatype type,
                                                     const MPI_Datatype types[], const char *fn) {
    adsm_mpi__block *k = (adsm_mpi__block *)malloc((size_t)(n > 0 ? n : 1) * sizeof *k);
    if (!k) {
        adsm_mpi__fail(MPI_ERR_NO_MEM, fn, "out of memory");
        return NULL;
    }
    MPI_Aint lb = 0, extent = 1;
    if (!types && type != MPI_DATATYPE_NULL) PMPI_Type_get_extent(type, &lb, &extent);
    for (int i = 0; i < n; i++) k[i] = adsm_mpi__blk((MPI_Aint)displs[i] * extent, counts[i], types ? types[i] : type);
    return k;
}

/* Bcast: the root sends, the others receive. */
ADSM_MPI__PRIVATE int adsm_mpi__bcast_prepare(adsm_mpi__coll *c, void *buffer, int count, MPI_Datatype type, int root,
                                              int *role) {
    adsm_mpi__block k = adsm_mpi__blk(0, count, type);
    *role = adsm_mpi__role(c->comm, root);
    return adsm_mpi__coll_prepare(c, buffer, &k, *role == 1, buffer, &k, *role == 0, ADSM_MPI__OUT);
}

int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
    adsm_mpi__coll c = adsm_mpi__coll_of("MPI_Bcast", comm);
    int role, rc = adsm_mpi__bcast_prepare(&c, buffer, count, datatype, root, &role);
    if (rc != MPI_SUCCESS) return rc;
    void *h = role == 1 ? ADSM_MPI__SEND(c, buffer) : ADSM_MPI__RECV(c, buffer);
    return adsm_mpi__coll_finish(&c, PMPI_Bcast(h, count, datatype, root, comm));
}

int MPI_Ibcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request *request) {
    adsm_mpi__coll c = adsm_mpi__coll_of("MPI_Ibcast", comm);
    int role, rc = adsm_mpi__bcast_prepare(&c, buffer, count, datatype, root, &role);
    if (rc != MPI_SUCCESS) return rc;
    void *h = role == 1 ? ADSM_MPI__SEND(c, buffer) : ADSM_MPI__RECV(c, buffer);
    return adsm_mpi__coll_track(&c, PMPI_Ibcast(h, count, datatype, root, comm, request), request);
}

/* Reduce: the root receives (INOUT when its own data is in place), the others send; on an
 * intercommunicator the root's group sends nothing. */
ADSM_MPI__PRIVATE int adsm_mpi__reduce_prepare(adsm_mpi__coll *c, const void *sendbuf, void *recvbuf, int count,
                                               MPI_Datatype type, int root) {
    int role = adsm_mpi__role(c->comm, root), in_place = sendbuf == MPI_IN_PLACE;
    int sends = role == 0 || (role == 1 && !in_place && !adsm_mpi__is_inter(c->comm));
    adsm_mpi__block k = adsm_mpi__blk(0, count, type);
    return adsm_mpi__coll_prepare(c, sendbuf, &k, sends, recvbuf, &k, role == 1,
                                  in_place ? ADSM_MPI__INOUT : ADSM_MPI__OUT);
}

int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
               MPI_Comm comm) {
    adsm_mpi__coll c = adsm_mpi__coll_of("MPI_Reduce", comm);
    int rc = adsm_mpi__reduce_prepare(&c, sendbuf, recvbuf, count, datatype, root);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Reduce(ADSM_MPI__SEND(c, sendbuf), ADSM_MPI__RECV(c, recvbuf), count, datatype, op, root, comm);
    return adsm_mpi__coll_finish(&c, rc);
}

int MPI_Ireduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
                MPI_Comm comm, MPI_Request *request) {
    adsm_mpi__coll c = adsm_mpi__coll_of("MPI_Ireduce", comm);
    int rc = adsm_mpi__reduce_prepare(&c, sendbuf, recvbuf, count, datatype, root);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Ireduce(ADSM_MPI__SEND(c, sendbuf), ADSM_MPI__RECV(c, recvbuf), count, datatype, op, root, comm, request);
    return adsm_mpi__coll_track(&c, rc, request);
}

/* Allreduce, Scan, Exscan, Reduce_local: the input and the output (INOUT in place). Exscan
 * leaves rank 0's output undefined: INOUT keeps its bytes there rather than a mirror's. */
ADSM_MPI__PRIVATE int adsm_mpi__allreduce_prepare(adsm_mpi__coll *c, const void *sendbuf, void *recvbuf, int count,
                                                  MPI_Datatype type, int keep_output) {
    adsm_mpi__block k = adsm_mpi__blk(0, count, type);
    int in_place = sendbuf == MPI_IN_PLACE;
    return adsm_mpi__coll_prepare(c, sendbuf, &k, !in_place, recvbuf, &k, 1,
                                  in_place || keep_output ? ADSM_MPI__INOUT : ADSM_MPI__OUT);
}

typedef int (*adsm_mpi__allreduce_fn)(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm);

ADSM_MPI__PRIVATE int adsm_mpi__allreduce(adsm_mpi__allreduce_fn fn, const char *name, int keep_output,
                                          const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
                                          MPI_Comm comm) {
    adsm_mpi__coll c = adsm_mpi__coll_of(name, comm);
    int rc = adsm_mpi__allreduce_prepare(&c, sendbuf, recvbuf, count, type, keep_output);
    if (rc != MPI_SUCCESS) return rc;
    rc = fn(ADSM_MPI__SEND(c, sendbuf), ADSM_MPI__RECV(c, recvbuf), count, type, op, comm);
    return adsm_mpi__coll_finish(&c, rc);
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
    return adsm_mpi__allreduce(PMPI_Allreduce, "MPI_Allreduce", 0, sendbuf, recvbuf, count, datatype, op, comm);
}

int MPI_Scan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
    return adsm_mpi__allreduce(PMPI_Scan, "MPI_Scan", 0, sendbuf, recvbuf, count, datatype, op, comm);
}

int MPI_Exscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
    return adsm_mpi__allreduce(PMPI_Exscan, "MPI_Exscan", 1, sendbuf, recvbuf, count, datatype, op, comm);
}

int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                   MPI_Request *request) {
    adsm_mpi__coll c = adsm_mpi__coll_of("MPI_Iallreduce", comm);
    int rc = adsm_mpi__allreduce_prepare(&c, sendbuf, recvbuf, count, datatype, 0);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Iallreduce(ADSM_MPI__SEND(c, sendbuf), ADSM_MPI__RECV(c, recvbuf), count, datatype, op, comm, request);
    return adsm_mpi__coll_track(&c, rc, request);
}

int MPI_Reduce_local(const void *inbuf, void *inoutbuf, int count, MPI_Datatype datatype, MPI_Op op) {
    adsm_mpi__coll c = adsm_mpi__coll_of("MPI_Reduce_local", MPI_COMM_WORLD);
    adsm_mpi__block k = adsm_mpi__blk(0, count, datatype);
    int rc = adsm_mpi__coll_prepare(&c, inbuf, &k, 1, inoutbuf, &k, 1, ADSM_MPI__INOUT);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Reduce_local(ADSM_MPI__SEND(c, inbuf), ADSM_MPI__RECV(c, inoutbuf), count, datatype, op);
    return adsm_mpi__coll_finish(&c, rc);
}

/* Allgather and Alltoall: the received buffer holds a block per peer, in order (MPI_IN_PLACE
 * makes it INOUT); the sent one block (Allgather) or one per peer (Alltoall). */
ADSM_MPI__PRIVATE int adsm_mpi__gatherall_prepare(adsm_mpi__coll *c, const void *sendbuf, int scount,
                                                  MPI_Datatype stype, void *recvbuf, int rcount, MPI_Datatype rtype,
                                                  int send_per_peer) {
    MPI_Aint peers = adsm_mpi__peers(c->comm);
    adsm_mpi__block s = adsm_mpi__blk(0, send_per_peer ? peers * scount : scount, stype);
    adsm_mpi__block r = adsm_mpi__blk(0, peers * rcount, rtype);
    int in_place = sendbuf == MPI_IN_PLACE;
    return adsm_mpi__coll_prepare(c, sendbuf, &s, !in_place, recvbuf, &r, 1,
                                  in_place ? ADSM_MPI__INOUT : ADSM_MPI__OUT);
}

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm) {
    adsm_mpi__coll c = adsm_mpi__coll_of("MPI_Allgather", comm);
    int rc = adsm_mpi__gatherall_prepare(&c, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 0);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Allgather(ADSM_MPI__SEND(c, sendbuf), sendcount, sendtype, ADSM_MPI__RECV(c, recvbuf), recvcount,
                        recvtype, comm);
    return adsm_mpi__coll_finish(&c, rc);
}

int MPI_Iallgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                   MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request) {
    adsm_mpi__coll c = adsm_mpi__coll_of("MPI_Iallgather", comm);
    int rc = adsm_mpi__gatherall_prepare(&c, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 0);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Iallgather(ADSM_MPI__SEND(c, sendbuf), sendcount, sendtype, ADSM_MPI__RECV(c, recvbuf), recvcount,
                         recvtype, comm, request);
    return adsm_mpi__coll_track(&c, rc, request);
}

int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                 MPI_Datatype recvtype, MPI_Comm comm) {
    adsm_mpi__coll c = adsm_mpi__coll_of("MPI_Alltoall", comm);
    int rc = adsm_mpi__gatherall_prepare(&c, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 1);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Alltoall(ADSM_MPI__SEND(c, sendbuf), sendcount, sendtype, ADSM_MPI__RECV(c, recvbuf), recvcount,
                       recvtype, comm);
    return adsm_mpi__coll_finish(&c, rc);
}

int MPI_Ialltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request) {
    adsm_mpi__coll c = adsm_mpi__coll_of("MPI_Ialltoall", comm);
    int rc = adsm_mpi__gatherall_prepare(&c, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 1);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Ialltoall(ADSM_MPI__SEND(c, sendbuf), sendcount, sendtype, ADSM_MPI__RECV(c, recvbuf), recvcount,
                        recvtype, comm, request);
    return adsm_mpi__coll_track(&c, rc, request);
}

/* Gather(v): everyone but an intercommunicator's root group sends (the root too, unless in
 * place); the root receives a block per peer (INOUT in place: its own block stays). */
ADSM_MPI__PRIVATE int adsm_mpi__gather_prepare(adsm_mpi__coll *c, const void *sendbuf, int scount, MPI_Datatype stype,
                                               void *recvbuf, const adsm_mpi__block *r, int nr, int root) {
    int role = adsm_mpi__role(c->comm, root), in_place = sendbuf == MPI_IN_PLACE;
    int sends = role == 0 || (role == 1 && !in_place && !adsm_mpi__is_inter(c->comm));
    adsm_mpi__block s = adsm_mpi__blk(0, scount, stype);
    return adsm_mpi__coll_prepare(c, sendbuf, &s, sends, recvbuf, r, role == 1 ? nr : 0,
                                  in_place ? ADSM_MPI__INOUT : ADSM_MPI__OUT);
}

int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
               MPI_Datatype recvtype, int root, MPI_Comm comm) {
    adsm_mpi__coll c = adsm_mpi__coll_of("MPI_Gather", comm);
    adsm_mpi__block r = adsm_mpi__blk(0, (MPI_Aint)adsm_mpi__peers(comm) * recvcount, recvtype);
    int rc = adsm_mpi__gather_prepare(&c, sendbuf, sendcount, sendtype, recvbuf, &r, 1, root);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Gather(ADSM_MPI__SEND(c, sendbuf), sendcount, sendtype, ADSM_MPI__RECV(c, recvbuf), recvcount, recvtype,
                     root, comm);
    return adsm_mpi__coll_finish(&c, rc);
}

int MPI_Gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm) {
    adsm_mpi__coll c = adsm_mpi__coll_of("MPI_Gatherv", comm);
    int n = adsm_mpi__role(comm, root) == 1 ? adsm_mpi__peers(comm) : 0; /* counts matter at the root only */
    adsm_mpi__block *r = adsm_mpi__vblocks(n, recvcounts, displs, recvtype, NULL, c.fn);
    if (!r) return adsm_mpi__raise(comm, MPI_ERR_NO_MEM);
    int rc = adsm_mpi__gather_prepare(&c, sendbuf, sendcount, sendtype, recvbuf, r, n, root);
    free(r);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Gatherv(ADSM_MPI__SEND(c, sendbuf), sendcount, sendtype, ADSM_MPI__RECV(c, recvbuf), recvcounts, displs,
                      recvtype, root, comm);
    return adsm_mpi__coll_finish(&c, rc);
}

/* Scatter(v): the root sends a block per peer; everyone but an intercommunicator's root group
 * receives (the root too, unless in place). */
ADSM_MPI__PRIVATE int adsm_mpi__scatter_prepare(adsm_mpi__coll *c, const void *sendbuf, const adsm_mpi__block *s,
                                                int ns, void *recvbuf, int rcount, MPI_Datatype rtype, int root) {
    int role = adsm_mpi__role(c->comm, root);
    int receives = role == 0 || (role == 1 && recvbuf != MPI_IN_PLACE && !adsm_mpi__is_inter(c->comm));
    adsm_mpi__block r = adsm_mpi__blk(0, rcount, rtype);
    return adsm_mpi__coll_prepare(c, sendbuf, s, role == 1 ? ns : 0, recvbuf, &r, receives, ADSM_MPI__OUT);
}

int MPI_Scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                MPI_Datatype recvtype, int root, MPI_Comm comm) {
    adsm_mpi__coll c = adsm_mpi__coll_of("MPI_Scatter", comm);
    adsm_mpi__block s = adsm_mpi__blk(0, (MPI_Aint)adsm_mpi__peers(comm) * sendcount, sendtype);
    int rc = adsm_mpi__scatter_prepare(&c, sendbuf, &s, 1, recvbuf, recvcount, recvtype, root);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Scatter(ADSM_MPI__SEND(c, sendbuf), sendcount, sendtype, ADSM_MPI__RECV(c, recvbuf), recvcount, recvtype,
                      root, comm);
    return adsm_mpi__coll_finish(&c, rc);
}

int MPI_Scatterv(const void *sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
    adsm_mpi__coll c = adsm_mpi__coll_of("MPI_Scatterv", comm);
    int n = adsm_mpi__role(comm, root) == 1 ? adsm_mpi__peers(comm) : 0;
    adsm_mpi__block *s = adsm_mpi__vblocks(n, sendcounts, displs, sendtype, NULL, c.fn);
    if (!s) return adsm_mpi__raise(comm, MPI_ERR_NO_MEM);
    int rc = adsm_mpi__scatter_prepare(&c, sendbuf, s, n, recvbuf, recvcount, recvtype, root);
    free(s);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Scatterv(ADSM_MPI__SEND(c, sendbuf), sendcounts, displs, sendtype, ADSM_MPI__RECV(c, recvbuf), recvcount,
                       recvtype, root, comm);
    return adsm_mpi__coll_finish(&c, rc);
}

int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                   const int displs[], MPI_Datatype recvtype, MPI_Comm comm) {
    adsm_mpi__coll c = adsm_mpi__coll_of("MPI_Allgatherv", comm);
    int n = adsm_mpi__peers(comm), in_place = sendbuf == MPI_IN_PLACE;
    adsm_mpi__block s = adsm_mpi__blk(0, sendcount, sendtype);
    adsm_mpi__block *r = adsm_mpi__vblocks(n, recvcounts, displs, recvtype, NULL, c.fn);
    if (!r) return adsm_mpi__raise(comm, MPI_ERR_NO_MEM);
    int rc = adsm_mpi__coll_prepare(&c, sendbuf, &s, !in_place, recvbuf, r, n,
                                    in_place ? ADSM_MPI__INOUT : ADSM_MPI__OUT);
    free(r);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Allgatherv(ADSM_MPI__SEND(c, sendbuf), sendcount, sendtype, ADSM_MPI__RECV(c, recvbuf), recvcounts,
                         displs, recvtype, comm);
    return adsm_mpi__coll_finish(&c, rc);
}

/* Alltoallv and Alltoallw: a block per peer on both sides (w: a type per peer, byte
 * displacements). */
ADSM_MPI__PRIVATE int adsm_mpi__alltoallv_prepare(adsm_mpi__coll *c, const void *sendbuf, const int scounts[],
                                                  const int sdispls[], MPI_Datatype stype, const MPI_Datatype stypes[],
                                                  void *recvbuf, const int rcounts[], const int rdispls[],
                                                  MPI_Datatype rtype, const MPI_Datatype rtypes[]) {
    int n = adsm_mpi__peers(c->comm), in_place = sendbuf == MPI_IN_PLACE;
    adsm_mpi__block *s = adsm_mpi__vblocks(in_place ? 0 : n, scounts, sdispls, stype, stypes, c->fn);
    adsm_mpi__block *r = adsm_mpi__vblocks(n, rcounts, rdispls, rtype, rtypes, c->fn);
    int rc = !s || !r ? adsm_mpi__raise(c->comm, MPI_ERR_NO_MEM)
                      : adsm_mpi__coll_prepare(c, sendbuf, s, in_place ? 0 : n, recvbuf, r, n,
                                               in_place ? ADSM_MPI__INOUT : ADSM_MPI__OUT);
    free(s);
    free(r);
    return rc;
}

int MPI_Alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                  void *recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm) {
    adsm_mpi__coll c = adsm_mpi__coll_of("MPI_Alltoallv", comm);
    int rc = adsm_mpi__alltoallv_prepare(&c, sendbuf, sendcounts, sdispls, sendtype, NULL, recvbuf, recvcounts,
                                         rdispls, recvtype, NULL);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Alltoallv(ADSM_MPI__SEND(c, sendbuf), sendcounts, sdispls, sendtype, ADSM_MPI__RECV(c, recvbuf),
                        recvcounts, rdispls, recvtype, comm);
    return adsm_mpi__coll_finish(&c, rc);
}

int MPI_Alltoallw(const void *sendbuf, const int sendcounts[], const int sdispls[], const MPI_Datatype sendtypes[],
                  void *recvbuf, const int recvcounts[], const int rdispls[], const MPI_Datatype recvtypes[],
                  MPI_Comm comm) {
    adsm_mpi__coll c = adsm_mpi__coll_of("MPI_Alltoallw", comm);
    int rc = adsm_mpi__alltoallv_prepare(&c, sendbuf, sendcounts, sdispls, MPI_DATATYPE_NULL, sendtypes, recvbuf,
                                         recvcounts, rdispls, MPI_DATATYPE_NULL, recvtypes);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Alltoallw(ADSM_MPI__SEND(c, sendbuf), sendcounts, sdispls, sendtypes, ADSM_MPI__RECV(c, recvbuf),
                        recvcounts, rdispls, recvtypes, comm);
    return adsm_mpi__coll_finish(&c, rc);
}

/* Reduce_scatter(_block): the input holds every member's part, the output one part; in place,
 * the output buffer is the input, read whole and its first part written. */
ADSM_MPI__PRIVATE int adsm_mpi__reduce_scatter_prepare(adsm_mpi__coll *c, const void *sendbuf, void *recvbuf,
                                                       MPI_Aint total, MPI_Aint mine, MPI_Datatype type) {
    int in_place = sendbuf == MPI_IN_PLACE;
    adsm_mpi__block s = adsm_mpi__blk(0, total, type), r = adsm_mpi__blk(0, in_place ? total : mine, type);
    return adsm_mpi__coll_prepare(c, sendbuf, &s, !in_place, recvbuf, &r, 1, in_place ? ADSM_MPI__INOUT : ADSM_MPI__OUT);
}

int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype, MPI_Op op,
                             MPI_Comm comm) {
    adsm_mpi__coll c = adsm_mpi__coll_of("MPI_Reduce_scatter_block", comm);
    int n = 0;
    PMPI_Comm_size(comm, &n);
    int rc = adsm_mpi__reduce_scatter_prepare(&c, sendbuf, recvbuf, (MPI_Aint)n * recvcount, recvcount, datatype);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Reduce_scatter_block(ADSM_MPI__SEND(c, sendbuf), ADSM_MPI__RECV(c, recvbuf), recvcount, datatype, op,
                                   comm);
    return adsm_mpi__coll_finish(&c, rc);
}

int MPI_Reduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[], MPI_Datatype datatype, MPI_Op op,
                       MPI_Comm comm) {
    adsm_mpi__coll c = adsm_mpi__coll_of("MPI_Reduce_scatter", comm);
    int n = 0, me = 0;
    PMPI_Comm_size(comm, &n);
    PMPI_Comm_rank(comm, &me);
    MPI_Aint total = 0;
    for (int i = 0; i < n; i++) total += recvcounts[i];
    int rc = adsm_mpi__reduce_scatter_prepare(&c, sendbuf, recvbuf, total, recvcounts[me], datatype);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Reduce_scatter(ADSM_MPI__SEND(c, sendbuf), ADSM_MPI__RECV(c, recvbuf), recvcounts, datatype, op, comm);
    return adsm_mpi__coll_finish(&c, rc);
}

/* Completes the requests the program freed while they ran (the only buffer-less call here). */
int MPI_Barrier(MPI_Comm comm) {
    adsm_mpi__poll_detached(0);
    int rc = PMPI_Barrier(comm);
    adsm_mpi__poll_detached(0);
    return rc;
}

/* ---- local calls ------------------------------------------------------------------------- */
/* The CPU work of MPI_Pack and MPI_Unpack runs in this process, so page faults would bring what
 * it touches home; the touch does it without faults, and waits for batch's kernel outputs. */
ADSM_MPI__PRIVATE int adsm_mpi__touch(const void *base, int count, MPI_Datatype type, int write, const char *fn) {
    adsm_mpi__runs rs = {NULL, 0, 0, 0};
    adsm_mpi__run *owned = NULL, *r = NULL;
    int rc = MPI_SUCCESS;
    if (count > 0 && type != MPI_DATATYPE_NULL &&
        (adsm_mpi__type_runs(&rs, type, 0, count, 0) != 0 || !(r = adsm_mpi__sorted(rs.r, rs.n, &owned))))
        rc = adsm_mpi__fail(MPI_ERR_NO_MEM, fn, "out of memory");
    for (size_t i = 0, j; r && rc == MPI_SUCCESS && i < rs.n; i = j) { /* a touch per cluster of runs */
        MPI_Aint end;
        j = adsm_mpi__cluster(r, rs.n, i, &end);
        if (adsm_touch((const void *)((uintptr_t)base + (uintptr_t)r[i].off), (size_t)(end - r[i].off), write) != ADSM_OK)
            rc = adsm_mpi__fail(MPI_ERR_OTHER, fn, "making shared memory current on the host: %s", adsm_last_error());
    }
    free(owned);
    free(rs.r);
    return rc;
}

int MPI_Pack(const void *inbuf, int incount, MPI_Datatype datatype, void *outbuf, int outsize, int *position,
             MPI_Comm comm) {
    int rc = adsm_mpi__touch(inbuf, incount, datatype, 0, "MPI_Pack");
    if (rc == MPI_SUCCESS && position && outsize > *position)
        rc = adsm_mpi__touch((char *)outbuf + *position, outsize - *position, MPI_BYTE, 1, "MPI_Pack");
    if (rc != MPI_SUCCESS) return adsm_mpi__raise(comm, rc);
    return PMPI_Pack(inbuf, incount, datatype, outbuf, outsize, position, comm);
}

int MPI_Unpack(const void *inbuf, int insize, int *position, void *outbuf, int outcount, MPI_Datatype datatype,
               MPI_Comm comm) {
    int rc = MPI_SUCCESS;
    if (position && insize > *position)
        rc = adsm_mpi__touch((const char *)inbuf + *position, insize - *position, MPI_BYTE, 0, "MPI_Unpack");
    if (rc == MPI_SUCCESS) rc = adsm_mpi__touch(outbuf, outcount, datatype, 1, "MPI_Unpack");
    if (rc != MPI_SUCCESS) return adsm_mpi__raise(comm, rc);
    return PMPI_Unpack(inbuf, insize, position, outbuf, outcount, datatype, comm);
}

/* ---- refused: memory other processes reach at any time ---------------------------------------- */
int MPI_Win_create(void *base, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, MPI_Win *win) {
    if (size > 0 && adsm_is_shared(base, (size_t)size))
        return adsm_mpi__raise(comm, adsm_mpi__fail(MPI_ERR_BASE, "MPI_Win_create",
                                                    "%p is shared memory: other processes would read and write it "
                                                    "behind adsm (one-sided RMA is not supported on shared objects; "
                                                    "use MPI_Win_allocate or plain memory)", base));
    return PMPI_Win_create(base, size, disp_unit, info, comm, win);
}

int MPI_Win_attach(MPI_Win win, void *base, MPI_Aint size) {
    if (size > 0 && adsm_is_shared(base, (size_t)size)) {
        int code = adsm_mpi__fail(MPI_ERR_BASE, "MPI_Win_attach",
                                  "%p is shared memory: one-sided RMA is not supported on shared objects", base);
        PMPI_Win_call_errhandler(win, code);
        return code;
    }
    return PMPI_Win_attach(win, base, size);
}

int MPI_Buffer_attach(void *buffer, int size) {
    if (size > 0 && adsm_is_shared(buffer, (size_t)size))
        return adsm_mpi__raise(MPI_COMM_WORLD, adsm_mpi__fail(MPI_ERR_BUFFER, "MPI_Buffer_attach",
                                                              "%p is shared memory: other processes read a Bsend "
                                                              "buffer behind adsm; attach plain memory", buffer));
    return PMPI_Buffer_attach(buffer, size);
}

/* Requests freed while active are finished first (their mirrors must outlive the transfers);
 * requests the program never completed lose their mirrors, with a word. */
int MPI_Finalize(void) {
    adsm_mpi__poll_detached(1);
    pthread_mutex_lock(&adsm_mpi__st.mutex);
    size_t left = 0;
    for (size_t i = 0; i < adsm_mpi__st.cap; i++) {
        adsm_mpi__pending *p = adsm_mpi__st.slots[i];
        if (!p || p == ADSM_MPI__TOMB) continue;
        left += p->active;
        adsm_mpi__discard(p);
    }
    free(adsm_mpi__st.slots);
    adsm_mpi__st.slots = NULL;
    adsm_mpi__st.cap = adsm_mpi__st.used = 0;
    __atomic_store_n(&adsm_mpi__st.live, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&adsm_mpi__st.mutex);
    if (left)
        adsm_mpi__fail(MPI_SUCCESS, "MPI_Finalize", "%zu request%s on shared memory never completed", left,
                       left == 1 ? "" : "s");
    return PMPI_Finalize();
}

/* ---- public helpers ------------------------------------------------------------------------ */
ADSM_API void adsm_mpi_get_stats(adsm_mpi_stats *out) {
    if (!out) return;
    out->calls = ADSM_MPI__LOAD(adsm_mpi__st.stats.calls);
    out->mirrored = ADSM_MPI__LOAD(adsm_mpi__st.stats.mirrored);
    out->bytes_out = ADSM_MPI__LOAD(adsm_mpi__st.stats.bytes_out);
    out->bytes_in = ADSM_MPI__LOAD(adsm_mpi__st.stats.bytes_in);
    out->pending = ADSM_MPI__LOAD(adsm_mpi__st.stats.pending);
}

ADSM_API void adsm_mpi_reset_stats(void) {
    __atomic_store_n(&adsm_mpi__st.stats.calls, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&adsm_mpi__st.stats.mirrored, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&adsm_mpi__st.stats.bytes_out, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&adsm_mpi__st.stats.bytes_in, 0, __ATOMIC_RELAXED);
}

ADSM_API const char *adsm_mpi_last_error(void) { return adsm_mpi__error; }

ADSM_API int adsm_mpi_local_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                                       "PMI_LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        char *end;
        long r = v && *v ? strtol(v, &end, 10) : -1;
        if (v && *v && !*end && r >= 0 && r < 1 << 20) return (int)r;
    }
    return -1;
}

#endif /* ADSM_MPI_IMPLEMENTATION */
