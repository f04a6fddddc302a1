/* adsm_impl/common.h -- includes and helper macros shared by every implementation file.
 *
 * Pulled in first by the ADSM_IMPLEMENTATION section of adsm.h, and by every implementation file
 * (each includes what it uses, so any one of them compiles on its own: white-box tests include
 * single files). It only declares macros and includes system headers and adsm.h's public
 * declarations, so it is safe in any context, the signal handler included. */
#ifndef ADSM__COMMON_INCLUDED
#define ADSM__COMMON_INCLUDED

#if !defined(_GNU_SOURCE)
#define _GNU_SOURCE 1
#endif

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../adsm.h" /* the public declarations (a no-op inside adsm.h) */

/* Dynamic arrays and hash maps for tables outside the signal path (stb_ds, Debian libstb-dev).
 * Prefixed names only, so nothing like `arrput` leaks into the implementation file. Its functions
 * are external symbols: a program that already compiles STB_DS_IMPLEMENTATION elsewhere defines
 * ADSM_STB_DS_EXTERNAL before including adsm.h with ADSM_IMPLEMENTATION. */
#ifndef STBDS_NO_SHORT_NAMES
#define STBDS_NO_SHORT_NAMES
#endif
#if !defined(ADSM_STB_DS_EXTERNAL) && !defined(STB_DS_IMPLEMENTATION)
#define STB_DS_IMPLEMENTATION
#endif
#include <stb/stb_ds.h>
/* stb_ds takes a key's address with `typeof`, which GCC only knows in GNU modes: under -std=c11
 * every stbds_hm* call would fail to compile. __typeof__ works in every mode. */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__cplusplus) && defined(STBDS_ADDRESSOF)
#undef STBDS_ADDRESSOF
#define STBDS_ADDRESSOF(typevar, value) ((__typeof__(typevar)[1]){value})
#endif

#if defined(__GNUC__) || defined(__clang__)
#define ADSM__UNUSED __attribute__((unused))
#define ADSM__LIKELY(x) __builtin_expect(!!(x), 1)
#define ADSM__UNLIKELY(x) __builtin_expect(!!(x), 0)
#define ADSM__PREFETCH_WRITE(p) __builtin_prefetch((p), 1)
#else
#define ADSM__UNUSED
#define ADSM__LIKELY(x) (x)
#define ADSM__UNLIKELY(x) (x)
#define ADSM__PREFETCH_WRITE(p) ((void)(p))
#endif

/* Every internal function is file-local to the implementation translation unit. */
#ifndef ADSM__PRIVATE
#define ADSM__PRIVATE static ADSM__UNUSED
#endif

/* C11 and C++ spell alignment differently; the implementation compiles as either. */
#ifdef __cplusplus
#define ADSM__ALIGNAS(n) alignas(n)
#else
#define ADSM__ALIGNAS(n) _Alignas(n)
#endif

/* The libc functions adsm defines (signal and memory interposition) are declared nothrow by
 * glibc; a C++ definition must say so too (nvcc warns otherwise). */
#ifdef __cplusplus
#define ADSM__NOEXCEPT noexcept
#else
#define ADSM__NOEXCEPT
#endif

#define ADSM__MIN(a, b) ((a) < (b) ? (a) : (b))
#define ADSM__MAX(a, b) ((a) > (b) ? (a) : (b))
#define ADSM__ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((uintptr_t)(a) - 1))
#define ADSM__ALIGN_DOWN(x, a) ((x) & ~((uintptr_t)(a) - 1))
#define ADSM__HUGE_PAGE ((size_t)2 << 20) /* a PMD page on x86-64 (and arm64 with 4 KiB pages) */

#endif /* ADSM__COMMON_INCLUDED */
