/* tests/cuda_conformance.c -- adsm's own CUDA declarations (adsm_impl/cuda/cuda_driver.h) against the
 * real cuda.h, cudaTypedefs.h and nvrtc.h.
 *
 * adsm never includes cuda.h: it writes out, under its own names, the driver types, constants,
 * struct layouts and entry-point signatures it uses. This translation unit includes both and
 * checks every one of those declarations with _Static_assert, so a mismatch is a compile error;
 * main only prints what was checked. Run by tests/cuda_conformance.sh:
 *
 *   cc -std=c11 -Wall -Wextra -Werror -I. -I$CUDA_HOME/include tests/cuda_conformance.c
 *
 * Built with -DCONFORMANCE_NEGATIVE=<n> (n = 1..4) it adds one deliberately wrong declaration,
 * pushed through the same checking macros, and must then fail to compile (proof that the
 * checks can fail):
 *   1  a wrong constant value           (CUDA_ERROR_NOT_READY = 601)
 *   2  one parameter type changed       (cuMemcpyHtoDAsync with an int byte count)
 *   3  the CUDA 13 signature            (adsm's cuCtxSynchronize entry vs PFN_cuCtxSynchronize_v13000)
 *   4  a struct member offset changed   (CUmemAllocationProp with type/requestedHandleTypes swapped)
 *
 * Uses GCC/Clang builtins (__builtin_types_compatible_p, __typeof__, __builtin_strcmp). */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <nvrtc.h>

#include "adsm_impl/cuda/cuda_driver.h"

#include <stdio.h>

#ifndef CONFORMANCE_NEGATIVE
#define CONFORMANCE_NEGATIVE 0
#endif

#define CONF_STR_(x) #x
#define CONF_STR(x) CONF_STR_(x)
#define CONF_SAME_TYPE(a, b) __builtin_types_compatible_p(a, b)
/* (written with > so that -Wtype-limits has no `unsigned < 0` to warn about) */
#define CONF_IS_SIGNED(T) (!((T)-1 > (T)0))
/* __builtin_classify_type (GCC and Clang): 1 integer, 3 enum, 5 pointer. */
#define CONF_IS_POINTER(T) (__builtin_classify_type((T)0) == 5)
#define CONF_IS_INTEGER(T) (__builtin_classify_type((T)0) == 1 || __builtin_classify_type((T)0) == 3)

/* Counts for the summary: each check macro below also has a counting twin. */
#define CONF_COUNT1(...) +1

/* ---------------------------------------------------------------------------------------------
 * 1. Constants: X(real name, value) == the real enumerator.
 * ------------------------------------------------------------------------------------------- */
#define CONF_CHECK_CONSTANT(name, value) \
    _Static_assert((long long)(name) == (value), "conformance: constant " #name " is not " #value " in cuda.h");

ADSM__CU_RESULTS(CONF_CHECK_CONSTANT)
ADSM__CU_CONSTANTS(CONF_CHECK_CONSTANT)

enum {
    conf_n_results = 0 ADSM__CU_RESULTS(CONF_COUNT1),
    conf_n_constants = 0 ADSM__CU_CONSTANTS(CONF_COUNT1),
};

/* The enum adsm derives from the lists carries the same values (ADSM__<name>). */
#define CONF_CHECK_ADSM_ENUM(name, value) \
    _Static_assert((long long)ADSM__##name == (long long)(name), "conformance: ADSM__" #name " differs from cuda.h's " #name);
ADSM__CU_RESULTS(CONF_CHECK_ADSM_ENUM)
ADSM__CU_CONSTANTS(CONF_CHECK_ADSM_ENUM)
_Static_assert(ADSM__NVRTC_SUCCESS == NVRTC_SUCCESS, "conformance: ADSM__NVRTC_SUCCESS is not NVRTC_SUCCESS");
_Static_assert(ADSM__CU_ABI_VERSION == 12000, "conformance: ADSM__CU_ABI_VERSION is not the 12.0 ABI");

#if CONFORMANCE_NEGATIVE == 1
CONF_CHECK_CONSTANT(CUDA_ERROR_NOT_READY, 601) /* real value: 600 */
#endif

/* ---------------------------------------------------------------------------------------------
 * 2. Scalar and handle typedefs: size, alignment, and signedness / pointer-ness.
 * ------------------------------------------------------------------------------------------- */
#define CONF_CHECK_SIZE_ALIGN(adsm_t, real_t)                                                       \
    _Static_assert(sizeof(adsm_t) == sizeof(real_t), "conformance: sizeof(" #adsm_t ") != sizeof(" #real_t ")"); \
    _Static_assert(_Alignof(adsm_t) == _Alignof(real_t),                                            \
                   "conformance: _Alignof(" #adsm_t ") != _Alignof(" #real_t ")");

/* Plain integer typedefs: the very same type (so also the same signedness). */
#define CONF_CHECK_INTEGER(adsm_t, real_t)                                                          \
    CONF_CHECK_SIZE_ALIGN(adsm_t, real_t)                                                           \
    _Static_assert(CONF_IS_INTEGER(adsm_t) && CONF_IS_INTEGER(real_t),                              \
                   "conformance: " #adsm_t " / " #real_t " is not an integer type");               \
    _Static_assert(CONF_IS_SIGNED(adsm_t) == CONF_IS_SIGNED(real_t),                                \
                   "conformance: " #adsm_t " and " #real_t " differ in signedness");               \
    _Static_assert(CONF_SAME_TYPE(adsm_t, real_t), "conformance: " #adsm_t " is not the type of " #real_t);

/* Opaque handles: both are object pointers of the same size and alignment. */
#define CONF_CHECK_HANDLE(adsm_t, real_t)                                                           \
    CONF_CHECK_SIZE_ALIGN(adsm_t, real_t)                                                           \
    _Static_assert(CONF_IS_POINTER(adsm_t) && CONF_IS_POINTER(real_t),                              \
                   "conformance: " #adsm_t " / " #real_t " is not a pointer type");

/* Enum-typed ints: adsm declares `int`, the real type is an enum. C11 6.7.2.2p4 leaves an enum's
 * compatible integer type to the compiler; GCC and Clang pick `unsigned int` when no enumerator
 * is negative, which is the case for all of these. Same size and alignment, integer on both
 * sides, and the signedness either equal or (real enum unsigned, adsm int) where every value
 * adsm passes is a named constant that section 1 checked and that lies in [0, INT_MAX]
 * (CONF_CHECK_NONNEGATIVE below), so the two have the same representation (C11 6.2.5p9). */
#define CONF_CHECK_ENUM_INT(adsm_t, real_t)                                                         \
    CONF_CHECK_SIZE_ALIGN(adsm_t, real_t)                                                           \
    _Static_assert(CONF_IS_INTEGER(adsm_t) && CONF_IS_INTEGER(real_t),                              \
                   "conformance: " #adsm_t " / " #real_t " is not an integer type");               \
    _Static_assert(CONF_SAME_TYPE(adsm_t, int), "conformance: " #adsm_t " is not int");           \
    _Static_assert(CONF_IS_SIGNED(adsm_t) == CONF_IS_SIGNED(real_t) ||                              \
                       (!CONF_IS_SIGNED(real_t) && sizeof(real_t) == sizeof(int)),                  \
                   "conformance: " #adsm_t " and " #real_t " differ in signedness");

#define CONF_CHECK_NONNEGATIVE(name, value) \
    _Static_assert((value) >= 0 && (value) <= 0x7fffffff, "conformance: " #name " does not fit an int");
ADSM__CU_RESULTS(CONF_CHECK_NONNEGATIVE)
ADSM__CU_CONSTANTS(CONF_CHECK_NONNEGATIVE)

CONF_CHECK_ENUM_INT(adsm__cu_result, CUresult)
CONF_CHECK_INTEGER(adsm__cu_device, CUdevice)
CONF_CHECK_INTEGER(adsm__cu_deviceptr, CUdeviceptr)
CONF_CHECK_INTEGER(adsm__cu_mem_handle, CUmemGenericAllocationHandle)
CONF_CHECK_HANDLE(adsm__cu_context, CUcontext)
CONF_CHECK_HANDLE(adsm__cu_stream, CUstream)
CONF_CHECK_HANDLE(adsm__cu_event, CUevent)
CONF_CHECK_HANDLE(adsm__cu_module, CUmodule)
CONF_CHECK_HANDLE(adsm__cu_function, CUfunction)
CONF_CHECK_ENUM_INT(adsm__cu_device_attribute, CUdevice_attribute)
CONF_CHECK_ENUM_INT(adsm__cu_jit_option, CUjit_option)
CONF_CHECK_ENUM_INT(adsm__cu_granularity_flags, CUmemAllocationGranularity_flags)
CONF_CHECK_ENUM_INT(adsm__cu_proc_query_result, CUdriverProcAddressQueryResult)
CONF_CHECK_ENUM_INT(adsm__nvrtc_result, nvrtcResult)
CONF_CHECK_HANDLE(adsm__nvrtc_program, nvrtcProgram)
enum { conf_n_types = 15 };

/* ---------------------------------------------------------------------------------------------
 * 3. Struct layouts: same size and alignment, every member at the same offset with the same size.
 * ------------------------------------------------------------------------------------------- */
#define CONF_CHECK_STRUCT(adsm_t, real_t)                                                           \
    CONF_CHECK_SIZE_ALIGN(adsm_t, real_t)
#define CONF_CHECK_MEMBER(adsm_t, adsm_m, real_t, real_m)                                           \
    _Static_assert(offsetof(adsm_t, adsm_m) == offsetof(real_t, real_m),                            \
                   "conformance: offsetof(" #adsm_t ", " #adsm_m ") != offsetof(" #real_t ", " #real_m ")"); \
    _Static_assert(sizeof(((adsm_t *)0)->adsm_m) == sizeof(((real_t *)0)->real_m),                  \
                   "conformance: size of " #adsm_t "." #adsm_m " != size of " #real_t "." #real_m);

#define CONF_CHECK_MEM_LOCATION(T)                                                                  \
    CONF_CHECK_STRUCT(T, CUmemLocation)                                                             \
    CONF_CHECK_MEMBER(T, type, CUmemLocation, type)                                                 \
    CONF_CHECK_MEMBER(T, id, CUmemLocation, id)

#define CONF_CHECK_MEM_ALLOC_PROP(T)                                                                \
    CONF_CHECK_STRUCT(T, CUmemAllocationProp)                                                       \
    CONF_CHECK_MEMBER(T, type, CUmemAllocationProp, type)                                           \
    CONF_CHECK_MEMBER(T, requested_handle_types, CUmemAllocationProp, requestedHandleTypes)         \
    CONF_CHECK_MEMBER(T, location, CUmemAllocationProp, location)                                   \
    CONF_CHECK_MEMBER(T, location.type, CUmemAllocationProp, location.type)                         \
    CONF_CHECK_MEMBER(T, location.id, CUmemAllocationProp, location.id)                             \
    CONF_CHECK_MEMBER(T, win32_handle_meta_data, CUmemAllocationProp, win32HandleMetaData)          \
    CONF_CHECK_MEMBER(T, alloc_flags, CUmemAllocationProp, allocFlags)                              \
    CONF_CHECK_MEMBER(T, alloc_flags.compression_type, CUmemAllocationProp, allocFlags.compressionType) \
    CONF_CHECK_MEMBER(T, alloc_flags.gpu_direct_rdma_capable, CUmemAllocationProp,                  \
                      allocFlags.gpuDirectRDMACapable)                                              \
    CONF_CHECK_MEMBER(T, alloc_flags.usage, CUmemAllocationProp, allocFlags.usage)                  \
    CONF_CHECK_MEMBER(T, alloc_flags.reserved, CUmemAllocationProp, allocFlags.reserved)            \
    _Static_assert(sizeof(((T *)0)->alloc_flags.reserved[0]) == sizeof(((CUmemAllocationProp *)0)->allocFlags.reserved[0]), \
                   "conformance: element size of " #T ".alloc_flags.reserved differs");

#define CONF_CHECK_MEM_ACCESS_DESC(T)                                                               \
    CONF_CHECK_STRUCT(T, CUmemAccessDesc)                                                           \
    CONF_CHECK_MEMBER(T, location, CUmemAccessDesc, location)                                       \
    CONF_CHECK_MEMBER(T, location.type, CUmemAccessDesc, location.type)                             \
    CONF_CHECK_MEMBER(T, location.id, CUmemAccessDesc, location.id)                                 \
    CONF_CHECK_MEMBER(T, flags, CUmemAccessDesc, flags)

CONF_CHECK_MEM_LOCATION(adsm__cu_mem_location)
CONF_CHECK_MEM_ALLOC_PROP(adsm__cu_mem_alloc_prop)
CONF_CHECK_MEM_ACCESS_DESC(adsm__cu_mem_access_desc)
enum { conf_n_structs = 3, conf_n_members = 2 + 11 + 4 };

#if CONFORMANCE_NEGATIVE == 4
/* adsm__cu_mem_alloc_prop with its first two members swapped: same size, wrong offsets. */
typedef struct conf_bad_alloc_prop {
    int requested_handle_types;
    int type;
    adsm__cu_mem_location location;
    void *win32_handle_meta_data;
    struct {
        unsigned char compression_type;
        unsigned char gpu_direct_rdma_capable;
        unsigned short usage;
        unsigned char reserved[4];
    } alloc_flags;
} conf_bad_alloc_prop;
CONF_CHECK_MEM_ALLOC_PROP(conf_bad_alloc_prop)
#endif

/* ---------------------------------------------------------------------------------------------
 * 4. cuGetProcAddress: the dlsym name and the pointer type.
 * ------------------------------------------------------------------------------------------- */
/* cuda.h: #define cuGetProcAddress cuGetProcAddress_v2 -- the symbol a plain call binds to. */
_Static_assert(__builtin_strcmp(ADSM__CU_GET_PROC_ADDRESS_SYMBOL, CONF_STR(cuGetProcAddress)) == 0,
               "conformance: ADSM__CU_GET_PROC_ADDRESS_SYMBOL is not the symbol cuda.h binds cuGetProcAddress to");
_Static_assert(__builtin_strcmp(CONF_STR(cuGetProcAddress), "cuGetProcAddress_v2") == 0,
               "conformance: cuda.h no longer maps cuGetProcAddress to cuGetProcAddress_v2");

/* adsm__pfn_cuGetProcAddress is a typedef, so the name mapping of section 5 cannot reach into
 * it. Its signature is written out once here in adsm's names: checked against adsm's typedef
 * now, and, after the mapping below, against PFN_cuGetProcAddress_v12000. */
#define CONF_GET_PROC_ADDRESS_PFN                                                                   \
    adsm__cu_result (*)(const char *, void **, int, uint64_t, adsm__cu_proc_query_result *)
_Static_assert(CONF_SAME_TYPE(adsm__pfn_cuGetProcAddress, CONF_GET_PROC_ADDRESS_PFN),
               "conformance: adsm__pfn_cuGetProcAddress changed; update CONF_GET_PROC_ADDRESS_PFN");

/* ---------------------------------------------------------------------------------------------
 * 5. Entry points. From here on adsm's type names stand for the real types: every X-macro entry
 *    is rescanned after substitution, so its return type and parameter list come out in cuda.h's
 *    terms and can be compared with cudaTypedefs.h's PFN_<name>_v<version> as they are.
 *    (Sections 1-4 above ran before this mapping, on adsm's own types.)
 * ------------------------------------------------------------------------------------------- */
#define adsm__cu_result CUresult
#define adsm__cu_device CUdevice
#define adsm__cu_deviceptr CUdeviceptr
#define adsm__cu_mem_handle CUmemGenericAllocationHandle
#define adsm__cu_context CUcontext
#define adsm__cu_stream CUstream
#define adsm__cu_event CUevent
#define adsm__cu_module CUmodule
#define adsm__cu_function CUfunction
#define adsm__cu_device_attribute CUdevice_attribute
#define adsm__cu_jit_option CUjit_option
#define adsm__cu_granularity_flags CUmemAllocationGranularity_flags
#define adsm__cu_proc_query_result CUdriverProcAddressQueryResult
#define adsm__cu_mem_location CUmemLocation
#define adsm__cu_mem_alloc_prop CUmemAllocationProp
#define adsm__cu_mem_access_desc CUmemAccessDesc
#define adsm__nvrtc_result nvrtcResult
#define adsm__nvrtc_program nvrtcProgram

/* conf_pfn_<name>: adsm's entry, in the real types. (`name` is only pasted, so cuda.h's
 * `#define cuMemcpyHtoDAsync cuMemcpyHtoDAsync_v2` and the like do not touch it.) */
#define CONF_MAPPED_PFN(name, version, required, ret, params) typedef ret(*conf_pfn_##name) params;
ADSM__CU_FUNCS(CONF_MAPPED_PFN)

#define CONF_CHECK_FUNC(name, version, required, ret, params)                                       \
    _Static_assert(CONF_SAME_TYPE(ret(*) params, PFN_##name##_v##version),                          \
                   "conformance: " #name " " #params " does not match PFN_" #name "_v" #version);  \
    _Static_assert((required) == 0 || (required) == 1, "conformance: " #name ": required is not 0/1");
ADSM__CU_FUNCS(CONF_CHECK_FUNC)

enum {
    conf_n_funcs = 0 ADSM__CU_FUNCS(CONF_COUNT1),
};

_Static_assert(CONF_SAME_TYPE(CONF_GET_PROC_ADDRESS_PFN, PFN_cuGetProcAddress_v12000),
               "conformance: adsm__pfn_cuGetProcAddress does not match PFN_cuGetProcAddress_v12000");

#if CONFORMANCE_NEGATIVE == 2
CONF_CHECK_FUNC(cuMemcpyHtoDAsync, 3020, 1, adsm__cu_result,
                (adsm__cu_deviceptr dst, const void *src, int bytes, adsm__cu_stream stream))
#endif
#if CONFORMANCE_NEGATIVE == 3
/* adsm's own cuCtxSynchronize entry against the CUDA 13 signature (cuCtxSynchronize(CUcontext)). */
_Static_assert(CONF_SAME_TYPE(conf_pfn_cuCtxSynchronize, PFN_cuCtxSynchronize_v13000),
               "conformance: cuCtxSynchronize does not match PFN_cuCtxSynchronize_v13000");
#endif

/* NVRTC: against the prototypes in nvrtc.h. */
#define CONF_CHECK_NVRTC(name, ret, params)                                                         \
    _Static_assert(CONF_SAME_TYPE(__typeof__(&name), ret(*) params),                                \
                   "conformance: " #name " " #params " does not match nvrtc.h");
ADSM__NVRTC_FUNCS(CONF_CHECK_NVRTC)

enum {
    conf_n_nvrtc = 0 ADSM__NVRTC_FUNCS(CONF_COUNT1),
};

int main(void) {
    printf("cuda_conformance: adsm_impl/cuda/cuda_driver.h matches cuda.h %d.%d, cudaTypedefs.h, nvrtc.h\n",
           CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
    printf("  %d CUresult values, %d other constants\n", conf_n_results, conf_n_constants);
    printf("  %d typedefs (size, alignment, signedness or pointer-ness)\n", conf_n_types);
    printf("  %d structs, %d members (offset and size)\n", conf_n_structs, conf_n_members);
    printf("  %d driver entry points against PFN_<name>_v<version>, plus cuGetProcAddress (%s, v12000)\n",
           conf_n_funcs, ADSM__CU_GET_PROC_ADDRESS_SYMBOL);
    printf("  %d NVRTC entry points against nvrtc.h\n", conf_n_nvrtc);
    return 0;
}
