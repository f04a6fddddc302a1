#!/usr/bin/env bash
# Checks that adsm.h is usable outside Bazel:
#   (a) as strict C11, with and without ADSM_IMPLEMENTATION (the implementation also at -O2);
#   (b) as C++17, with and without ADSM_IMPLEMENTATION (the DSL single-source kernels included);
#   (c) examples/vecadd.c builds with a plain cc line and runs, exiting 0;
#   (e) with _FORTIFY_SOURCE=2 and 3, gcc, g++, clang and clang++ build the implementation with and
#       without ADSM_INTERPOSE_IO / ADSM_INTERPOSE_MEM (level 3: each set; level 2: both),
#       warning-free, and a fortified program's checked calls into shared memory work;
#   (0) first, the layering of adsm_impl/ (its backend folders too): each file includes what it uses,
#       only from layers below.
# Runs under `bazel test` (sources come from the runfiles tree) or by hand
# from the repository root. With the argument `fortify` only (e) runs, with `basic` all but (e)
# (BUILD.bazel runs them as two targets, which run side by side); with none, everything.
set -euo pipefail

mode=${1:-all}
case $mode in
    all | basic | fortify) ;;
    *)
        echo "usage: $0 [basic|fortify]" >&2
        exit 2
        ;;
esac

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# Find the directory holding adsm.h: the workspace's runfiles under
# `bazel test`, else the repository root this script lives in.
if [[ -n "${TEST_SRCDIR:-}" && -f "$TEST_SRCDIR/adsm/adsm.h" ]]; then
    srcdir=$TEST_SRCDIR/adsm
elif [[ -f "$(dirname "$0")/../adsm.h" ]]; then
    srcdir=$(cd "$(dirname "$0")/.." && pwd)
else
    fail "cannot find adsm.h (TEST_SRCDIR='${TEST_SRCDIR:-}', script: $0)"
fi
cd "$srcdir"

tmp=${TEST_TMPDIR:-}
if [[ -z "$tmp" ]]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
fi

CC=${CC:-cc}
CXX=${CXX:-c++}

# Runs a command; on failure prints what failed and stops.
step() {
    local what=$1
    shift
    echo "== $what"
    echo "   $*"
    "$@" || fail "$what (command: $*)"
}

# (e) _FORTIFY_SOURCE (its own Bazel target, `header_compile.sh fortify`: 28 compiles). glibc's
# fortify wrappers define read, pread, fread, memcpy and memset as inline functions in the
# program's own translation units, and call checked versions (__read_chk, ...) where the compiler
# knows a buffer's size. Every compiler and language (gcc, g++, clang, clang++) builds the
# implementation at -O2 with _FORTIFY_SOURCE=3 with and without ADSM_INTERPOSE_IO and
# ADSM_INTERPOSE_MEM, and with _FORTIFY_SOURCE=2 with both, under -Wall -Wextra -Werror (clang++ used to stop at "redefinition of
# 'read'", clang to warn -Wstatic-in-inline). The four compilers are required: .ci/setup installs
# them, and a missing one fails this test instead of skipping its builds.
fortify_checks() {
    for compiler in gcc g++ clang clang++; do
        command -v "$compiler" > /dev/null || fail "$compiler is not installed (.ci/setup installs it); the _FORTIFY_SOURCE builds need it"
    done
    printf '#define ADSM_IMPLEMENTATION\n#include "adsm.h"\nint adsm_header_compile_check_;\n' > "$tmp/fortify_impl.c"
    # fortify_build ID COMPILER LEVEL FLAGS...: the implementation into $tmp/fortify_ID.o; on failure
    # the command and its output land in $tmp/fortify_ID.failed
    fortify_build() {
        local id=$1 compiler=$2 level=$3
        shift 3
        local lang=(-x c -std=c11 -pedantic)
        [[ $compiler == *++ ]] && lang=(-x c++ -std=c++17)
        local cmd=("$compiler" "${lang[@]}" -O2 -U_FORTIFY_SOURCE "-D_FORTIFY_SOURCE=$level" -Wall -Wextra -Werror "$@"
            -I. -c -o "$tmp/fortify_$id.o" "$tmp/fortify_impl.c")
        if ! "${cmd[@]}" > "$tmp/fortify_$id.log" 2>&1; then
            { echo "   ${cmd[*]}"; cat "$tmp/fortify_$id.log"; } > "$tmp/fortify_$id.failed"
        elif nm -u "$tmp/fortify_$id.o" | grep -q '\.inline$'; then
            # clang's private copies of fortify's wrappers, called but not emitted: a link error
            { echo "   ${cmd[*]}"; echo "undefined:"; nm -u "$tmp/fortify_$id.o" | grep '\.inline$'; } \
                > "$tmp/fortify_$id.failed"
        fi
    }
    echo "== the implementation with _FORTIFY_SOURCE=3 (none, IO, MEM, IO+MEM) and 2 (IO+MEM): gcc, g++, clang, clang++ (-O2 -Werror)"
    jobs_max=$(nproc 2> /dev/null || echo 2)
    running=0
    for compiler in gcc g++ clang clang++; do
        for level in 2 3; do
            # Level 3 with each interposition set (a helper one set defines and another uses
            # warns as unused in one of them); level 2 with both, which reaches every wrapper: 20
            # compiles of about 5 s of CPU each, not 32 (CI's time on 2 cores is bounded).
            options_for_level=(io_mem)
            [[ $level == 3 ]] && options_for_level=(none io mem io_mem)
            for options in "${options_for_level[@]}"; do
                case $options in
                    none) flags=() ;;
                    io) flags=(-DADSM_INTERPOSE_IO) ;;
                    mem) flags=(-DADSM_INTERPOSE_MEM) ;;
                    io_mem) flags=(-DADSM_INTERPOSE_IO -DADSM_INTERPOSE_MEM) ;;
                esac
                fortify_build "${compiler}_${level}_$options" "$compiler" "$level" "${flags[@]}" &
                running=$((running + 1))
                if ((running >= jobs_max)); then
                    wait -n || true
                    running=$((running - 1))
                fi
            done
        done
    done
    wait
    if compgen -G "$tmp/fortify_*.failed" > /dev/null; then
        for failed in "$tmp"/fortify_*.failed; do
            echo "-- ${failed#"$tmp"/fortify_}" | sed 's/\.failed$//'
            cat "$failed"
        done
        fail "the implementation does not build with _FORTIFY_SOURCE (above)"
    fi

    # ... and a program's fortified calls reach adsm: a translation unit of the program's own, built
    # with _FORTIFY_SOURCE, calls read, pread, fread, memcpy and memset on a shared object a kernel
    # wrote (its pages protected) whose size the compiler knows, so glibc's wrappers call the checked
    # versions; the implementation (ADSM_INTERPOSE_IO and ADSM_INTERPOSE_MEM) is the object file just
    # built. libc's own checked read would fail with EFAULT there, libc's memcpy and memset would fetch
    # the blocks first. Level 2 also with _FILE_OFFSET_BITS=64 (pread is pread64 there).
    cat > "$tmp/fortified_io.c" <<'PROGRAM'
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fileno, pread (g++ defines it already) */
#endif
#include "adsm.h"
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

ADSM_KERNEL(fill, ADSM_OUT(int32_t, p), ADSM_VALUE(size_t, n));
void fill(adsm_grid g, int32_t *p, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) { if (i < n) p[i] = -1; }
}

#define N ((size_t)65536)
/* adsm_alloc with a result size the compiler knows (alloc_size): fortified calls on it are checked
 * (not static: clang forgets alloc_size on a static function) */
void *sized_alloc(size_t n) __attribute__((noinline, alloc_size(1)));
void *sized_alloc(size_t n) { return adsm_alloc(n); }

static int failed(const char *what) {
    fprintf(stderr, "fortified_io: %s\n", what);
    return 1;
}

/* a kernel writes the object: the CPU's copy is invalid and its pages protected; counters reset */
static int invalidate(unsigned char *obj) {
    return ADSM_CALL(fill, adsm_grid_1d((uint32_t)(N / 4 / 256), 256), (int32_t *)obj, N / 4) == ADSM_OK &&
           adsm_sync() == ADSM_OK && adsm_reset_stats() == ADSM_OK;
}

static int nothing_fetched(void) {
    adsm_stats s;
    return adsm_get_stats(&s) == ADSM_OK && s.d2h_bytes == 0;
}

int main(int argc, char **argv) {
    static unsigned char data[N + 10];
    volatile size_t count = N; /* not a constant: the checked call decides at run time */
    size_t n = count, i;
    int bad = 0;
    for (i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 7 + 3);
    FILE *f = argc == 2 ? fopen(argv[1], "w+") : NULL;
    if (!f || fwrite(data, 1, sizeof data, f) != sizeof data || fflush(f) != 0) return failed("cannot write the file");
    int fd = fileno(f);
    unsigned char *obj = (unsigned char *)sized_alloc(N);
    if (!obj) return failed(adsm_last_error());
    if (__glibc_objsize0(obj) != N) return failed("the compiler does not know the object's size");
    if (!invalidate(obj) || lseek(fd, 0, SEEK_SET) != 0) return failed("setup for read");
    if (read(fd, obj, n) != (ssize_t)N || memcmp(obj, data, N) != 0) bad |= failed("read");
    if (!invalidate(obj)) return failed("setup for pread");
    if (pread(fd, obj, n, 10) != (ssize_t)N || memcmp(obj, data + 10, N) != 0) bad |= failed("pread");
    if (!invalidate(obj) || fseek(f, 0, SEEK_SET) != 0) return failed("setup for fread");
    if (fread(obj, 1, n, f) != N || memcmp(obj, data, N) != 0) bad |= failed("fread");
    if (!invalidate(obj)) return failed("setup for memcpy");
    if (memcpy(obj, data, n) != obj || !nothing_fetched() || memcmp(obj, data, N) != 0) bad |= failed("memcpy");
    if (!invalidate(obj)) return failed("setup for memset");
    if (memset(obj, 0x5a, n) != obj || !nothing_fetched()) bad |= failed("memset");
    for (i = 0; i < N; i++)
        if (obj[i] != 0x5a) break;
    if (i < N) bad |= failed("memset's bytes");
    fclose(f);
    adsm_free(obj);
    adsm_shutdown();
    return bad;
}
PROGRAM
    for compiler in gcc g++ clang clang++; do
        lang=(-x c -std=c11 -pedantic)
        [[ $compiler == *++ ]] && lang=(-x c++ -std=c++17)
        for level in 2 3; do
            extra=()
            [[ $level == 2 ]] && extra=(-D_FILE_OFFSET_BITS=64)
            step "fortified program, $compiler, _FORTIFY_SOURCE=$level ${extra[*]}" \
                "$compiler" "${lang[@]}" -O2 -U_FORTIFY_SOURCE "-D_FORTIFY_SOURCE=$level" "${extra[@]}" -Wall -Wextra \
                -Werror -I. -c -o "$tmp/fortified_io.o" "$tmp/fortified_io.c"
            step "link it with the implementation ($compiler, IO+MEM)" \
                "$compiler" -o "$tmp/fortified_io" "$tmp/fortified_io.o" "$tmp/fortify_${compiler}_${level}_io_mem.o" \
                -pthread -ldl
            step "run it" env ADSM_BACKEND=emu "$tmp/fortified_io" "$tmp/fortified_io.data"
        done
    done
}

if [[ $mode == fortify ]]; then
    fortify_checks
    echo "PASS: header_compile_test fortify"
    exit 0
fi

printf '#include "adsm.h"\nint adsm_header_compile_check_;\n' > "$tmp/only_header.c"
printf '#define ADSM_IMPLEMENTATION\n#include "adsm.h"\nint adsm_header_compile_check_;\n' \
    > "$tmp/with_impl.c"
# every opt-out and opt-in the implementation offers compiles warning-free too
printf '#define ADSM_IMPLEMENTATION\n#define ADSM_NO_INTERPOSE_SIGNALS\n#define ADSM_INTERPOSE_IO\n#define ADSM_INTERPOSE_MEM\n#include "adsm.h"\nint adsm_header_compile_check_;\n' \
    > "$tmp/with_options.c"

# (0) Layering (README "Layout"): every implementation file includes what it uses and compiles on
# its own, and includes only files listed before it in adsm.h's implementation section. Together
# these make an upward call impossible: a file can only see declarations of the layers below it.
# The shared layers sit in adsm_impl/ itself, each backend's own files in a folder of their own
# (adsm_impl/cuda/, adsm_impl/emu/): there a file includes the shared ones as "../common.h", its
# folder's as "cuda_driver.h", and nothing from another backend's folder. Files are named by their
# path under adsm_impl/ ("os.h", "cuda/cuda_driver.h"), an include by the path it resolves to.
mapfile -t layers < <(sed -n 's|^#include "adsm_impl/\(.*\.h\)"$|\1|p' adsm.h)
((${#layers[@]} > 10)) || fail "cannot read the implementation file list from adsm.h"
declare -A rank
for i in "${!layers[@]}"; do rank[${layers[$i]}]=$i; done
# every .h under adsm_impl/, its folders' too (-L: under `bazel test` the files are symlinks)
mapfile -t impl_files < <(cd adsm_impl && find -L . -name '*.h' -type f | sed 's|^\./||' | sort)
((${#impl_files[@]} >= ${#layers[@]})) || fail "found ${#impl_files[@]} files under adsm_impl/, fewer than adsm.h lists"
echo "== every file under adsm_impl/ (${#impl_files[@]}) is in adsm.h's list; each includes only files listed before it"
for file in "${impl_files[@]}"; do
    path=adsm_impl/$file
    [[ -n "${rank[$file]:-}" ]] || fail "$path is not included by adsm.h's implementation section"
    dir=${file%/*}
    [[ $dir == "$file" ]] && dir=""
    while read -r included; do
        # the path under adsm_impl/ the include resolves to: relative to the including file's folder
        used=${dir:+$dir/}$included
        while [[ $used =~ ^(.*/)?[a-z_]+/\.\./(.*)$ ]]; do used=${BASH_REMATCH[1]}${BASH_REMATCH[2]}; done
        [[ $used == ../adsm.h ]] && continue # the public declarations (common.h), above every layer
        [[ $used != ../* && $used != */../* ]] || fail "$path includes \"$included\", outside adsm_impl/"
        [[ -n "${rank[$used]:-}" ]] || fail "$path includes \"$included\" (adsm_impl/$used), which adsm.h does not list"
        ((rank[$used] < rank[$file])) || fail "$path includes adsm_impl/$used, a layer above it in adsm.h's list"
        if [[ -n $dir && $used == */* && ${used%/*} != "$dir" ]]; then
            fail "$path includes adsm_impl/$used, another backend's own file"
        fi
    done < <(sed -n 's|^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*$|\1|p' "$path")
done
for file in "${layers[@]}"; do
    printf '#include "adsm_impl/%s"\n' "$file" > "$tmp/alone_${file//\//_}.c"
    step "C11 -pedantic: adsm_impl/$file on its own" \
        "$CC" -std=c11 -Wall -Wextra -Werror -pedantic -fsyntax-only -I. "$tmp/alone_${file//\//_}.c"
done

# (a) strict C11
for tu in only_header with_impl with_options; do
    # compiled, not only parsed: unused-static warnings come from the compiler's back end
    step "C11 -pedantic: $tu" \
        "$CC" -std=c11 -Wall -Wextra -Werror -pedantic -c -o "$tmp/$tu.o" -I. "$tmp/$tu.c"
done
# ... and optimised, as programs build it: some warnings (format truncation) need the optimiser's
# value ranges (Bazel's builds do not use -Werror, so they would land unseen)
for tu in with_impl with_options; do
    step "C11 -O2 -pedantic: $tu" \
        "$CC" -std=c11 -O2 -Wall -Wextra -Werror -pedantic -c -o "$tmp/$tu.O2.o" -I. "$tmp/$tu.c"
done

# (b) C++17: the declarations, the kernel DSL and the implementation with every option
# (tests/cplusplus_test.sh builds and runs C++ and CUDA programs).
cat > "$tmp/dsl_cpp.c" <<'CPP'
#include "adsm.h"
ADSM_KERNEL(saxpy, ADSM_OUT(float, y), ADSM_IN(float, x), ADSM_VALUE(float, a), ADSM_VALUE(size_t, n));
void saxpy(adsm_grid g, float *y, const float *x, float a, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) { if (i < n) y[i] = a * x[i] + y[i]; }
}
ADSM_SHARED(typedef struct two { float a, b; } two;);
ADSM_KERNEL_DEF(sum2, (ADSM_OUT(float, y), ADSM_VALUE(two, t), ADSM_VALUE(size_t, n)), g, {
    ADSM_FOR_EACH_THREAD(g, i) { if (i < n) y[i] = t.a + t.b; }
});
adsm_result launch_saxpy(float *y, const float *x, size_t n) {
    two t = {1.0f, 2.0f};
    adsm_result r = ADSM_CALL(saxpy, adsm_grid_1d(1, 256), y, x, 2.0f, n);
    return r != ADSM_OK ? r : ADSM_CALL(sum2, adsm_grid_1d(1, 256), y, t, n);
}
CPP
for tu in only_header dsl_cpp; do
    step "C++17: $tu" \
        "$CXX" -std=c++17 -Wall -Wextra -Werror -pedantic -fsyntax-only -I. -x c++ "$tmp/$tu.c"
done
for tu in with_impl with_options; do
    step "C++17: $tu" \
        "$CXX" -std=c++17 -Wall -Wextra -Werror -c -o "$tmp/$tu.cpp.o" -I. -x c++ "$tmp/$tu.c"
done

# (a2) the kernel DSL as strict C11
step "C11 -pedantic: dsl" \
    "$CC" -std=c11 -Wall -Wextra -Werror -pedantic -fsyntax-only -I. "$tmp/dsl_cpp.c"

# (a3) ADSM_CALL checks its arguments against the declaration: a wrong pointer type or a body
# that does not match the declaration must not compile.
cat > "$tmp/bad_call.c" <<'BAD'
#include "adsm.h"
ADSM_KERNEL(scale, ADSM_OUT(float, y), ADSM_IN(float, x), ADSM_VALUE(size_t, n));
adsm_result call_with_ints(int *y, const float *x) { return ADSM_CALL(scale, adsm_grid_1d(1, 1), y, x, 4); }
BAD
cat > "$tmp/bad_body.c" <<'BAD'
#include "adsm.h"
ADSM_KERNEL(scale, ADSM_OUT(float, y), ADSM_IN(float, x), ADSM_VALUE(size_t, n));
void scale(adsm_grid g, double *y, const float *x, size_t n) { (void)g; (void)y; (void)x; (void)n; }
BAD
for tu in bad_call bad_body; do
    echo "== must not compile: $tu"
    if "$CC" -std=c11 -Werror=incompatible-pointer-types -fsyntax-only -I. "$tmp/$tu.c" 2>/dev/null; then
        fail "$tu compiled, but ADSM_KERNEL should have made it a type error"
    fi
done

# (a4) A kernel takes 1..16 parameters: 16 compile, 17 and 0 do not (docs/misuse.md). The lists
# differ only in their length, so the 16-parameter file is the control for the other two.
kernel_params() { # kernel_params N: "ADSM_OUT(int, p0), ADSM_VALUE(int, p1), ..., ADSM_VALUE(int, pN-1)"
    local i list=""
    for ((i = 0; i < $1; i++)); do
        if ((i == 0)); then list="ADSM_OUT(int, p0)"; else list="$list, ADSM_VALUE(int, p$i)"; fi
    done
    echo "$list"
}
printf '#include "adsm.h"\nADSM_KERNEL(many, %s);\n' "$(kernel_params 16)" > "$tmp/params_16.c"
printf '#include "adsm.h"\nADSM_KERNEL(many, %s);\n' "$(kernel_params 17)" > "$tmp/params_17.c"
printf '#include "adsm.h"\nADSM_KERNEL(none);\n' > "$tmp/params_0.c"
step "C11 -pedantic: 16 kernel parameters" \
    "$CC" -std=c11 -Wall -Wextra -Werror -pedantic -fsyntax-only -I. "$tmp/params_16.c"
for tu in params_17 params_0; do
    echo "== must not compile: $tu"
    if "$CC" -std=c11 -fsyntax-only -I. "$tmp/$tu.c" 2>/dev/null; then
        fail "$tu compiled, but ADSM_KERNEL takes 1..16 parameters"
    fi
done

# (a5) A kernel name that ADSM_KERNEL never declared has no launcher, so ADSM_CALL with it does
# not build (a compile error with GCC 14 and Clang 16, an undefined reference before that). The
# same program with the declared name is the control.
cat > "$tmp/kernel_name.c" <<'NAME'
#define ADSM_IMPLEMENTATION
#include "adsm.h"
ADSM_KERNEL(scale, ADSM_OUT(float, y), ADSM_VALUE(size_t, n));
void scale(adsm_grid g, float *y, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) { if (i < n) y[i] *= 2.0f; }
}
/* through a second macro, so KERNEL_NAME is expanded before ADSM_CALL pastes it */
#define CALL_BY_NAME(k, y) ADSM_CALL(k, adsm_grid_1d(1, 4), y, 4)
int main(void) {
    float *y = adsm_alloc(4 * sizeof *y);
    return CALL_BY_NAME(KERNEL_NAME, y) != ADSM_OK;
}
NAME
step "build ADSM_CALL of a declared kernel" \
    "$CC" -std=c11 -DKERNEL_NAME=scale -I. "$tmp/kernel_name.c" -pthread -ldl -o "$tmp/kernel_name"
echo "== must not build: ADSM_CALL of an undeclared kernel name"
if "$CC" -std=c11 -DKERNEL_NAME=scael -I. "$tmp/kernel_name.c" -pthread -ldl -o "$tmp/kernel_name" 2>/dev/null; then
    fail "ADSM_CALL(scael, ...) built, but no kernel of that name was declared"
fi

# (c) plain build of the vecadd example, then run it
[[ -f examples/vecadd.c ]] || fail "examples/vecadd.c not found in $srcdir"
step "build examples/vecadd.c with plain cc" \
    "$CC" -std=c11 -I. examples/vecadd.c -pthread -ldl -o "$tmp/vecadd"
echo "== run vecadd"
set +e
"$tmp/vecadd"
rc=$?
set -e
[[ $rc -eq 0 ]] || fail "examples/vecadd exited with status $rc"

step "build examples/linked_list.c with plain cc" \
    "$CC" -std=c11 -I. examples/linked_list.c -pthread -ldl -o "$tmp/linked_list"
step "run linked_list" "$tmp/linked_list"

# (d) a fully static program: dlsym cannot find libc's sigaction there, so adsm refuses to start
# and says why (it used to report only that the device process failed); with
# ADSM_NO_INTERPOSE_SIGNALS it calls libc's sigaction directly and runs
step "build examples/vecadd.c with -static" \
    "$CC" -std=c11 -I. examples/vecadd.c -pthread -ldl -static -o "$tmp/vecadd_static"
echo "== run the static vecadd: a clear refusal"
set +e
out=$(ADSM_BACKEND=emu "$tmp/vecadd_static" 2>&1)
rc=$?
set -e
[[ $rc -ne 0 ]] || fail "the static vecadd ran, yet adsm cannot interpose sigaction there"
grep -q "linked with -static" <<< "$out" || fail "the static vecadd did not say why: $out"
step "build examples/vecadd.c with -static -DADSM_NO_INTERPOSE_SIGNALS" \
    "$CC" -std=c11 -DADSM_NO_INTERPOSE_SIGNALS -I. examples/vecadd.c -pthread -ldl -static -o "$tmp/vecadd_static"
step "run the static vecadd without signal interposition" env ADSM_BACKEND=emu "$tmp/vecadd_static"
# ADSM_INTERPOSE_IO there: no dynamic symbols for dlsym, so libc's read, fread, ... are reached
# through the system calls and glibc's own names (the first interposed call used to jump to 0);
# with _FORTIFY_SOURCE the checked entry points too
step "build examples/file_vecadd.c (ADSM_INTERPOSE_IO) with -static -O2 -D_FORTIFY_SOURCE=2" \
    "$CC" -std=c11 -O2 -D_FORTIFY_SOURCE=2 -DADSM_NO_INTERPOSE_SIGNALS -I. examples/file_vecadd.c -pthread -ldl \
    -static -o "$tmp/file_vecadd_static"
echo "== run the static file_vecadd"
out=$(cd "$tmp" && ADSM_BACKEND=emu ./file_vecadd_static 2>&1) || fail "the static file_vecadd failed: $out"
grep -q " 0 wrong" <<< "$out" || fail "the static file_vecadd gave wrong results: $out"

if [[ $mode == all ]]; then
    fortify_checks
fi

echo "PASS: header_compile_test"
