/* tests/cuda/driver_double.h -- the test-only API of the CUDA driver test double
 * (tests/cuda/libcudadouble.so, built from driver_double.c).
 *
 * The double implements the CUDA driver entry points adsm uses (adsm_impl/cuda/cuda_driver.h) over host
 * memory. Kernels are host functions registered here by the PTX entry name; a launch of that entry
 * calls the function on the stream's worker thread. Tests reach these functions with dlsym on the
 * same handle they dlopen'ed the driver with, or by linking against the library. */
#ifndef CUDADOUBLE_DRIVER_DOUBLE_H
#define CUDADOUBLE_DRIVER_DOUBLE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cudadouble_launch {
    unsigned grid[3], block[3];
    size_t nparams;
    const size_t *param_size; /* from the PTX */
    void *const *param;       /* param[i] points at a copy of parameter i's bytes */
} cudadouble_launch;

typedef void (*cudadouble_kernel_fn)(const cudadouble_launch *launch, void *user);

/* Registers `fn` as the body of every entry called `name`. 0 ok (re-register replaces),
 * -1 on a NULL name or fn. May be called before cuInit. */
int cudadouble_register_kernel(const char *name, cudadouble_kernel_fn fn, void *user);

/* Host view of device memory [dptr, dptr + n): NULL unless the whole range is valid device memory
 * (mapped and read-write; from a kernel, for the kernel's device). The pointer stays usable while
 * the range stays mapped. */
void *cudadouble_host_view(unsigned long long dptr, size_t n);

/* Called by a kernel (on the stream worker) to fail like a GPU fault: makes `code` sticky on the
 * kernel's context. Ignored when called from any other thread. */
void cudadouble_kernel_fault(int code);

typedef struct cudadouble_counters {
    unsigned long long h2d_bytes, d2h_bytes, d2d_bytes, memset_bytes;
    unsigned long long h2d_async, d2h_async;       /* copies whose host side was pinned */
    unsigned long long h2d_pageable, d2h_pageable; /* copies whose host side was pageable */
    unsigned long long launches, device_bytes_mapped, reservations;
    unsigned long long rejected;                   /* calls that returned an error other than NOT_READY */
    /* bytes by the kind of host memory the copy used: cuMemAllocHost memory (a runtime's staging
     * buffers), ranges registered with cuMemHostRegister (a program's own pages), or pageable */
    unsigned long long staged_bytes, registered_bytes, pageable_bytes;
    unsigned long long registrations; /* cuMemHostRegister calls that succeeded */
    unsigned long long register_calls; /* cuMemHostRegister calls, refused or not */
    /* successful calls: cuMemCreate, cuMemMap, cuMemSetAccess, cuModuleLoadDataEx; and
     * cuModuleGetFunction calls (found or not) */
    unsigned long long mem_creates, mem_maps, mem_set_access, module_loads, function_lookups;
    /* waits a real driver spends spinning a core: cuEventSynchronize on events made without
     * CU_EVENT_BLOCKING_SYNC, and cuStreamSynchronize (primary contexts schedule AUTO: spin) */
    unsigned long long spin_waits;
    /* cuMemHostRegister calls pinning pages right now (CUDADOUBLE_REGISTER_US_PER_MIB) */
    unsigned long long registers_in_flight;
    /* cuMemcpyPeerAsync bytes, and those of them the destination device read directly (it had
     * access to the source: peer access), not staged through the host */
    unsigned long long peer_bytes, peer_direct_bytes;
    /* host->device bytes whose copy has run (the others above count copies when submitted) */
    unsigned long long h2d_landed_bytes;
    /* cuMemAllocManaged calls that succeeded; bytes cuMemPrefetchAsync was asked to move to a
     * device and to the host */
    unsigned long long managed_allocs, prefetch_device_bytes, prefetch_host_bytes;
    unsigned long long last_launch_thread; /* the system thread (gettid) of the last accepted cuLaunchKernel */
} cudadouble_counters;

void cudadouble_get_counters(cudadouble_counters *out);

/* Ends every cuMemHostRegister's pinning time (CUDADOUBLE_REGISTER_US_PER_MIB) now and from now
 * on: a test holds a registration in flight as long as it needs, then lets it finish. */
void cudadouble_release_registers(void);

/* Calls fn(1, base, size, user) when cuMemAddressReserve made a device range, and fn(0, base,
 * size, user) right after cuMemAddressFree gave one back; outside the double's locks. After a
 * free the range is free address space, and fn may map there as any other thread of the program
 * could. NULL removes the hook. */
void cudadouble_set_address_hook(void (*fn)(int reserved, unsigned long long base, size_t size, void *user),
                                 void *user);

#ifdef __cplusplus
}
#endif

#endif /* CUDADOUBLE_DRIVER_DOUBLE_H */
