/* adsm_impl/cuda/cuda_driver.h -- the slice of the CUDA driver API and NVRTC that adsm uses, declared
 * under adsm's own names.
 *
 * adsm never includes cuda.h: the driver is opened at run time with dlopen, so the types,
 * constants and entry-point signatures it needs are written out here. Every entry point is listed
 * once, in ADSM__CU_FUNCS, with the ABI version whose signature the pointer has; the backend asks
 * cuGetProcAddress for exactly that version, and tests/cuda_conformance.c checks each line
 * (constants, struct layouts, pointer types) against the real cuda.h, cudaTypedefs.h and nvrtc.h.
 * The file has no dependencies beyond <stddef.h>/<stdint.h>, so the driver test double
 * (tests/cuda/driver_double.c) includes it too. Declarations only; runs nowhere by itself. */
#ifndef ADSM__CUDA_DRIVER_INCLUDED
#define ADSM__CUDA_DRIVER_INCLUDED

#include <stddef.h>
#include <stdint.h>

/* The driver ABI adsm is written against: CUDA 12.0. Older drivers are refused at init. */
#define ADSM__CU_ABI_VERSION 12000

typedef int adsm__cu_result;                       /* CUresult */
typedef int adsm__cu_device;                       /* CUdevice */
typedef unsigned long long adsm__cu_deviceptr;     /* CUdeviceptr (64-bit) */
typedef unsigned long long adsm__cu_mem_handle;    /* CUmemGenericAllocationHandle */
typedef struct adsm__cu_ctx_st *adsm__cu_context;  /* CUcontext */
typedef struct adsm__cu_stream_st *adsm__cu_stream;/* CUstream */
typedef struct adsm__cu_event_st *adsm__cu_event;  /* CUevent */
typedef struct adsm__cu_mod_st *adsm__cu_module;   /* CUmodule */
typedef struct adsm__cu_func_st *adsm__cu_function;/* CUfunction */
typedef int adsm__cu_device_attribute;             /* CUdevice_attribute */
typedef int adsm__cu_jit_option;                   /* CUjit_option */
typedef int adsm__cu_granularity_flags;            /* CUmemAllocationGranularity_flags */
typedef int adsm__cu_proc_query_result;            /* CUdriverProcAddressQueryResult */

/* CUmemLocation, CUmemAllocationProp, CUmemAccessDesc */
typedef struct adsm__cu_mem_location {
    int type;
    int id;
} adsm__cu_mem_location;

typedef struct adsm__cu_mem_alloc_prop {
    int type;
    int requested_handle_types;
    adsm__cu_mem_location location;
    void *win32_handle_meta_data;
    struct {
        unsigned char compression_type;
        unsigned char gpu_direct_rdma_capable;
        unsigned short usage;
        unsigned char reserved[4];
    } alloc_flags;
} adsm__cu_mem_alloc_prop;

typedef struct adsm__cu_mem_access_desc {
    adsm__cu_mem_location location;
    int flags;
} adsm__cu_mem_access_desc;

/* CUresult values adsm tells apart (the rest are reported by name through cuGetErrorName). */
#define ADSM__CU_RESULTS(X)                        \
    X(CUDA_SUCCESS, 0)                             \
    X(CUDA_ERROR_INVALID_VALUE, 1)                 \
    X(CUDA_ERROR_OUT_OF_MEMORY, 2)                 \
    X(CUDA_ERROR_NOT_INITIALIZED, 3)               \
    X(CUDA_ERROR_DEINITIALIZED, 4)                 \
    X(CUDA_ERROR_STUB_LIBRARY, 34)                 \
    X(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, 36)   \
    X(CUDA_ERROR_NO_DEVICE, 100)                   \
    X(CUDA_ERROR_INVALID_DEVICE, 101)              \
    X(CUDA_ERROR_INVALID_IMAGE, 200)               \
    X(CUDA_ERROR_INVALID_CONTEXT, 201)             \
    X(CUDA_ERROR_NO_BINARY_FOR_GPU, 209)           \
    X(CUDA_ERROR_ECC_UNCORRECTABLE, 214)           \
    X(CUDA_ERROR_NVLINK_UNCORRECTABLE, 220)        \
    X(CUDA_ERROR_INVALID_PTX, 218)                 \
    X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222)     \
    X(CUDA_ERROR_INVALID_HANDLE, 400)              \
    X(CUDA_ERROR_NOT_FOUND, 500)                   \
    X(CUDA_ERROR_NOT_READY, 600)                   \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, 700)             \
    X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, 701)     \
    X(CUDA_ERROR_LAUNCH_TIMEOUT, 702)              \
    X(CUDA_ERROR_ASSERT, 710)                      \
    X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, 712) \
    X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, 713)  \
    X(CUDA_ERROR_HARDWARE_STACK_ERROR, 714)        \
    X(CUDA_ERROR_ILLEGAL_INSTRUCTION, 715)         \
    X(CUDA_ERROR_MISALIGNED_ADDRESS, 716)          \
    X(CUDA_ERROR_INVALID_ADDRESS_SPACE, 717)       \
    X(CUDA_ERROR_INVALID_PC, 718)                  \
    X(CUDA_ERROR_LAUNCH_FAILED, 719)               \
    X(CUDA_ERROR_NOT_PERMITTED, 800)               \
    X(CUDA_ERROR_NOT_SUPPORTED, 801)               \
    X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, 803)      \
    X(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, 804) \
    X(CUDA_ERROR_UNKNOWN, 999)

enum {
#define ADSM__CU_RESULT_ENUM(name, value) ADSM__##name = value,
    ADSM__CU_RESULTS(ADSM__CU_RESULT_ENUM)
#undef ADSM__CU_RESULT_ENUM
};

/* Other constants: (real name, value). The enum below gives each the name ADSM__<real name>. */
#define ADSM__CU_CONSTANTS(X)                                   \
    X(CU_STREAM_NON_BLOCKING, 0x1)                              \
    X(CU_EVENT_BLOCKING_SYNC, 0x1)                              \
    X(CU_EVENT_DISABLE_TIMING, 0x2)                             \
    X(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1)             \
    X(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 2)                   \
    X(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 5)                    \
    X(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 40)               \
    X(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 41)               \
    X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 75)         \
    X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 76)         \
    X(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 102) \
    X(CU_JIT_ERROR_LOG_BUFFER, 5)                               \
    X(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, 6)                    \
    X(CU_GET_PROC_ADDRESS_DEFAULT, 0)                           \
    X(CU_GET_PROC_ADDRESS_SUCCESS, 0)                           \
    X(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, 1)                  \
    X(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, 2)            \
    X(CU_MEM_HANDLE_TYPE_NONE, 0x0)                             \
    X(CU_MEM_ACCESS_FLAGS_PROT_READWRITE, 0x3)                  \
    X(CU_MEM_LOCATION_TYPE_DEVICE, 0x1)                         \
    X(CU_MEM_ALLOCATION_TYPE_PINNED, 0x1)                       \
    X(CU_MEM_ALLOC_GRANULARITY_MINIMUM, 0x0)                    \
    X(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED, 0x1)                \
    X(CU_MEMHOSTREGISTER_PORTABLE, 0x01)                        \
    X(CU_MEM_ATTACH_GLOBAL, 0x1)                                \
    X(CU_MEM_LOCATION_TYPE_HOST, 0x2)                           \
    X(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 83)                   \
    X(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 89)        \
    X(CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 88)

enum {
#define ADSM__CU_CONSTANT_ENUM(name, value) ADSM__##name = value,
    ADSM__CU_CONSTANTS(ADSM__CU_CONSTANT_ENUM)
#undef ADSM__CU_CONSTANT_ENUM
};

/* The entry points: X(name, ABI version of this signature, required, return type, parameters).
 * The pointer for `name` is requested from cuGetProcAddress with that version, so a driver that
 * also has a newer, different signature (CUDA 13's cuCtxSynchronize_v13000(CUcontext)) still
 * hands out the one declared here. Optional entries (required = 0) may be missing. */
#define ADSM__CU_FUNCS(X)                                                                                        \
    X(cuInit, 2000, 1, adsm__cu_result, (unsigned int flags))                                                    \
    X(cuDriverGetVersion, 2020, 1, adsm__cu_result, (int *version))                                              \
    X(cuGetErrorName, 6000, 1, adsm__cu_result, (adsm__cu_result error, const char **name))                     \
    X(cuGetErrorString, 6000, 1, adsm__cu_result, (adsm__cu_result error, const char **text))                   \
    X(cuDeviceGetCount, 2000, 1, adsm__cu_result, (int *count))                                                  \
    X(cuDeviceGet, 2000, 1, adsm__cu_result, (adsm__cu_device * device, int ordinal))                           \
    X(cuDeviceGetName, 2000, 1, adsm__cu_result, (char *name, int len, adsm__cu_device dev))                    \
    X(cuDeviceGetAttribute, 2000, 1, adsm__cu_result,                                                            \
      (int *value, adsm__cu_device_attribute attrib, adsm__cu_device dev))                                       \
    X(cuDeviceTotalMem, 3020, 1, adsm__cu_result, (size_t * bytes, adsm__cu_device dev))                        \
    X(cuDeviceCanAccessPeer, 4000, 0, adsm__cu_result, (int *can, adsm__cu_device dev, adsm__cu_device peer))  \
    X(cuDevicePrimaryCtxRetain, 7000, 1, adsm__cu_result, (adsm__cu_context * ctx, adsm__cu_device dev))        \
    X(cuDevicePrimaryCtxRelease, 11000, 1, adsm__cu_result, (adsm__cu_device dev))                               \
    X(cuCtxSetCurrent, 4000, 1, adsm__cu_result, (adsm__cu_context ctx))                                         \
    X(cuCtxGetCurrent, 4000, 1, adsm__cu_result, (adsm__cu_context * ctx))                                      \
    X(cuCtxSynchronize, 2000, 1, adsm__cu_result, (void))                                                        \
    X(cuMemGetInfo, 3020, 1, adsm__cu_result, (size_t * free_bytes, size_t * total_bytes))                      \
    X(cuStreamCreate, 2000, 1, adsm__cu_result, (adsm__cu_stream * stream, unsigned int flags))                 \
    X(cuStreamDestroy, 4000, 1, adsm__cu_result, (adsm__cu_stream stream))                                       \
    X(cuStreamWaitEvent, 3020, 1, adsm__cu_result, (adsm__cu_stream stream, adsm__cu_event event, unsigned int flags)) \
    X(cuStreamSynchronize, 2000, 1, adsm__cu_result, (adsm__cu_stream stream))                                   \
    X(cuEventCreate, 2000, 1, adsm__cu_result, (adsm__cu_event * event, unsigned int flags))                    \
    X(cuEventDestroy, 4000, 1, adsm__cu_result, (adsm__cu_event event))                                          \
    X(cuEventRecord, 2000, 1, adsm__cu_result, (adsm__cu_event event, adsm__cu_stream stream))                  \
    X(cuEventSynchronize, 2000, 1, adsm__cu_result, (adsm__cu_event event))                                      \
    X(cuMemAllocHost, 3020, 1, adsm__cu_result, (void **ptr, size_t bytes))                                      \
    X(cuMemFreeHost, 2000, 1, adsm__cu_result, (void *ptr))                                                      \
    X(cuMemHostRegister, 6050, 0, adsm__cu_result, (void *ptr, size_t bytes, unsigned int flags))               \
    X(cuMemHostUnregister, 4000, 0, adsm__cu_result, (void *ptr))                                                \
    X(cuMemcpyHtoDAsync, 3020, 1, adsm__cu_result,                                                               \
      (adsm__cu_deviceptr dst, const void *src, size_t bytes, adsm__cu_stream stream))                          \
    X(cuMemcpyDtoHAsync, 3020, 1, adsm__cu_result,                                                               \
      (void *dst, adsm__cu_deviceptr src, size_t bytes, adsm__cu_stream stream))                                \
    X(cuMemcpyDtoDAsync, 3020, 1, adsm__cu_result,                                                               \
      (adsm__cu_deviceptr dst, adsm__cu_deviceptr src, size_t bytes, adsm__cu_stream stream))                   \
    X(cuMemcpyPeerAsync, 4000, 0, adsm__cu_result,                                                               \
      (adsm__cu_deviceptr dst, adsm__cu_context dst_ctx, adsm__cu_deviceptr src, adsm__cu_context src_ctx,      \
       size_t bytes, adsm__cu_stream stream))                                                                    \
    X(cuMemsetD8Async, 3020, 1, adsm__cu_result,                                                                 \
      (adsm__cu_deviceptr dst, unsigned char value, size_t bytes, adsm__cu_stream stream))                      \
    X(cuMemAddressReserve, 10020, 1, adsm__cu_result,                                                            \
      (adsm__cu_deviceptr * ptr, size_t size, size_t alignment, adsm__cu_deviceptr addr, unsigned long long flags)) \
    X(cuMemAddressFree, 10020, 1, adsm__cu_result, (adsm__cu_deviceptr ptr, size_t size))                       \
    X(cuMemCreate, 10020, 1, adsm__cu_result,                                                                    \
      (adsm__cu_mem_handle * handle, size_t size, const adsm__cu_mem_alloc_prop *prop, unsigned long long flags)) \
    X(cuMemRelease, 10020, 1, adsm__cu_result, (adsm__cu_mem_handle handle))                                     \
    X(cuMemMap, 10020, 1, adsm__cu_result,                                                                       \
      (adsm__cu_deviceptr ptr, size_t size, size_t offset, adsm__cu_mem_handle handle, unsigned long long flags)) \
    X(cuMemUnmap, 10020, 1, adsm__cu_result, (adsm__cu_deviceptr ptr, size_t size))                             \
    X(cuMemSetAccess, 10020, 1, adsm__cu_result,                                                                 \
      (adsm__cu_deviceptr ptr, size_t size, const adsm__cu_mem_access_desc *desc, size_t count))                \
    X(cuMemGetAllocationGranularity, 10020, 1, adsm__cu_result,                                                  \
      (size_t * granularity, const adsm__cu_mem_alloc_prop *prop, adsm__cu_granularity_flags option))           \
    X(cuModuleLoadDataEx, 2010, 1, adsm__cu_result,                                                              \
      (adsm__cu_module * module, const void *image, unsigned int noptions, adsm__cu_jit_option *options,        \
       void **values))                                                                                           \
    X(cuModuleUnload, 2000, 1, adsm__cu_result, (adsm__cu_module module))                                        \
    X(cuModuleGetFunction, 2000, 1, adsm__cu_result,                                                             \
      (adsm__cu_function * function, adsm__cu_module module, const char *name))                                 \
    X(cuLaunchKernel, 4000, 1, adsm__cu_result,                                                                  \
      (adsm__cu_function f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z, unsigned int block_x, \
       unsigned int block_y, unsigned int block_z, unsigned int shared_bytes, adsm__cu_stream stream,           \
       void **params, void **extra))                                                                             \
    X(cuFuncGetParamInfo, 12040, 0, adsm__cu_result,                                                             \
      (adsm__cu_function f, size_t index, size_t *offset, size_t *size))                                        \
    X(cuMemAllocManaged, 6000, 0, adsm__cu_result, (adsm__cu_deviceptr * ptr, size_t bytes, unsigned int flags)) \
    X(cuMemFree, 3020, 0, adsm__cu_result, (adsm__cu_deviceptr ptr))                                             \
    X(cuMemPrefetchAsync, 12020, 0, adsm__cu_result,                                                             \
      (adsm__cu_deviceptr ptr, size_t bytes, adsm__cu_mem_location location, unsigned int flags,                \
       adsm__cu_stream stream))

/* cuGetProcAddress itself comes from dlsym, under its versioned symbol name. */
#define ADSM__CU_GET_PROC_ADDRESS_SYMBOL "cuGetProcAddress_v2"
typedef adsm__cu_result (*adsm__pfn_cuGetProcAddress)(const char *symbol, void **pfn, int version,
                                                       uint64_t flags, adsm__cu_proc_query_result *status);

#define ADSM__CU_PFN_TYPEDEF(name, version, required, ret, params) typedef ret(*adsm__pfn_##name) params;
ADSM__CU_FUNCS(ADSM__CU_PFN_TYPEDEF)
#undef ADSM__CU_PFN_TYPEDEF

/* NVRTC (run-time compilation of CUDA C to PTX), looked up with dlsym: X(name, return, params). */
typedef int adsm__nvrtc_result;                  /* nvrtcResult; 0 = NVRTC_SUCCESS */
typedef struct adsm__nvrtc_prog_st *adsm__nvrtc_program; /* nvrtcProgram */
#define ADSM__NVRTC_SUCCESS 0
#define ADSM__NVRTC_FUNCS(X)                                                                                     \
    X(nvrtcVersion, adsm__nvrtc_result, (int *major, int *minor))                                                \
    X(nvrtcGetErrorString, const char *, (adsm__nvrtc_result result))                                            \
    X(nvrtcCreateProgram, adsm__nvrtc_result,                                                                    \
      (adsm__nvrtc_program * prog, const char *src, const char *name, int nheaders, const char *const *headers, \
       const char *const *include_names))                                                                        \
    X(nvrtcDestroyProgram, adsm__nvrtc_result, (adsm__nvrtc_program * prog))                                     \
    X(nvrtcCompileProgram, adsm__nvrtc_result, (adsm__nvrtc_program prog, int noptions, const char *const *options)) \
    X(nvrtcGetPTXSize, adsm__nvrtc_result, (adsm__nvrtc_program prog, size_t *size))                             \
    X(nvrtcGetPTX, adsm__nvrtc_result, (adsm__nvrtc_program prog, char *ptx))                                    \
    X(nvrtcGetProgramLogSize, adsm__nvrtc_result, (adsm__nvrtc_program prog, size_t *size))                      \
    X(nvrtcGetProgramLog, adsm__nvrtc_result, (adsm__nvrtc_program prog, char *log))

/* Optional (NVRTC 11.1+): a cubin for a real architecture (sm_XY), where PTX would not load. */
#define ADSM__NVRTC_CUBIN_FUNCS(X)                                                                               \
    X(nvrtcGetCUBINSize, adsm__nvrtc_result, (adsm__nvrtc_program prog, size_t *size))                           \
    X(nvrtcGetCUBIN, adsm__nvrtc_result, (adsm__nvrtc_program prog, char *cubin))

#define ADSM__NVRTC_PFN_TYPEDEF(name, ret, params) typedef ret(*adsm__pfn_##name) params;
ADSM__NVRTC_FUNCS(ADSM__NVRTC_PFN_TYPEDEF)
ADSM__NVRTC_CUBIN_FUNCS(ADSM__NVRTC_PFN_TYPEDEF)
#undef ADSM__NVRTC_PFN_TYPEDEF

#endif /* ADSM__CUDA_DRIVER_INCLUDED */
