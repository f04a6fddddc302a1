/* adsm.h -- Asymmetric Distributed Shared Memory for C11, v0.1.0, MIT licence (see the end of file)

   One pointer per data object, valid on the CPU and inside accelerator kernels. The runtime moves
   data between host and device memory by itself: page protection tells it what the CPU reads and
   writes, kernel annotations tell it what a kernel writes. A modern reimplementation of GMAC
   (Gelado et al., ASPLOS 2010).

   DO THIS in exactly one C or C++ file of your program:

       #define ADSM_IMPLEMENTATION
       #include "adsm.h"

   and build with:  cc -std=c11 -I<dir of adsm.h> app.c -pthread -ldl
   The implementation compiles as C++17 too (g++/clang++ -std=c++17, nvcc -std=c++17), so the
   file may be a .cpp or .cu. Every other file just includes "adsm.h" (C or C++). The implementation uses stb_ds
   (<stb/stb_ds.h>, Debian package libstb-dev) for its tables and compiles its functions into that
   same file; a program that already defines STB_DS_IMPLEMENTATION in another file defines
   ADSM_STB_DS_EXTERNAL before including adsm.h with ADSM_IMPLEMENTATION.

   TABLE OF CONTENTS
       1. Step by step
       2. Kernels: the DSL
       3. Configuration
       4. Protocols
       5. Backends
       6. Errors
       7. Threads, signals and fork
       8. I/O and bulk memory
       9. Limits

   1. STEP BY STEP
   ===============
       ADSM_KERNEL(vecadd, ADSM_OUT(float, c), ADSM_IN(float, a), ADSM_IN(float, b),
                   ADSM_VALUE(size_t, n));

       void vecadd(adsm_grid g, float *c, const float *a, const float *b, size_t n) {
           ADSM_FOR_EACH_THREAD(g, i) { if (i < n) c[i] = a[i] + b[i]; }
       }

       float *a = adsm_alloc(n * sizeof *a), *b = ..., *c = ...;   // shared objects
       for (size_t i = 0; i < n; i++) { a[i] = i; b[i] = 2 * i; }  // plain CPU code
       ADSM_CALL(vecadd, adsm_grid_1d((n + 255) / 256, 256), c, a, b, n);  // asynchronous
       adsm_sync();                                                // wait, report kernel errors
       printf("%f\n", c[10]);                                      // c comes back by itself
       adsm_free(a); ...

   Shared objects start zero-filled on both sides. adsm_init()/adsm_shutdown() are optional: the
   first call initialises from defaults and the environment.

   THE API AT A GLANCE (declared below this comment, each with its own; sections in brackets)
       adsm_init(&cfg)  adsm_shutdown()                   start, stop: both optional      [3, 7]
       adsm_alloc(size)  adsm_free(p)                     shared objects, zero-filled
       adsm_safe_alloc(size)  adsm_safe(p)                objects at other device addresses  [2]
       ADSM_TYPE(T, ADSM_PTR(f, U) | ADSM_PTR_NONNULL | ADSM_PTR_DATA(f), ...)  ADSM_DECLARE_TYPE
       ADSM_ALLOC(T, n)  adsm_set_type(p, ADSM_TYPE_OF(T))   typed objects (pointer fields)   [2]
       ADSM_KERNEL(name, params...)  ADSM_KERNEL_DEF(name, (params...), g, { body })         [2]
       ADSM_IN  ADSM_OUT  ADSM_INOUT  ADSM_VALUE          what a kernel does with a parameter
       ADSM_SHARED(decls)  ADSM_FOR_EACH_THREAD(g, i)  adsm_atomic_add/min/max_*      [2]
       adsm_grid_1d(blocks, threads)  adsm_grid_3d(grid, block)  adsm_dim3_make  adsm_grid_threads
       ADSM_CALL(name, grid, args...)  ADSM_CALL_ON(dev, ...)   launch (asynchronous)        [2, 5]
       adsm_sync()                                        wait; reports kernel errors       [6]
       ADSM_PREPARE(name)  ADSM_CUDA_SOURCE(...)  adsm_module_load_source/_image/_file   [5]
       adsm_device_count()  adsm_set_affinity(p, dev)  adsm_get_device_stats(dev, &s)    [5]
       adsm_memset  adsm_memcpy                           bulk memory where the data is    [8]
       adsm_read  adsm_write  adsm_pread  adsm_pwrite  adsm_fread  adsm_fwrite  _readv _writev  [8]
       adsm_is_shared(p, n)  adsm_touch(p, n, write)      for wrappers (adsm_mpi.h)        [8]
       adsm_dev_alloc(_on)  adsm_dev_free  adsm_copy_to_device  adsm_copy_from_device
       adsm_host_alloc  adsm_host_free                    the explicit path                [8]
       adsm_launch(_on)  adsm_kernel_prepare              what ADSM_CALL and ADSM_PREPARE call
       adsm_last_error()  adsm_last_result()  adsm_result_string(r)   errors              [6]
       adsm_get_stats(&s)  adsm_reset_stats()             bytes moved, faults, evictions...
       adsm_backend_name  adsm_protocol_name  adsm_fault_engine_name  adsm_block_size
       adsm_block_state(p)                                what runs, a block's state       [4]

   2. KERNELS: THE DSL
   ===================
   ADSM_KERNEL(name, params...) declares a kernel once, with the access it makes to each of its
   1..16 parameters:
       ADSM_IN(T, p)     const T *p, read only
       ADSM_OUT(T, p)    T *p, written (bytes the kernel does not write keep their values)
       ADSM_INOUT(T, p)  T *p, read and written
       ADSM_VALUE(T, p)  T p, passed by value (its bytes: in C++ a trivially copyable type)
   It declares the CPU body `void name(adsm_grid g, <params>)` used by the emu and host backends;
   define it as ordinary C. A mismatching definition is a compile error; a missing one is the
   error ADSM_ERROR_NO_KERNEL_BODY at launch (the body is a weak symbol).
   ADSM_CALL(name, grid, args...) launches it through a typed launcher, so the compiler checks the
   arguments (build with -Werror=incompatible-pointer-types to make mismatches errors; GCC 14 does
   by default). Pointer arguments may point anywhere inside a shared object; NULL is passed as is.
   Any other pointer is refused with ADSM_ERROR_NOT_SHARED (a device cannot reach host memory).
   At the call every CPU change to any shared object is made visible to the device (kernels may
   follow pointers stored in shared memory); OUT/INOUT objects become Invalid on the CPU and
   come back on the next CPU touch; IN objects stay valid on both sides. On the emu backend device
   memory outside OUT/INOUT objects is read only while the kernel runs: a kernel that writes an IN
   object (or any shared object it was not given as OUT) fails with ADSM_ERROR_KERNEL_WROTE_INPUT
   naming the kernel and parameter; a kernel that crashes fails with ADSM_ERROR_KERNEL_CRASHED.
   A kernel that runs past the end of an object (or before its start) reads or writes the next
   object's device copy without a word, as on a GPU, unless ADSM_EMU_CHECK_BOUNDS=1 (section 3).
   Launch errors are reported by the next adsm_sync(), like a GPU's. Shapes no GPU runs are
   refused by ADSM_CALL itself on every backend (ADSM_ERROR_INVALID_VALUE): a block of more than
   1024 threads or beyond 1024 x 1024 x 64, a grid beyond 2^31-1 x 65535 x 65535 blocks.
   ADSM_FOR_EACH_THREAD(g, i) stmt runs stmt for every flattened global thread index i of the part
   of the grid this invocation was given (bodies run split over a pool of worker threads).
   Kernels must only touch their arguments and shared memory: on emu they run in another process
   and see the program's globals as they were at adsm_init(); a kernel whose body is in a library
   loaded (dlopen) after adsm_init() is refused there (ADSM_ERROR_UNSUPPORTED, naming it).

   WRITE A KERNEL ONCE: ADSM_KERNEL_DEF(name, (params...), g, { body }); declares the kernel and
   defines its body; on cuda the same text is compiled by NVRTC at the first launch (a loaded
   module's kernel of that name wins). ADSM_SHARED(decls); gives types and static inline helpers
   to both sides.
   A body may use: C that is also CUDA C++, its parameters and g, int8_t..uint64_t, size_t,
   CUDA's device math, the program's macros (expanded before the text is stringized), the
   ADSM_SHARED declarations and the atomics adsm_atomic_add_u32/_u64/_ull/_i32/_f32,
   adsm_atomic_min_u32/_i32, adsm_atomic_max_u32/_i32. ADSM_PREPARE(name) compiles ahead of the
   first launch (once per process). It may not use: preprocessor directives, host functions or
   globals, C-only syntax CUDA C++ rejects (void * conversions, C's NULL, compound literals,
   VLAs). A body NVRTC rejects fails the first launch with ADSM_ERROR_INVALID_MODULE and
   NVRTC's log, naming the kernel. docs/usage.md, "Write a kernel once", has the full rules.

   POINTER STRUCTURES: where a device sees objects at other addresses than the host's (cuda
   translating, GPUs after the first, adsm_safe_alloc objects, emu with ADSM_EMU_SAME_ADDRESS=0),
   declare the pointer fields of a struct and give objects the type; adsm rewrites those fields
   into that device's addresses while its kernels run, and back afterwards:
       typedef struct node { double v; struct node *next; float *data; } node;
       ADSM_TYPE(node, ADSM_PTR(next, node), ADSM_PTR_DATA(data));      // one file
       node *list = ADSM_ALLOC(node, n);          // or adsm_set_type(obj, ADSM_TYPE_OF(node))
   ADSM_PTR(f, T) points to structs of declared type T or is NULL, ADSM_PTR_NONNULL(f, T) never
   NULL, ADSM_PTR_DATA(f) into an object of plain data; a field may be an array of pointers.
   A field pointing outside every shared object fails the launch with ADSM_ERROR_NOT_SHARED
   naming kernel, type, element and field (a kernel leaving one: that launch and the next
   adsm_sync). Where the addresses agree nothing runs; where they differ a launch that names a
   typed object waits for its device and is synchronous, unless it goes through host memory and
   its kernel only reads them (one that names none translates nothing and stays asynchronous).
   docs/usage.md, "Pointer structures where addresses differ".

   3. CONFIGURATION
   ================
   adsm_init(&cfg) with a zero-initialised adsm_config; fields left zero take the environment
   variable, else the default. A bad value fails adsm_init (or the first call) with
   ADSM_ERROR_INVALID_CONFIG and a message naming the variable.
       ADSM_BACKEND       auto | emu | host | cuda                     (auto: cuda if a GPU answers, else emu)
       ADSM_PROTOCOL      batch | lazy | rolling | um | um-prefetch | hmm  (rolling)
       ADSM_BLOCK_SIZE    power of two, multiple of the page size, 4K..1G; K/M/G suffixes (2M)
       ADSM_ROLLING_SIZE  dirty blocks kept before eager eviction, 2..16777216; 0 = adaptive (0)
       ADSM_ROLLING_STEP  adaptive: the smallest rolling size, per live object (2)
       ADSM_BLOCK_EXACT   1: rolling takes one block per fault (no huge-page fetch, no
                          write-ahead; section 4)                      (0)
       ADSM_EMU_MEMORY    emulated device memory capacity (half of RAM, or of the cgroup's
                          memory limit where lower, at most 32G). One device: the objects
                          together must fit. Several: each object must fit one, and a launch
                          never starts with its device holding more; rolling's evictions in
                          between may pass it until the next launch there (docs/usage.md)
       ADSM_EMU_WORKERS   kernel worker threads of the emulated device, 1..256 (CPU count, <= 64)
       ADSM_EMU_DEVICES   emulated devices, 1..8, each its own process and memory (1)
       ADSM_EMU_CHECK_BOUNDS 1: a guard page after every object and device buffer; a kernel that
                          reads or writes less than a page past an object's end or before its
                          start fails (ADSM_ERROR_KERNEL_CRASHED) naming kernel, object (address,
                          size, parameter) and offset; a write into the rest of its last page is
                          found after the kernel. Each object is then a mapping of its own (about
                          30 000 live objects at most: vm.max_map_count). Debugging aid (0)
       ADSM_EMU_SAME_ADDRESS 0: the emulated device's memory at addresses of its own, as a GPU
                          that translates (pointer arguments moved, untranslated pointers crash,
                          typed objects' fields translated: section 2)   (1)
       ADSM_TRANSLATE     auto | staged | in-place: how typed objects' pointer fields are
                          rewritten where addresses differ: in place (emu's memory; a patch
                          kernel on one GPU) or through host memory; auto patches on a GPU only
                          where the typed objects hold 128 KiB or more  (auto)
       ADSM_STREAMS       kernels one device (emu or GPU) runs at once, 1..16 (4 with several devices, 1 with one)
       ADSM_WRITE_THROUGH 1: kernels' outputs come home before the next call (0: write-back)
       ADSM_SYNC_HOME     lazy, rolling: 1 brings home, in adsm_sync, a kernel's output of at most
                          64 KiB that the CPU read after one of the last syncs (section 4); 0
                          leaves every output to the CPU's fault              (1)
       ADSM_DROP_REPLICAS 1: read copies are dropped after each kernel (0: kept until a write)
       ADSM_AFFINITY_BLOCK B >= 1: objects belong to devices B at a time in allocation order (0: none)
       ADSM_FAULT_ENGINE  auto | mprotect | userfaultfd                (auto = mprotect)
                          userfaultfd (emu, Linux 6.4+) write-protects ReadOnly pages one by one
                          instead of splitting mappings, so one thread's write faults cost the same
                          in small and huge objects, but threads faulting at once scale worse;
                          it raises SIGBUS, which adsm handles as it does SIGSEGV
       ADSM_LOG           error | warn | info | debug                  (warn)
       ADSM_DEVICE        cuda: the one GPU to drive                   (0)
       ADSM_DEVICES       cuda: several GPUs, "all" or ordinals such as 0,2, device 0 first,
                          at most 8                                    (one GPU: ADSM_DEVICE)
       ADSM_CUDA_STAGING  bytes per pinned staging buffer (2 per direction), 64K..1G  (8M)
       ADSM_CUDA_SAME_ADDRESS  1: device addresses equal host addresses where the driver allows,
                          0: always translate (the fastest placement measured, for programs
                          whose kernels follow no pointers stored in objects)  (1)
       ADSM_CUDA_DMA_VIEW 1: under shared addresses, objects' host pages are shared memory with a
                          second view the driver page-locks (DMA, no CPU copy); 0: anonymous
                          huge pages, copies through pinned staging     (1)
                          (README, "Choosing a placement on cuda")
       ADSM_CUDA_ALIAS_COLLAPSE 1: that shared memory in 2 MiB pages (MADV_COLLAPSE, Linux 6.1+)
                          where shmem_enabled gives none; 0: 4 KiB pages there (about 1 ms per
                          MiB to make and first write)   (1)
       ADSM_CUDA_COLLAPSE_SHARED 1: a 2 MiB page small objects share is collapsed too (by the
                          first made there covering half of it); 0: 4 KiB pages there   (1)
       ADSM_CUDA_MAP_AHEAD bytes of device memory mapped at adsm_init for the first objects and
                          adsm_dev_alloc buffers (one GPU): they map nothing at allocation;
                          0: each maps its own    (256M, at most 1/64 of the GPU's memory;
                          0 under um, um-prefetch and hmm, whose objects need none)
       ADSM_PREPARE_THREADS cuda: threads, the caller's included, that allocate and zero a large
                          new object's host pages (and an adsm_host_alloc buffer's) before the
                          driver page-locks them, in runs of 2 MiB pages, 1..16; 0: half the
                          CPUs up to 8 where there are 4 or more, else 1   (0)
       ADSM_HOST_ON_FIRST_USE 1: under shared addresses with that second view, and lazy or rolling,
                          an object's host pages are made and page-locked when the CPU or a
                          fetch first needs them (an object only kernels use costs no host
                          memory; CPU stores into a kernel's output of 16 MiB or more make
                          them only past 4 MiB of distinct blocks, staged until then); 0: at
                          adsm_alloc   (1)
       ADSM_CUDA_DRIVER   driver library to load                       (libcuda.so.1, then libcuda.so)
       ADSM_NVRTC_LIBRARY NVRTC library for adsm_module_load_source    (libnvrtc.so.N for the driver's
                          major N down to 12, then libnvrtc.so if not newer than the driver)
       ADSM_TRACE         file to write at adsm_shutdown: a timeline of faults, fetches, copies,
                          evictions, kernels, I/O pieces, protection changes, calls, syncs and
                          objects made and freed in Chrome's trace-event JSON (opens in
                          Perfetto or chrome://tracing; bench/trace_timeline.py draws it). Up to
                          1M events; later ones are dropped and counted. A path that cannot
                          be written is warned about at adsm_init and when writing fails.
                                                                       (none; adsm_config.trace)

   4. PROTOCOLS
   ============
   Block states (CPU view): Invalid (device copy only, PROT_NONE), ReadOnly (both valid,
   PROT_READ; with the userfaultfd engine, readable and write-protected), Dirty (host newer,
   PROT_READ|PROT_WRITE).
       batch    no tracking: every object goes to the device at each call; at sync the objects
                kernels were given as OUT/INOUT come back (and only those). adsm_memcpy,
                adsm_memset and the I/O calls bring such an object home first.
       lazy     whole objects: first CPU touch of an Invalid object fetches it; dirty objects are
                flushed at the call. Lazy and rolling alike: an output of at most 64 KiB the CPU
                read after a sync (a result, a count) comes home in the next 4 syncs after a
                kernel wrote it, without the fault (adsm_stats.sync_fetches); then a read fault
                renews that (ADSM_SYNC_HOME=0: never). One the CPU also writes comes home Dirty
                beside a copy of its bytes, and each call compares instead of copying it.
       rolling  lazy at block granularity, plus at most "rolling size" Dirty blocks: the oldest is
                sent to the device asynchronously while the CPU goes on (the default).
                The adaptive rolling size (ADSM_ROLLING_SIZE=0) starts at ADSM_ROLLING_STEP
                blocks per live object. A block written again after its eviction, before the
                next kernel call, was sent for nothing: the size grows to cover that (at least
                doubling; never past twice the blocks dirtied since the call, nor past the blocks
                of all live objects, where rolling becomes lazy per block and cannot thrash). A
                call after an epoch with no such regret halves it when that epoch evicted or used
                at most half of it. adsm_stats.rolling_size and .rolling_regrets show it work.
                With blocks smaller than 2 MiB a fault takes more than its block (unless
                ADSM_BLOCK_EXACT=1): a fetch brings the Invalid blocks of its 2 MiB huge page
                home in one copy (but a store that is its object's first fetch since the last
                call, a spot update of a kernel's output, brings its block alone); a write
                fault right after the run the previous one on the
                same object made Dirty (a sequential phase; each object keeps its own, so
                arrays filled side by side are each sequential) makes a run twice as long
                Dirty, up to 2 MiB; and once
                regrets grew the window, a write fault takes the idle blocks of its huge page
                (of its object once the window holds half of the live blocks; a fetch too) when
                they fit the window without evicting, as lazy would.
       um, um-prefetch  (cuda only, for comparison) objects in CUDA managed memory
                (cuMemAllocManaged), kept coherent by the driver: nothing is protected, no
                fault reaches adsm. um-prefetch prefetches every object a kernel names to the
                device before the launch and, at adsm_sync, those it may have written back home;
                prefetched bytes count in adsm_stats. Between a call and adsm_sync the CPU leaves
                the kernel's outputs alone (as under batch); adsm_memcpy, adsm_memset and the I/O
                calls on them wait for the kernel first. One GPU; refused on emu and host.
       hmm      (cuda only, for comparison) objects in plain host memory (anonymous pages, as
                malloc gives), which kernels reach through the GPU's pageable memory access
                (HMM, or ATS on a coherent link): the driver and the kernel migrate or map pages
                on faults, nothing is protected. Refused, saying so, where the GPU does not report
                CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, and on emu and host. One GPU.

   5. BACKENDS
   ===========
       emu   a discrete accelerator emulated by a process of its own that owns device memory at
             the same addresses; a DMA thread copies asynchronously; kernels run on a worker pool
             in that process (grids of up to 256 threads on one thread). Host and device memory
             are really separate: coherence bugs show up.
       host  the device is the CPU: no copies, no faults, kernels run in the calling process.
       cuda  an NVIDIA GPU through the CUDA driver API, loaded at run time (no CUDA needed to
             build; a CUDA 12.0 or newer driver to run). ADSM_BACKEND=auto picks it when a device
             answers; otherwise (no libcuda, the toolkit's stub library, no device, an old driver)
             it reports ADSM_ERROR_BACKEND_UNAVAILABLE with the reason and auto moves on to emu.
             A kernel written once with ADSM_KERNEL_DEF is compiled by NVRTC (loaded with
             dlopen) at its first launch, or earlier with ADSM_PREPARE(name), once per process.
             A kernel declared with ADSM_KERNEL comes from a module instead: write it a second
             time as CUDA C,
                 extern "C" __global__ void vecadd(float *c, const float *a, const float *b,
                                                   size_t n)
             with the ADSM_KERNEL parameters in the same order and sizes, keep it next to the CPU
             body with ADSM_CUDA_SOURCE, and load it once with adsm_module_load_source, or load
             PTX/cubin/fatbin with adsm_module_load_image/_file; a loaded kernel of the same name
             also wins over an ADSM_KERNEL_DEF body (hand-tuned versions). A launch finds the kernel by name (ADSM_ERROR_KERNEL_NOT_FOUND) and, on
             drivers that can tell (12.4+), refuses one whose parameter sizes differ from the
             declaration. Objects keep one address on host and device whenever the driver
             allows it; otherwise pointer arguments are translated at each launch
             (adsm_stats.translated_args counts them) and adsm_safe() gives the device address,
             but kernels cannot follow pointers stored in shared memory. Copies run on their own
             streams, ordered with events against the kernel streams. Where the driver page-locks
             the objects' host pages they are DMA on those pages: the pages themselves under
             translated addresses; under shared addresses, where they are device address space,
             a second view of them (host memory is then a shared-memory file mapped twice;
             ADSM_CUDA_DMA_VIEW=0 turns that off; under lazy and rolling that view's pages are
             made and page-locked at the object's first use, so an object only kernels use
             takes no host memory: ADSM_HOST_ON_FIRST_USE). Otherwise, and for an object the
             driver had no lockable memory for, they go through pinned staging buffers
             (adsm_stats.staged_bytes, ADSM_LOG=info says which). NVRTC
             compiles to PTX, or to a cubin for the GPU's own architecture where the NVRTC is a
             later minor release than the driver (whose PTX the driver would refuse). Do not
             pass shared pointers to your own CUDA calls (cudaMemcpy, cuMemcpy...): the driver
             reads and writes them behind adsm's page protection; use adsm_memcpy, adsm's
             explicit copies or a kernel.
             Driver errors carry the driver's name for them (CUDA_ERROR_...): a refused launch is
             ADSM_ERROR_LAUNCH_FAILED at adsm_sync; a kernel fault (illegal address, ...) is
             ADSM_ERROR_KERNEL_CRASHED, after which the device is lost (ADSM_ERROR_DEVICE_LOST),
             as CUDA contexts do not recover; host copies stay readable.

   SEVERAL DEVICES (emu: ADSM_EMU_DEVICES=N, N device processes with their own memory at the same
   addresses; cuda: ADSM_DEVICES=all or a list of GPUs, else one; host drives one).
   adsm_device_count() says how many. On cuda, GPUs other than device 0 cannot have the host's
   addresses (one address names one mapping in the process): adsm translates their kernels'
   pointer arguments, and pointers stored inside objects are followed only on a GPU whose objects
   sit at their host addresses (device 0, unless ADSM_LOG=info says it translates too).
   ADSM_CALL_ON(dev, name, grid, args...) runs a kernel on device dev; ADSM_CALL lets adsm choose
   the device holding most of the bytes the kernel writes (owner computes). Before a launch on a
   device, every object the kernel names (IN, OUT, INOUT) is made current there: from the host
   when the CPU's copy is current, else from the device holding it (device to device, not
   through the CPU); copies taken stay there as read replicas until someone writes the object. A
   kernel that writes an object leaves its device the only holder; the CPU's next touch reads it
   from there; a CPU write makes every device copy stale. A call sends the CPU's changes to the
   objects its kernel names only when there are several devices (the others wait on the host for
   a kernel that names them), so a kernel may then follow stored pointers only into objects it is
   given, or reaches through declared pointer fields (ADSM_TYPE: adsm finds those at the launch,
   reading the typed objects' fields, and makes them current on the kernel's device too). Kernels on different devices run at the same time, and each device runs up to
   ADSM_STREAMS (default 4) kernels at once (emu: threads; cuda: CUDA streams): a kernel waits for
   the copies of its own objects and the earlier kernels whose objects conflict with its own (one
   writes what the other reads or writes). One device runs kernels in issue order unless
   ADSM_STREAMS asks for more; then, as with several devices, kernels must name what they touch
   (a kernel that reads through a stored pointer an object an earlier kernel writes must name
   it, and adsm_free waits only for the kernels that named the object).
   adsm_dev_alloc_on(dev, size) gives a device buffer on a chosen device (adsm_dev_alloc: device
   0), for explicit multi-device programs; adsm_memcpy between buffers of two devices copies
   device to device. The batch protocol drives one device.
   adsm_get_device_stats(dev, &s) gives each device's bytes from the host, to the host and from
   other devices, its launches and evictions. A fixed affinity of objects to devices replaces
   owner computes by location: adsm_config.affinity_block (ADSM_AFFINITY_BLOCK=B) deals objects
   to devices B at a time in allocation order, adsm_set_affinity(ptr, dev) sets one object's.
   Each device's memory is a cache: a launch that does not fit evicts the objects its device used
   least recently (what only it held is written back first), and a kernel whose own objects do
   not fit one device fails with ADSM_ERROR_DEVICE_OUT_OF_MEMORY before anything moves.
   adsm_config.write_through (ADSM_WRITE_THROUGH=1) brings every kernel's output home before the
   next call or sync; adsm_config.drop_replicas (ADSM_DROP_REPLICAS=1) keeps no copy on a device
   of what a kernel only read there. A device that dies is reported once by the next adsm_sync
   (naming it); launches on it fail with ADSM_ERROR_DEVICE_LOST and the others keep working.

   6. ERRORS
   =========
   Every fallible call returns adsm_result (ADSM_OK = 0, errors < 0); calls returning pointers
   return NULL. adsm_last_result() and adsm_last_error() give the code and a readable message of
   the calling thread's last failure; adsm_result_string() names a code. adsm never aborts on a
   user mistake. adsm_free(NULL) is ADSM_OK; adsm_alloc(0) is NULL with ADSM_ERROR_INVALID_VALUE;
   freeing an unknown pointer or freeing twice is ADSM_ERROR_NOT_SHARED; an interior pointer is
   ADSM_ERROR_NOT_OBJECT_START. Errors that come from the CUDA driver quote its own error name
   and description.

   7. THREADS, SIGNALS AND FORK
   ============================
   Any thread may touch shared memory, allocate, free, launch and sync; all calls are thread safe.
   adsm_shutdown may race with other threads' calls: each call either finishes before shutdown
   frees anything (shutdown waits for it) or runs after it, as any call after shutdown does
   (initialising again, or "not initialised" for old pointers). A thread blocked in adsm_read and
   friends (a pipe, a socket) does not hold shutdown up; its call then fails with ECANCELED.
   Touching shared memory after (or during) shutdown is a crash, as after adsm_free (during it,
   adsm says why first).
   adsm installs a SIGSEGV handler (SA_SIGINFO). Faults outside shared memory go to the program's
   own SIGSEGV disposition, or to the default action, so stray accesses still crash. The
   implementation also defines sigaction() and signal(): while adsm is initialised, a SIGSEGV
   disposition the program (or a library) sets, before or after adsm_init, becomes the one adsm
   passes foreign faults to, and is what sigaction() reads back; adsm's handler stays first.
   That disposition is honoured as the kernel would: the handler runs with its sa_mask (and
   SIGSEGV unless SA_NODEFER) added to the interrupted code's mask, SA_RESETHAND puts SIG_DFL
   back as it is entered (a crash reporter that returns sees the fault again and the process
   dies of it), and SIG_IGN ignores a SIGSEGV sent with kill() but not a real fault. One
   difference: it runs on the thread's alternate signal stack whenever there is one, even
   without SA_ONSTACK (adsm's own handler asks for it).
   With ADSM_FAULT_ENGINE=userfaultfd the same holds for SIGBUS, which that engine's write
   faults raise. adsm holds a few descriptors (/proc/self/mem, the userfaultfd, the emulated
   device's socket); a program that closes them behind adsm's back (a daemon closing everything
   after adsm_init) loses no data: adsm notices (at the next kernel call or protection change),
   says so once, goes on with mprotect and sends the data the CPU may have written unseen, and
   never writes through a number that may be the program's file now. The emulated device cannot
   go on without its socket: its next call reports the device lost.
   It also defines pthread_sigmask() and sigprocmask(), and strips SIGSEGV and SIGBUS from the
   masks set through them and from other signals' handler masks: a thread that blocks every signal (a
   thread-pool habit) still gets its faults on shared memory resolved (the kernel would kill a
   thread that faults with SIGSEGV blocked, without a word). Define ADSM_NO_INTERPOSE_SIGNALS to
   opt out of all of this (then install your handler before adsm_init, and never block SIGSEGV
   in a thread that touches shared memory). Two masks escape it: a thread libc starts itself
   with every signal blocked (a timer_create or mq_notify SIGEV_THREAD callback) must unblock
   SIGSEGV and SIGBUS (pthread_sigmask(SIG_UNBLOCK, ...)) before it touches shared memory, and a
   SIGSEGV handler of yours that leaves by longjmp leaves SIGSEGV blocked (as it would without
   adsm): leave it with siglongjmp to a sigsetjmp(env, 1) instead, which restores the mask. libc's own calls are found with dlsym, so a fully
   static program (-static) must define it: without, adsm_init refuses, saying so. A fault adsm
   cannot resolve (memory no live object holds, a device buffer, a failed protection change or
   copy) is explained on stderr before the process dies with SIGSEGV; the first kind is left
   silent when the program has its own handler. The threads adsm starts (copy engines, completion
   and kernel workers, preparers) block every signal but SIGSEGV and SIGBUS, so a signal sent to
   the process (a SIGTERM read from a signalfd, a timer's) reaches the program's threads only.
   Debugging with gdb: `handle SIGSEGV nostop noprint pass` lets adsm's faults through, and
   `break adsm__fault_unresolved` stops at a real crash (backtrace down to the faulting line).
   Do not touch shared memory from your own signal handlers (adsm reports it and crashes instead
   of deadlocking when the interrupted thread was inside adsm). A forked child of an adsm program
   may only exec or _exit: adsm's threads and devices stay with the parent, so in the child every
   call that needs them (allocations, frees, launches, explicit copies, modules, adsm_init)
   fails with ADSM_ERROR_UNSUPPORTED; adsm_memcpy, adsm_memset and I/O act as the child's CPU
   would (plain memory works, so interposed calls before an exec do), adsm_sync has nothing to
   wait for, and a touch of shared memory that needs adsm is explained on stderr before the
   child dies (a fork made while adsm is not running may start its own). The emu backend's device process (forked by adsm_init) keeps only
   descriptors 0, 1 and 2 of the program's, so pipes, sockets and file locks behave as without
   adsm; what a kernel body prints to stdout/stderr is flushed when the kernel ends (ps shows it
   as adsm-emu-device). It is not a child of the program (adsm_init forks it through a process
   that exits at once, so init or the nearest child subreaper adopts it): a loop that reaps every
   child (wait() until ECHILD) ends, and the program's SIGCHLD handler never hears of it (only
   of the go-between's exit, once, inside adsm_init; adsm reaps the go-between itself). Only
   where the program itself adopts orphans (PID 1 of a container, PR_SET_CHILD_SUBREAPER) is the
   device its child again: such a loop waits for it there, so wait for your own pids or call
   adsm_shutdown first (adsm reaps it then).

   8. I/O AND BULK MEMORY
   ======================
   The kernel does not fault on a protected page inside a system call; it returns EFAULT, and a
   half-done read cannot be restarted. So use these on shared memory (they are the plain libc
   calls when no shared object is involved, and never initialise adsm):
       adsm_read  adsm_write  adsm_pread  adsm_pwrite  adsm_fread  adsm_fwrite  adsm_readv  adsm_writev
   Same arguments, return values and errno as libc. Data moves through a bounce buffer in pieces
   of about one block (1..8 MiB): a large read into a rolling object evicts the blocks already
   read while the next piece is read. Bytes read from a file are Dirty on the host; writing a
   range that is Invalid fetches only the blocks it covers. On pipes and sockets the first piece
   blocks like read(2) would; later pieces are read only if data is already waiting. Sockets
   that keep message boundaries (SOCK_SEQPACKET, SOCK_DGRAM) get one call for the whole count.
   The bounce buffer sits at the same offset within a page as your buffer, so O_DIRECT accepts
   and refuses the same buffers as it would without adsm; idle bounce buffers are reused. On
   cuda under shared addresses a regular file needs no bounce buffer: its bytes go straight
   between the file and the objects' always-writable second view (the host alias).
       #define ADSM_INTERPOSE_IO    before ADSM_IMPLEMENTATION: that translation unit also defines
                                    read, write, pread, pwrite, fread, fwrite, readv, writev
                                    (C++ streams write through writev; pread64 and
                                    pwrite64 too, what _FILE_OFFSET_BITS=64 calls, and the
                                    checked __read_chk, __pread_chk, __pread64_chk and
                                    __fread_chk that _FORTIFY_SOURCE calls where the compiler
                                    knows a buffer's size), so unchanged code works on shared
                                    memory. Fortify's checks stay: an overflowing call ends the
                                    process as libc's would. Builds with gcc and clang, C and
                                    C++, at every _FORTIFY_SOURCE level. Other I/O calls
                                    (preadv, fgets, ...) are not covered. Also in a static
                                    program (-static, glibc), where libc's own are reached
                                    without dlsym.
   adsm_memset / adsm_memcpy act where the valid copy is: memset of a whole Invalid or ReadOnly
   block runs on the device only and leaves it Invalid (nothing moves, no host page is touched;
   the CPU's next read fetches it); memcpy into whole device-valid blocks copies device to device
   (d2d_bytes), a Dirty source of 64 KiB or more sent to the device first (the next launch
   would send it anyway);
   overlapping ranges act as memmove. They go block by block, so one that fails part way (the
   kernel refusing a protection change at vm.max_map_count, a lost device) returns the error
   with the blocks before the failure written and the rest as they were, as a plain memset
   interrupted there would leave them; the error says which step failed.
       #define ADSM_INTERPOSE_MEM   also defines memset and memcpy (and the checked
                                    __memset_chk, __memcpy_chk). Calls the compiler inlines
                                    (small constant sizes) never reach it: use adsm_memset /
                                    adsm_memcpy where it matters. Not in a static program:
                                    libc itself calls memcpy there before threads exist.

   The explicit path, for baselines and programs that mix styles: adsm_dev_alloc gives a device
   buffer (the CPU must not touch it), adsm_copy_to_device / adsm_copy_from_device copy between it
   and plain host memory after every launch issued so far, adsm_dev_free releases it, and
   ADSM_CALL accepts such device pointers as arguments. adsm_memset and adsm_memcpy accept them
   too (on either side of a copy, with plain or shared memory on the other): the device does the
   work, after every launch issued so far. No coherence: what you copy is what the
   device has. adsm_host_alloc gives host memory of the kind adsm's own objects live on (page
   granular; from 2 MiB up 2 MiB aligned on transparent huge pages; on cuda page-locked with the
   driver, so copies to and from it are DMA without staging), the fair host side of an explicit
   program; adsm_host_free frees it, and adsm_shutdown frees those still live (as it frees objects).

   MPI: a program that includes the companion header adsm_mpi.h (after mpi.h, with
   ADSM_MPI_IMPLEMENTATION in one file) may hand shared memory to its MPI calls: MPI gets plain
   host mirrors, filled and emptied with adsm_memcpy (its top comment; docs/usage.md). Without
   it, give MPI plain memory only: its transports reach other processes' pages through system
   calls (EFAULT on protected pages), and a CUDA-aware MPI takes shared objects for device memory.
   adsm_is_shared and adsm_touch (above, with the I/O calls) are what such wrappers build on.

   9. LIMITS
   ==========
   x86-64 and aarch64 Linux. Objects are page granular (a 1-byte object uses a page). Each run of
   pages with its own protection is one kernel mapping (vm.max_map_count); prefer large blocks.
   At that limit adsm moves data rather than fail: a read fetches the Invalid blocks up to the
   nearest ReadOnly run and joins it, an invalidation takes clean ReadOnly neighbours along
   (adsm_stats.map_limit_merges counts both). Where neither helps, the call returns
   ADSM_ERROR_SYSTEM (a fault: a message on stderr) naming the limit and the remedy.
   Address space: adsm reserves about 3 x 2 x ADSM_EMU_MEMORY (at least 64 GiB per view when
   allowed) without using memory for it. Under an address-space limit (ulimit -v) the default
   emulated device shrinks to fit (logged at info); a size the program set that does not fit is
   refused with the numbers. adsm needs about 3.5 GiB of the limit at least.
   A program that calls mlockall(MCL_FUTURE) keeps working: adsm's own large mappings are left
   unlocked (under a locked-memory limit, ulimit -l, the kernel refuses the reservation itself,
   and adsm_init says so).
*/
/* The implementation needs Linux extensions (memfd, MAP_NORESERVE, futex); they must be requested
   before the first system header of the translation unit, so include adsm.h first there. */
#if defined(ADSM_IMPLEMENTATION) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE 1
#endif

#ifndef ADSM_H_INCLUDED
#define ADSM_H_INCLUDED

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h> /* struct iovec: adsm_readv, adsm_writev */

#define ADSM_VERSION_MAJOR 0
#define ADSM_VERSION_MINOR 1
#define ADSM_VERSION_PATCH 0
#define ADSM_VERSION_STRING "0.1.0"

#ifndef ADSM_API
#ifdef __cplusplus
#define ADSM_API extern "C"
#else
#define ADSM_API extern
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- results: one list, codes and messages ------------------------------------------------ */
#define ADSM_RESULT_LIST(X)                                                                      \
    X(ADSM_OK, 0, "success")                                                                     \
    X(ADSM_ERROR_INVALID_VALUE, -1, "invalid argument value")                                    \
    X(ADSM_ERROR_INVALID_CONFIG, -2, "invalid configuration")                                    \
    X(ADSM_ERROR_NOT_SHARED, -3, "pointer is not inside a live shared object")                   \
    X(ADSM_ERROR_NOT_OBJECT_START, -4, "pointer is inside a shared object but not at its start") \
    X(ADSM_ERROR_OUT_OF_MEMORY, -5, "out of host memory or address space")                       \
    X(ADSM_ERROR_DEVICE_OUT_OF_MEMORY, -6, "out of device memory")                               \
    X(ADSM_ERROR_BACKEND_UNAVAILABLE, -7, "backend not available")                               \
    X(ADSM_ERROR_KERNEL_WROTE_INPUT, -8, "kernel wrote memory it may only read")                 \
    X(ADSM_ERROR_KERNEL_CRASHED, -9, "kernel crashed")                                           \
    X(ADSM_ERROR_NO_KERNEL_BODY, -10, "kernel has no body for this backend")                     \
    X(ADSM_ERROR_DEVICE_LOST, -11, "device lost")                                                \
    X(ADSM_ERROR_SYSTEM, -12, "operating system call failed")                                    \
    X(ADSM_ERROR_ALREADY_INITIALIZED, -13, "runtime already initialised")                        \
    X(ADSM_ERROR_UNSUPPORTED, -14, "not supported")                                              \
    X(ADSM_ERROR_KERNEL_NOT_FOUND, -15, "no loaded module has a kernel of that name")            \
    X(ADSM_ERROR_INVALID_MODULE, -16, "module image or source rejected")                         \
    X(ADSM_ERROR_LAUNCH_FAILED, -17, "kernel launch failed")                                     \
    X(ADSM_ERROR_DRIVER, -18, "device driver call failed")

typedef enum adsm_result {
#define ADSM__RESULT_ENUM(name, value, text) name = value,
    ADSM_RESULT_LIST(ADSM__RESULT_ENUM)
#undef ADSM__RESULT_ENUM
    ADSM__RESULT_END_ = -19
} adsm_result;

/* ---- configuration ------------------------------------------------------------------------ */
typedef enum adsm_backend_kind {
    ADSM_BACKEND_DEFAULT = 0, /* environment, else auto */
    ADSM_BACKEND_AUTO,
    ADSM_BACKEND_EMU,
    ADSM_BACKEND_HOST,
    ADSM_BACKEND_CUDA
} adsm_backend_kind;

typedef enum adsm_protocol_kind {
    ADSM_PROTOCOL_DEFAULT = 0, /* environment, else rolling */
    ADSM_PROTOCOL_BATCH,
    ADSM_PROTOCOL_LAZY,
    ADSM_PROTOCOL_ROLLING,
    ADSM_PROTOCOL_UM,          /* cuda: objects in CUDA managed memory, the driver's coherence */
    ADSM_PROTOCOL_UM_PREFETCH, /* cuda: the same, with prefetches from the kernel annotations */
    ADSM_PROTOCOL_HMM          /* cuda, where the GPU reaches pageable memory: objects in plain
                                  host memory, the driver's and the kernel's (HMM) coherence */
} adsm_protocol_kind;

typedef enum adsm_log_level {
    ADSM_LOG_DEFAULT = 0,
    ADSM_LOG_ERROR,
    ADSM_LOG_WARN,
    ADSM_LOG_INFO,
    ADSM_LOG_DEBUG
} adsm_log_level;

/* How adsm sees a CPU write to data the device has a copy of (docs/design.md section 4). */
typedef enum adsm_fault_engine_kind {
    ADSM_FAULT_ENGINE_DEFAULT = 0, /* environment, else auto */
    ADSM_FAULT_ENGINE_AUTO,        /* mprotect (docs/design.md section 4 says why) */
    ADSM_FAULT_ENGINE_MPROTECT,    /* ReadOnly is PROT_READ; a write raises SIGSEGV */
    ADSM_FAULT_ENGINE_USERFAULTFD  /* ReadOnly is write-protected page by page; a write raises SIGBUS */
} adsm_fault_engine_kind;

typedef struct adsm_config {
    adsm_backend_kind backend;
    adsm_protocol_kind protocol;
    size_t block_size;   /* bytes; 0 = ADSM_BLOCK_SIZE or the default */
    size_t rolling_size; /* 0 = ADSM_ROLLING_SIZE or adaptive */
    size_t rolling_step; /* 0 = ADSM_ROLLING_STEP or 2 */
    size_t emu_memory;   /* bytes; 0 = ADSM_EMU_MEMORY or the default */
    unsigned emu_workers;
    adsm_log_level log_level;
    int device;          /* cuda: device ordinal + 1 (0 = ADSM_DEVICE or the first device); one GPU */
    size_t cuda_staging; /* cuda: bytes per pinned staging buffer; 0 = ADSM_CUDA_STAGING or 8M */
    const char *trace;   /* file for a Chrome/Perfetto trace of adsm's work; NULL = ADSM_TRACE or none */
    int block_exact;     /* rolling: 1 = one block per fault, no huge-page fetches or write-ahead
                            (0 = ADSM_BLOCK_EXACT or off) */
    unsigned emu_devices; /* emu: emulated devices, 1..8 (0 = ADSM_EMU_DEVICES or 1) */
    unsigned streams; /* kernels one device may run at once, 1..16 (0 = ADSM_STREAMS, else 4
                             with several devices, 1 with one): a kernel waits only for the earlier
                             ones its objects conflict with */
    int write_through;    /* 1: a kernel's output comes home before the next call or sync, as the
                             multi-GPU paper's write-through (0 = ADSM_WRITE_THROUGH or write-back) */
    int drop_replicas;    /* 1: a device keeps no copy of what a kernel only read there when another
                             copy exists (0 = ADSM_DROP_REPLICAS or kept until a write) */
    size_t affinity_block; /* several devices: B >= 1 gives shared objects to devices block-cyclically
                             in allocation order, B at a time; ADSM_CALL then runs a kernel on the
                             device its outputs belong to (0 = ADSM_AFFINITY_BLOCK or none: where
                             their bytes are) */
    const char *devices;  /* cuda: the GPUs to drive, "all" or ordinals such as "0,2", device 0 first
                             (NULL = ADSM_DEVICES, else the one GPU `device` names) */
    adsm_fault_engine_kind fault_engine; /* 0 = ADSM_FAULT_ENGINE or auto */
    int emu_check_bounds; /* emu: 1 = a kernel's access just outside a shared object or device buffer
                             fails its launch, naming kernel, object and offset (guard pages between
                             objects; 0 = ADSM_EMU_CHECK_BOUNDS or off) */
} adsm_config;

/* ---- statistics --------------------------------------------------------------------------- */
typedef struct adsm_stats {
    uint64_t h2d_bytes, d2h_bytes, d2d_bytes; /* bytes copied host->device, device->host, device->device */
    uint64_t h2d_copies, d2h_copies, d2d_copies;
    uint64_t read_faults, write_faults;       /* CPU faults on shared memory the runtime resolved */
    uint64_t evictions;                       /* rolling: blocks sent to the device eagerly */
    uint64_t launches;                        /* kernel launches accepted */
    uint64_t fault_ns;                        /* time spent resolving faults */
    uint64_t h2d_ns, d2h_ns;                  /* time spent copying each way (async copies included) */
    uint64_t objects, object_bytes;           /* live shared objects and their bytes (not reset) */
    uint64_t translated_args;                 /* cuda: pointer arguments moved to device addresses
                                                 (non-zero only when device and host addresses differ) */
    uint64_t d2h_moved_bytes;  /* of d2h_bytes, those brought into protected pages with one copy: staged,
                                  then moved over the block whole (mremap of 2 MiB huge pages) */
    uint64_t d2h_forced_bytes; /* ... those written through /proc/self/mem (a kernel bounce copy): pieces
                                  smaller than a huge page; the rest went straight to writable memory */
    uint64_t staged_bytes;     /* cuda: bytes copied through adsm's pinned staging buffers (either way); 0
                                  where shared objects are page-locked and the DMA uses their pages */
    uint64_t rolling_regrets;                 /* rolling: evicted blocks written again before the next
                                                 call (each one grows the adaptive rolling size) */
    uint64_t rolling_size;                    /* rolling: the rolling size now, in blocks (not reset) */
    uint64_t map_limit_merges;                /* at vm.max_map_count: reads that fetched more blocks to
                                                 join a ReadOnly run, invalidations that took clean
                                                 ReadOnly neighbours along (instead of failing) */
    uint64_t translated_fields; /* declared pointer fields of typed objects passed between host and
                                   device addresses, NULL ones too (each way counts; 0 where the
                                   addresses agree) */
    uint64_t translation_bytes; /* bytes copied to and from devices to translate them (also in
                                   h2d_bytes and d2h_bytes) */
    uint64_t protection_changes; /* changes of shared memory's page protection the protocol made
                                    (each an mprotect, or with ADSM_FAULT_ENGINE=userfaultfd one or
                                    two system calls): with the faults, the price of tracking the
                                    CPU's accesses, which an explicit program does not pay */
    uint64_t sync_fetches; /* lazy, rolling: small outputs (64 KiB at most) adsm_sync brought home
                              because the CPU had read them after earlier kernels: each a read
                              fault spared, or a copy nobody reads if the habit changed */
} adsm_stats;

/* ---- kernels -------------------------------------------------------------------------------- */
typedef struct adsm_dim3 {
    uint32_t x, y, z;
} adsm_dim3;

/* Grid and block dimensions, and the range [begin, end) of flattened global thread indices this
   invocation of a kernel body covers. */
typedef struct adsm_grid {
    adsm_dim3 grid, block;
    size_t begin, end;
} adsm_grid;

typedef enum adsm_access {
    ADSM_ACCESS_VALUE = 0,
    ADSM_ACCESS_IN,
    ADSM_ACCESS_OUT,
    ADSM_ACCESS_INOUT
} adsm_access;

typedef struct adsm_param_desc {
    const char *name;
    adsm_access access;
    size_t offset, size; /* of the parameter in the packed argument struct */
} adsm_param_desc;

typedef struct adsm_kernel_desc {
    const char *name;
    unsigned nparams;
    size_t args_size;
    const adsm_param_desc *params;
    void (*entry)(adsm_grid g, const void *args); /* unpacks args and calls the body */
    void (*body)(void);                            /* NULL when the program defines no body */
    /* Single-source kernels (ADSM_KERNEL_DEF): the kernel as CUDA C, compiled by the cuda backend
       at its first launch when no loaded module has it, and the ADSM_SHARED declarations of its
       translation unit that go before it. Both NULL for ADSM_KERNEL. */
    const char *cuda_source;
    struct adsm__shared *const *shared;
} adsm_kernel_desc;

/* One ADSM_SHARED block: its text for the device side, linked in source order per translation unit. */
typedef struct adsm__shared {
    const char *text;
    int order;
    struct adsm__shared *next;
} adsm__shared;

/* ---- pointer structures: the pointer fields of a struct type ------------------------------ */
/* Declared with ADSM_TYPE (below); an object given a type holds a whole number of its structs. */
typedef struct adsm_type_desc adsm_type_desc;

typedef struct adsm_field_desc {
    const char *name;
    size_t offset;                /* of the field in its struct */
    size_t count;                 /* pointers in the field: 1, or the length of an array of them */
    const adsm_type_desc *target; /* the declared type it points to; NULL: plain data */
    int nullable;                 /* 0: NULL in this field is an error where it is translated */
} adsm_field_desc;

struct adsm_type_desc {
    const char *name;
    size_t size; /* sizeof the struct */
    unsigned nfields;
    const adsm_field_desc *fields;
};

/* ---- API ---------------------------------------------------------------------------------- */
ADSM_API adsm_result adsm_init(const adsm_config *cfg);
ADSM_API void adsm_shutdown(void);

ADSM_API void *adsm_alloc(size_t size);
ADSM_API void *adsm_safe_alloc(size_t size);
ADSM_API void *adsm_safe(const void *host_ptr);
/* A shared object of `count` structs of a declared type (ADSM_ALLOC(T, count) casts it), and the
   type of an existing object (its start; its size a whole number of the type's structs; NULL
   takes the type away). Where a device's addresses differ from the host's, the pointer fields of
   typed objects hold that device's addresses while its kernels run (docs/usage.md, "Pointer
   structures"). */
ADSM_API void *adsm_alloc_typed(const adsm_type_desc *type, size_t count);
ADSM_API adsm_result adsm_set_type(void *object, const adsm_type_desc *type);
/* Frees a shared object once no kernel may use it: with one device and one stream it waits for
   every kernel issued before the call (kernels may follow stored pointers), with several devices
   or ADSM_STREAMS > 1 for those that named the object; either way also for one another thread
   launched on it meanwhile.
   adsm_dev_free waits the same way for a device buffer. */
ADSM_API adsm_result adsm_free(void *ptr);

ADSM_API adsm_result adsm_sync(void);
ADSM_API adsm_result adsm_memset(void *dst, int value, size_t n);
ADSM_API adsm_result adsm_memcpy(void *dst, const void *src, size_t n);

/* I/O on shared memory (also on plain memory, where they are the libc calls). Same arguments,
   return values and errno as the libc functions; the buffer may lie anywhere, across objects and
   plain memory. See "I/O" in the documentation above. */
ADSM_API ssize_t adsm_read(int fd, void *buf, size_t count);
ADSM_API ssize_t adsm_write(int fd, const void *buf, size_t count);
ADSM_API ssize_t adsm_pread(int fd, void *buf, size_t count, off_t offset);
ADSM_API ssize_t adsm_pwrite(int fd, const void *buf, size_t count, off_t offset);
ADSM_API size_t adsm_fread(void *ptr, size_t size, size_t nmemb, FILE *stream);
ADSM_API size_t adsm_fwrite(const void *ptr, size_t size, size_t nmemb, FILE *stream);
/* readv/writev: buffer after buffer where one of them is shared (libstdc++'s std::ofstream::write
   calls writev), so not one system call there: a short transfer ends the call, as it may end a
   writev, and on a pipe or socket a read moves on to the next buffer only while data waits. */
ADSM_API ssize_t adsm_readv(int fd, const struct iovec *iov, int iovcnt);
ADSM_API ssize_t adsm_writev(int fd, const struct iovec *iov, int iovcnt);

/* For code that hands shared memory to something adsm cannot see (another process reading the
   pages, as MPI's transports do; a library that takes a buffer apart itself). adsm_is_shared: 1
   when any byte of [ptr, ptr + n) lies in a live shared object, else 0 (never initialises adsm).
   adsm_touch: makes the shared bytes of the range current on the host as CPU reads (write 0) or
   writes (write 1) of every byte would, without touching one: Invalid blocks are fetched, a
   kernel still writing them waited for, under batch an object a kernel wrote comes home first;
   with write the blocks become Dirty (the devices' copies stale). Plain memory in the range is
   left alone. Not a pin: a later kernel call or a rolling eviction changes the states again. */
ADSM_API int adsm_is_shared(const void *ptr, size_t n);
ADSM_API adsm_result adsm_touch(const void *ptr, size_t n, int write);

/* The explicit path, for programs that mix styles and for baselines: device-only buffers (a
   device address; the CPU must not touch it), synchronous copies ordered after every launch
   issued so far, and ADSM_CALL accepts these device pointers as kernel arguments. No coherence:
   what you copy is what the device sees. The host side of a copy must be plain memory. */
ADSM_API void *adsm_dev_alloc(size_t size);
/* A device buffer on device dev (adsm_dev_alloc is adsm_dev_alloc_on(0, ...)). Copies and
   adsm_memset/adsm_memcpy go to the device it lives on; a kernel given it runs there (ADSM_CALL),
   and ADSM_CALL_ON another device is refused. */
ADSM_API void *adsm_dev_alloc_on(int dev, size_t size);
ADSM_API adsm_result adsm_dev_free(void *dev);
ADSM_API adsm_result adsm_copy_to_device(void *dev, const void *host, size_t n);
ADSM_API adsm_result adsm_copy_from_device(void *host, const void *dev, size_t n);
/* Host memory for explicit copies: page aligned, and from 2 MiB up 2 MiB aligned on transparent
 * huge pages; page-locked with the driver on cuda (copies to and from it are direct DMA). Plain memory otherwise: the CPU uses it
 * freely, adsm does not track it. NULL (adsm_last_error) when it cannot be mapped. */
ADSM_API void *adsm_host_alloc(size_t size);
ADSM_API adsm_result adsm_host_free(void *host);

ADSM_API adsm_result adsm_launch(const adsm_kernel_desc *kernel, adsm_grid grid, const void *args);
/* The same on device `dev`, or on the device adsm picks with ADSM_ANY_DEVICE. */
#define ADSM_ANY_DEVICE (-1)
ADSM_API adsm_result adsm_launch_on(int dev, const adsm_kernel_desc *kernel, adsm_grid grid, const void *args);
/* Devices adsm drives: ADSM_EMU_DEVICES emulated devices on emu, 1 on cuda and host (0 before
   adsm_init and after adsm_shutdown). */
ADSM_API int adsm_device_count(void);
/* Bytes one device received and sent: from the host, to the host, from another device; with
   several devices also its memory as a cache: objects evicted to make room for a launch (their
   bytes, and those of them written back to the host first because only this device held them,
   counted in d2h_bytes too), and the bytes of objects it holds now. */
typedef struct adsm_device_stats {
    uint64_t h2d_bytes, d2h_bytes, d2d_bytes;
    uint64_t launches;
    uint64_t evictions, evicted_bytes, written_back_bytes;
    uint64_t resident_bytes; /* now, not a count: several devices only (one holds every object) */
} adsm_device_stats;
ADSM_API adsm_result adsm_get_device_stats(int dev, adsm_device_stats *out);
/* Fixes the device the shared object holding ptr belongs to: ADSM_CALL runs kernels that write it
   there (and rolling sends its blocks there until a kernel elsewhere uses it); dev -1 lets go of
   it (adsm then goes by where its bytes are). A way to lay out tiles 2D block-cyclically, or any
   other map. With one device it changes nothing. */
ADSM_API adsm_result adsm_set_affinity(const void *ptr, int dev);
/* Readies a kernel for its first launch now (cuda: compiles an ADSM_KERNEL_DEF body with NVRTC,
   so the compile is not paid inside the first ADSM_CALL); nothing to do on emu and host. */
ADSM_API adsm_result adsm_kernel_prepare(const adsm_kernel_desc *kernel);

/* Device code for the cuda backend. Kernels are found by their ADSM_KERNEL name in every module
   loaded so far. An image is PTX text (NUL-terminated), a cubin or a fatbin; size may be 0 for
   PTX. Source is CUDA C compiled at run time by NVRTC (loaded with dlopen), with `options`
   (NULL-terminated, may be NULL) passed to the compiler after adsm's own -arch. On the emu and
   host backends kernels run from their CPU bodies, so these calls only check their arguments (a
   file must be readable) and return ADSM_OK: a program that loads its CUDA code unconditionally
   runs unchanged on every backend. */
ADSM_API adsm_result adsm_module_load_image(const void *image, size_t size);
ADSM_API adsm_result adsm_module_load_file(const char *path);
ADSM_API adsm_result adsm_module_load_source(const char *cuda_source, const char *const *options);

ADSM_API adsm_result adsm_get_stats(adsm_stats *out);
ADSM_API adsm_result adsm_reset_stats(void);

ADSM_API const char *adsm_result_string(adsm_result r);
ADSM_API const char *adsm_last_error(void);
ADSM_API adsm_result adsm_last_result(void);

/* Introspection used by tests and tools: protocol name, block size, backend name in use, and the
   state of the block holding ptr ('I', 'R', 'D', or 0 when ptr is not shared). */
ADSM_API const char *adsm_protocol_name(void);
ADSM_API const char *adsm_backend_name(void);
/* "mprotect" or "userfaultfd": the engine that sees CPU writes (ADSM_FAULT_ENGINE). */
ADSM_API const char *adsm_fault_engine_name(void);
ADSM_API size_t adsm_block_size(void);
ADSM_API char adsm_block_state(const void *ptr);

/* The casts of the macros and inline functions below, which C++ programs compile too: named casts
   there, so that -Wold-style-cast (C++ code bases that forbid C casts) stays quiet. */
#ifdef __cplusplus
#define ADSM__CAST(T, e) static_cast<T>(e)
#define ADSM__PUN(T, e) reinterpret_cast<T>(e) /* a pointer (to object or function) as another */
#if __cplusplus >= 201103L
#define ADSM__NULL nullptr
#else
#define ADSM__NULL 0
#endif
#define ADSM__FIELD_SIZE(S, f) sizeof(static_cast<S *>(ADSM__NULL)->f)
#else
#define ADSM__CAST(T, e) ((T)(e))
#define ADSM__PUN(T, e) ((T)(e))
#define ADSM__FIELD_SIZE(S, f) sizeof(((S *)0)->f)
#define ADSM__NULL 0
#endif

static inline adsm_dim3 adsm_dim3_make(uint32_t x, uint32_t y, uint32_t z) {
    adsm_dim3 d;
    d.x = x; d.y = y; d.z = z;
    return d;
}

static inline size_t adsm_grid_threads(adsm_grid g) {
    return ADSM__CAST(size_t, g.grid.x) * g.block.x * g.grid.y * g.block.y * g.grid.z * g.block.z;
}

static inline adsm_grid adsm_grid_3d(adsm_dim3 grid, adsm_dim3 block) {
    adsm_grid g;
    g.grid = grid;
    g.block = block;
    g.begin = 0;
    g.end = adsm_grid_threads(g);
    return g;
}

static inline adsm_grid adsm_grid_1d(uint32_t blocks, uint32_t threads_per_block) {
    return adsm_grid_3d(adsm_dim3_make(blocks, 1, 1), adsm_dim3_make(threads_per_block, 1, 1));
}

#ifdef __cplusplus
}
#endif

/* ---- the kernel DSL (macros) ---------------------------------------------------------------
   A parameter is a tuple (ACCESS, T, name); ADSM__FE applies a macro to each tuple. */
#define ADSM_IN(T, name) (IN, T, name)
#define ADSM_OUT(T, name) (OUT, T, name)
#define ADSM_INOUT(T, name) (INOUT, T, name)
#define ADSM_VALUE(T, name) (VALUE, T, name)

#define ADSM__CAT(a, b) ADSM__CAT_(a, b)
#define ADSM__CAT_(a, b) a##b
#define ADSM__NARGS(...) \
    ADSM__NARGS_(__VA_ARGS__, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define ADSM__NARGS_(a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, n, ...) n
#define ADSM__SEP_COMMA() ,
#define ADSM__SEP_NONE()
#define ADSM__FE(m, s, ...) ADSM__CAT(ADSM__FE_, ADSM__NARGS(__VA_ARGS__))(m, s, __VA_ARGS__)
#define ADSM__FE_1(m, s, x) m(x)
#define ADSM__FE_2(m, s, x, ...) m(x) s() ADSM__FE_1(m, s, __VA_ARGS__)
#define ADSM__FE_3(m, s, x, ...) m(x) s() ADSM__FE_2(m, s, __VA_ARGS__)
#define ADSM__FE_4(m, s, x, ...) m(x) s() ADSM__FE_3(m, s, __VA_ARGS__)
#define ADSM__FE_5(m, s, x, ...) m(x) s() ADSM__FE_4(m, s, __VA_ARGS__)
#define ADSM__FE_6(m, s, x, ...) m(x) s() ADSM__FE_5(m, s, __VA_ARGS__)
#define ADSM__FE_7(m, s, x, ...) m(x) s() ADSM__FE_6(m, s, __VA_ARGS__)
#define ADSM__FE_8(m, s, x, ...) m(x) s() ADSM__FE_7(m, s, __VA_ARGS__)
#define ADSM__FE_9(m, s, x, ...) m(x) s() ADSM__FE_8(m, s, __VA_ARGS__)
#define ADSM__FE_10(m, s, x, ...) m(x) s() ADSM__FE_9(m, s, __VA_ARGS__)
#define ADSM__FE_11(m, s, x, ...) m(x) s() ADSM__FE_10(m, s, __VA_ARGS__)
#define ADSM__FE_12(m, s, x, ...) m(x) s() ADSM__FE_11(m, s, __VA_ARGS__)
#define ADSM__FE_13(m, s, x, ...) m(x) s() ADSM__FE_12(m, s, __VA_ARGS__)
#define ADSM__FE_14(m, s, x, ...) m(x) s() ADSM__FE_13(m, s, __VA_ARGS__)
#define ADSM__FE_15(m, s, x, ...) m(x) s() ADSM__FE_14(m, s, __VA_ARGS__)
#define ADSM__FE_16(m, s, x, ...) m(x) s() ADSM__FE_15(m, s, __VA_ARGS__)

/* parameter declaration: in the body's prototype and the packed argument struct */
#define ADSM__PDECL(p) ADSM__PDECL_ p
#define ADSM__PDECL_(acc, T, name) ADSM__PDECL_##acc(T, name)
#define ADSM__PDECL_IN(T, name) const T *name
#define ADSM__PDECL_OUT(T, name) T *name
#define ADSM__PDECL_INOUT(T, name) T *name
#define ADSM__PDECL_VALUE(T, name) T name
#define ADSM__FIELD(p) ADSM__PDECL(p);
/* unpacking in the entry trampoline, packing in the launcher */
#define ADSM__UNPACK(p) ADSM__UNPACK_ p
#define ADSM__UNPACK_(acc, T, name) adsm__a->name
#define ADSM__PACK(p) ADSM__PACK_ p
#define ADSM__PACK_(acc, T, name) adsm__a.name = name;
/* parameter descriptors */
#define ADSM__PDESC(p) ADSM__PDESC_ p
#define ADSM__PDESC_(acc, T, name) ADSM__PDESC__(acc, name)
#define ADSM__PDESC__(acc, name) \
    {#name, ADSM_ACCESS_##acc, offsetof(struct adsm__args_t, name), ADSM__FIELD_SIZE(struct adsm__args_t, name)}

#if defined(__GNUC__) || defined(__clang__)
#define ADSM__WEAK __attribute__((weak))
#else
#define ADSM__WEAK
#endif

#ifdef __cplusplus
#define ADSM__BODY_LINKAGE extern "C"
#else
#define ADSM__BODY_LINKAGE extern
#endif

/* C++: a kernel's arguments travel as bytes (to the emulated device, into a CUDA launch), so an
   ADSM_VALUE type must be trivially copyable and of standard layout (offsetof); said at compile
   time rather than as a warning. A CPU body that throws fails its launch (ADSM_ERROR_KERNEL_
   CRASHED, at adsm_sync) instead of unwinding through adsm, which holds locks around it. */
#if defined(__cplusplus) && __cplusplus >= 201103L
extern "C++" { /* a program may include adsm.h inside extern "C" { } */
#include <type_traits>
}
#define ADSM__VALUE_TYPES_CHECK(args)                                                              \
    static_assert(std::is_trivially_copyable<args>::value && std::is_standard_layout<args>::value, \
                  "adsm: an ADSM_VALUE parameter's type must be trivially copyable and of standard " \
                  "layout (its bytes are the kernel's argument)")
#else
#define ADSM__VALUE_TYPES_CHECK(args) typedef int adsm__value_types_unchecked
#endif
#if defined(__cplusplus) && (defined(__cpp_exceptions) || defined(__EXCEPTIONS))
#define ADSM__GUARD_BODY(call)                                                                     \
    try {                                                                                          \
        call;                                                                                      \
    } catch (...) {                                                                                \
        adsm__kernel_threw();                                                                      \
    }
#else
#define ADSM__GUARD_BODY(call) call
#endif
/* Called by a kernel's entry when its CPU body threw (C++): the launch fails. */
ADSM_API void adsm__kernel_threw(void);

/* Declares the kernel `kname`, its body prototype, its descriptor and its typed launcher. */
#define ADSM_KERNEL(kname, ...)                                                                    \
    ADSM__BODY_LINKAGE ADSM__WEAK void kname(adsm_grid adsm__g,                                    \
                                             ADSM__FE(ADSM__PDECL, ADSM__SEP_COMMA, __VA_ARGS__)); \
    ADSM__KERNEL_WITH(kname, kname, NULL, NULL, __VA_ARGS__)

/* The descriptor and launcher of a kernel whose CPU body is the function `body`, with its CUDA C
   (or NULL) and the address of its translation unit's shared declarations (or NULL). */
#define ADSM__KERNEL_WITH(kname, body, source, shared_head, ...)                                    \
    typedef struct adsm__args_##kname {                                                           \
        ADSM__FE(ADSM__FIELD, ADSM__SEP_NONE, __VA_ARGS__)                                         \
    } adsm__args_##kname;                                                                          \
    ADSM__VALUE_TYPES_CHECK(adsm__args_##kname);                                                   \
    static inline void adsm__entry_##kname(adsm_grid adsm__g, const void *adsm__p) {              \
        const adsm__args_##kname *adsm__a = ADSM__CAST(const adsm__args_##kname *, adsm__p);    \
        ADSM__GUARD_BODY(body(adsm__g, ADSM__FE(ADSM__UNPACK, ADSM__SEP_COMMA, __VA_ARGS__)));    \
    }                                                                                              \
    static inline const adsm_kernel_desc *adsm__kernel_##kname(void) {                            \
        typedef adsm__args_##kname adsm__args_alias;                                               \
        struct adsm__args_t {                                                                      \
            ADSM__FE(ADSM__FIELD, ADSM__SEP_NONE, __VA_ARGS__)                                     \
        };                                                                                         \
        static const adsm_param_desc adsm__params[] = {                                            \
            ADSM__FE(ADSM__PDESC, ADSM__SEP_COMMA, __VA_ARGS__)};                                  \
        static const adsm_kernel_desc adsm__desc = {                                               \
            #kname, ADSM__NARGS(__VA_ARGS__), sizeof(adsm__args_alias), adsm__params,              \
            adsm__entry_##kname, ADSM__PUN(void (*)(void), body), source, shared_head};                       \
        return &adsm__desc;                                                                        \
    }                                                                                              \
    static inline adsm_result adsm__launch_##kname(                                                \
        int adsm__dev, adsm_grid adsm__g, ADSM__FE(ADSM__PDECL, ADSM__SEP_COMMA, __VA_ARGS__)) {   \
        adsm__args_##kname adsm__a;                                                                \
        memset(ADSM__CAST(void *, &adsm__a), 0, sizeof adsm__a);                                     \
        ADSM__FE(ADSM__PACK, ADSM__SEP_NONE, __VA_ARGS__)                                          \
        return adsm_launch_on(adsm__dev, adsm__kernel_##kname(), adsm__g, &adsm__a);               \
    }                                                                                              \
    typedef int adsm__kernel_declared_##kname

/* Launches a declared kernel asynchronously; the arguments are checked against its declaration.
   ADSM_CALL lets adsm choose the device (where most of the bytes the kernel writes already are);
   ADSM_CALL_ON runs it on device `dev` (0 .. adsm_device_count() - 1). */
#define ADSM_CALL(kname, grid, ...) adsm__launch_##kname(ADSM_ANY_DEVICE, (grid), __VA_ARGS__)
#define ADSM_CALL_ON(dev, kname, grid, ...) adsm__launch_##kname((dev), (grid), __VA_ARGS__)
#define ADSM_PREPARE(kname) adsm_kernel_prepare(adsm__kernel_##kname())

/* CUDA C kept next to the CPU body, as a string for adsm_module_load_source:
       static const char *vecadd_cuda = ADSM_CUDA_SOURCE(
           extern "C" __global__ void vecadd(float *c, const float *a, const float *b, size_t n) {
               size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
               if (i < n) c[i] = a[i] + b[i];
           });
   The text must not contain preprocessor directives or unbalanced parentheses. */
#define ADSM_CUDA_SOURCE(...) #__VA_ARGS__

/* Runs `statement` for every flattened global thread index of this invocation, as size_t i. */
#define ADSM_FOR_EACH_THREAD(g, i) for (size_t i = (g).begin; i < (g).end; ++i)

/* Atomics for kernel bodies, one spelling on both sides: GCC builtins on the CPU (the emu and
   host backends' worker threads), CUDA's atomicAdd/atomicMin/atomicMax in a single-source kernel
   compiled for the GPU (the device prelude defines the same names). Relaxed ordering, as CUDA's;
   each returns the value before the operation. */
static inline uint32_t adsm_atomic_add_u32(uint32_t *p, uint32_t v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline uint64_t adsm_atomic_add_u64(uint64_t *p, uint64_t v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline unsigned long long adsm_atomic_add_ull(unsigned long long *p, unsigned long long v) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
static inline int32_t adsm_atomic_add_i32(int32_t *p, int32_t v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline float adsm_atomic_add_f32(float *p, float v) {
    uint32_t *bits = ADSM__PUN(uint32_t *, p), seen = __atomic_load_n(bits, __ATOMIC_RELAXED), next;
    float old;
    do {
        memcpy(&old, &seen, sizeof old);
        float sum = old + v;
        memcpy(&next, &sum, sizeof next);
    } while (!__atomic_compare_exchange_n(bits, &seen, next, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return old;
}
#define ADSM__ATOMIC_MINMAX(name, type, better)                                                  \
    static inline type name(type *p, type v) {                                                   \
        type seen = __atomic_load_n(p, __ATOMIC_RELAXED);                                        \
        while ((better) && !__atomic_compare_exchange_n(p, &seen, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) { \
        }                                                                                        \
        return seen;                                                                             \
    }
ADSM__ATOMIC_MINMAX(adsm_atomic_min_u32, uint32_t, v < seen)
ADSM__ATOMIC_MINMAX(adsm_atomic_max_u32, uint32_t, v > seen)
ADSM__ATOMIC_MINMAX(adsm_atomic_min_i32, int32_t, v < seen)
ADSM__ATOMIC_MINMAX(adsm_atomic_max_i32, int32_t, v > seen)

/* ---- single-source kernels ------------------------------------------------------------------
   ADSM_KERNEL_DEF(name, (params...), g, { body }) declares the kernel as ADSM_KERNEL does and
   defines its body once: the C text is the CPU body on emu and host, and the same text, after
   the program's preprocessor expanded it, is a string of CUDA C the cuda backend compiles with
   NVRTC at the first launch (unless a loaded module already has the kernel). On the device
   `g` holds the thread's own global index as [begin, begin + 1), so ADSM_FOR_EACH_THREAD runs
   once per thread there. ADSM_SHARED(declarations) emits types and helpers for both sides.
   What a body may contain: see "Write a kernel once" in the documentation at the top. */
#define ADSM__STR(...) ADSM__STR_(__VA_ARGS__)
#define ADSM__STR_(...) #__VA_ARGS__
#define ADSM__PARAM_LIST(...) ADSM__FE(ADSM__PDECL, ADSM__SEP_COMMA, __VA_ARGS__)
#define ADSM__UNPAREN(...) __VA_ARGS__

#if defined(__GNUC__) || defined(__clang__)
#define ADSM__MAYBE_UNUSED __attribute__((unused))
#define ADSM__CONSTRUCTOR __attribute__((constructor))
#else
#error "ADSM_SHARED needs GCC, Clang or a compatible compiler (constructor functions)"
#endif

/* This translation unit's ADSM_SHARED blocks, sorted by their place in it. */
static adsm__shared *adsm__tu_shared ADSM__MAYBE_UNUSED;

static inline void adsm__shared_link(adsm__shared **head, adsm__shared *s) {
    while (*head && (*head)->order < s->order) head = &(*head)->next;
    s->next = *head;
    *head = s;
}

#define ADSM_KERNEL_DEF(kname, params, g, ...)                                                     \
    static void adsm__body_##kname(adsm_grid g, ADSM__PARAM_LIST params);                          \
    static const char adsm__source_##kname[] =                                                     \
        "extern \"C\" __global__ void " #kname "(" ADSM__STR(ADSM__PARAM_LIST params) ") {\n"      \
        "adsm_grid " #g " = adsm__device_grid();\n" ADSM__STR(__VA_ARGS__) "\n}\n";                \
    ADSM__KERNEL_WITH(kname, adsm__body_##kname, adsm__source_##kname, &adsm__tu_shared,           \
                      ADSM__UNPAREN params);                                                       \
    static void adsm__body_##kname(adsm_grid g ADSM__MAYBE_UNUSED, ADSM__PARAM_LIST params) __VA_ARGS__ \
    typedef int adsm__kernel_defined_##kname

/* Declarations (types, static inline helper functions, no variables) for the CPU bodies and for
   the CUDA C of every ADSM_KERNEL_DEF of this translation unit. */
#define ADSM_SHARED(...) ADSM__SHARED_AT(__COUNTER__, __VA_ARGS__)
#define ADSM__SHARED_AT(n, ...)                                                                    \
    __VA_ARGS__                                                                                    \
    static adsm__shared ADSM__CAT(adsm__shared_, n) = {ADSM__STR(__VA_ARGS__), n, NULL};           \
    ADSM__CONSTRUCTOR static void ADSM__CAT(adsm__shared_link_, n)(void) {                         \
        adsm__shared_link(&adsm__tu_shared, &ADSM__CAT(adsm__shared_, n));                         \
    }                                                                                              \
    typedef int ADSM__CAT(adsm__shared_done_, n)

/* ---- pointer structures: declared pointer fields --------------------------------------------
   ADSM_TYPE(T, fields...) describes the typedef'd struct T for adsm (one definition per program,
   in one file; ADSM_DECLARE_TYPE(T) declares it for other files and for types named before they
   are described). Each field is a pointer, or an array of pointers, into shared objects:
       ADSM_PTR(field, U)          to structs of declared type U (U may be T: lists, trees), or NULL
       ADSM_PTR_NONNULL(field, U)  the same, never NULL
       ADSM_PTR_DATA(field)        into a shared object of plain data (floats, bytes), or NULL
   A pointer may point anywhere inside its object (interior pointers keep their offset). */
#define ADSM_TYPE_OF(T) (&adsm_type_##T)
#define ADSM_DECLARE_TYPE(T) ADSM__TYPE_LINKAGE const adsm_type_desc adsm_type_##T
#define ADSM_TYPE(T, ...)                                                                          \
    ADSM_DECLARE_TYPE(T);                                                                          \
    static const adsm_field_desc adsm__fields_##T[] = {ADSM__FEA(ADSM__TYPE_FIELD, T, __VA_ARGS__)};    \
    const adsm_type_desc adsm_type_##T = { /* external: declared so just above */                  \
        #T, sizeof(T), ADSM__CAST(unsigned, sizeof adsm__fields_##T / sizeof adsm__fields_##T[0]), adsm__fields_##T}
#define ADSM_PTR(field, U) (field, &adsm_type_##U, 1)
#define ADSM_PTR_NONNULL(field, U) (field, &adsm_type_##U, 0)
#define ADSM_PTR_DATA(field) (field, ADSM__CAST(const adsm_type_desc *, ADSM__NULL), 1)
#define ADSM_ALLOC(T, count) ADSM__CAST(T *, adsm_alloc_typed(ADSM_TYPE_OF(T), (count)))

#ifdef __cplusplus
#define ADSM__TYPE_LINKAGE extern "C"
#else
#define ADSM__TYPE_LINKAGE extern
#endif
#define ADSM__TYPE_FIELD(T, x) ADSM__TYPE_FIELD_(T, ADSM__UNPAREN x)
#define ADSM__TYPE_FIELD_(T, ...) ADSM__TYPE_FIELD__(T, __VA_ARGS__)
#define ADSM__TYPE_FIELD__(T, f, target, nullable) \
    {#f, offsetof(T, f), ADSM__FIELD_SIZE(T, f) / sizeof(void *), target, nullable}
/* ADSM__FE with one more argument, passed to m before each element */
#define ADSM__FEA(m, a, ...) ADSM__CAT(ADSM__FEA_, ADSM__NARGS(__VA_ARGS__))(m, a, __VA_ARGS__)
#define ADSM__FEA_1(m, a, x) m(a, x)
#define ADSM__FEA_2(m, a, x, ...) m(a, x), ADSM__FEA_1(m, a, __VA_ARGS__)
#define ADSM__FEA_3(m, a, x, ...) m(a, x), ADSM__FEA_2(m, a, __VA_ARGS__)
#define ADSM__FEA_4(m, a, x, ...) m(a, x), ADSM__FEA_3(m, a, __VA_ARGS__)
#define ADSM__FEA_5(m, a, x, ...) m(a, x), ADSM__FEA_4(m, a, __VA_ARGS__)
#define ADSM__FEA_6(m, a, x, ...) m(a, x), ADSM__FEA_5(m, a, __VA_ARGS__)
#define ADSM__FEA_7(m, a, x, ...) m(a, x), ADSM__FEA_6(m, a, __VA_ARGS__)
#define ADSM__FEA_8(m, a, x, ...) m(a, x), ADSM__FEA_7(m, a, __VA_ARGS__)
#define ADSM__FEA_9(m, a, x, ...) m(a, x), ADSM__FEA_8(m, a, __VA_ARGS__)
#define ADSM__FEA_10(m, a, x, ...) m(a, x), ADSM__FEA_9(m, a, __VA_ARGS__)
#define ADSM__FEA_11(m, a, x, ...) m(a, x), ADSM__FEA_10(m, a, __VA_ARGS__)
#define ADSM__FEA_12(m, a, x, ...) m(a, x), ADSM__FEA_11(m, a, __VA_ARGS__)
#define ADSM__FEA_13(m, a, x, ...) m(a, x), ADSM__FEA_12(m, a, __VA_ARGS__)
#define ADSM__FEA_14(m, a, x, ...) m(a, x), ADSM__FEA_13(m, a, __VA_ARGS__)
#define ADSM__FEA_15(m, a, x, ...) m(a, x), ADSM__FEA_14(m, a, __VA_ARGS__)
#define ADSM__FEA_16(m, a, x, ...) m(a, x), ADSM__FEA_15(m, a, __VA_ARGS__)

#endif /* ADSM_H_INCLUDED */

/* ============================================================================================ */
#if defined(ADSM_IMPLEMENTATION) && !defined(ADSM__IMPL_INCLUDED)
#define ADSM__IMPL_INCLUDED
/* The implementation also compiles as C++17 (g++, clang++), for C++ and CUDA projects. It keeps
   C's designated initialisers, in declaration order, with fields left out: C++20 syntax that both
   compilers accept in C++17 as an extension, silenced here for this section only. */
#ifdef __cplusplus
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wpedantic"
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 /* g++ 12 names it apart from -Wpedantic */
#pragma GCC diagnostic ignored "-Wc++20-extensions"
#endif
#ifdef __clang__
#pragma clang diagnostic ignored "-Wc++20-designator"
#pragma clang diagnostic ignored "-Wc99-designator"
#endif
#endif
/* The bottom layer first: each file includes what it uses, and only files listed before it. */
#include "adsm_impl/common.h"
#include "adsm_impl/os.h"
#include "adsm_impl/prepare.h"
#include "adsm_impl/blocktree.h"
#include "adsm_impl/arena.h"
#include "adsm_impl/stats.h"
#include "adsm_impl/config.h"
#include "adsm_impl/object.h"
#include "adsm_impl/protection.h"
#include "adsm_impl/copy.h"
#include "adsm_impl/copy_queue.h"
#include "adsm_impl/trace.h"
#include "adsm_impl/runtime.h"
#include "adsm_impl/reservation.h"
#include "adsm_impl/device_error.h"
#include "adsm_impl/backend.h"
#include "adsm_impl/kernel.h"
#include "adsm_impl/backend_host.h"
#include "adsm_impl/emu/emu_streams.h"
#include "adsm_impl/emu/emu_device.h"
#include "adsm_impl/emu/backend_emu.h"
#include "adsm_impl/cuda/cuda_driver.h"
#include "adsm_impl/cuda/cuda_device.h"
#include "adsm_impl/cuda/cuda_memory.h"
#include "adsm_impl/cuda/cuda_engine.h"
#include "adsm_impl/cuda/cuda_modules.h"
#include "adsm_impl/cuda/backend_cuda.h"
#include "adsm_impl/protocol_vtbl.h"
#include "adsm_impl/directory.h"
#include "adsm_impl/host_pages.h"
#include "adsm_impl/protocol.h"
#include "adsm_impl/protocol_batch.h"
#include "adsm_impl/protocol_lazy.h"
#include "adsm_impl/protocol_rolling.h"
#include "adsm_impl/protocol_um.h"
#include "adsm_impl/capacity.h"
#include "adsm_impl/peer.h"
#include "adsm_impl/fault.h"
#include "adsm_impl/bounce.h"
#include "adsm_impl/memops.h"
#include "adsm_impl/io.h"
#include "adsm_impl/touch.h"
#include "adsm_impl/object_life.h"
#include "adsm_impl/xlate_stage.h"
#include "adsm_impl/lifecycle.h"
#include "adsm_impl/translate.h"
#include "adsm_impl/explicit.h"
#include "adsm_impl/module.h"
#include "adsm_impl/launch.h"
#include "adsm_impl/api.h"
#ifdef __cplusplus
#pragma GCC diagnostic pop
#endif
#endif /* ADSM_IMPLEMENTATION */

/*
   LICENCE (MIT)
   Copyright (c) 2026 the adsm authors.
   Permission is hereby granted, free of charge, to any person obtaining a copy of this software
   and associated documentation files (the "Software"), to deal in the Software without
   restriction, including without limitation the rights to use, copy, modify, merge, publish,
   distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the
   Software is furnished to do so, subject to the following conditions: The above copyright
   notice and this permission notice shall be included in all copies or substantial portions of
   the Software. THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND.
*/
