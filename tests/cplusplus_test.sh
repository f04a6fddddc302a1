#!/usr/bin/env bash
# C++ and CUDA projects need no C file: the implementation (ADSM_IMPLEMENTATION) compiles as C++17.
#   (a) examples/vecadd.c built as C++17 by g++ and clang++ (-Wall -Wextra -Werror) runs and
#       exits 0 on emu and host;
#   (b) a program of two translation units, a C one with the implementation and a C kernel
#       body and a C++ one that launches it and a single-source kernel (tests/cplusplus/), runs;
#   (c) tests/cplusplus/cxx_users.cpp, what a C++ programmer writes (an ADSM_VALUE struct with
#       default member initialisers, an ADSM_KERNEL_DEF body that ignores its grid, a CPU body
#       that throws), built with -pedantic -Wall -Wextra -Werror by g++ (C++11 compiled, C++17
#       and C++20 run) and clang++ (C++17), runs on emu and host; and adsm.h included inside
#       extern "C" { } compiles (tests/cplusplus/extern_c.cpp); every public macro compiles with
#       no warning under -Wold-style-cast -Wzero-as-null-pointer-constant -Wcast-qual
#       (tests/cplusplus/strict_user.cpp, g++ C++11 and clang++ C++20; g++ C++03 without them);
#   (d) with nvcc installed ($CUDA_HOME/bin/nvcc, default /usr/local/cuda): a .cu file with the
#       implementation and ADSM_CALL compiles and links with nvcc -std=c++17 and runs on emu.
# Runs under `bazel test` (sources from the runfiles tree) or by hand from the repository root.
set -euo pipefail

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

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

step() {
    local what=$1
    shift
    echo "== $what"
    echo "   $*"
    "$@" || fail "$what (command: $*)"
}

# Small runs: the emulated device needs little memory here.
export ADSM_EMU_MEMORY=256M

# (a) examples/vecadd.c as C++, with each C++ compiler there is (g++ at least).
cxx_found=0
for cxx in /usr/bin/g++ /usr/bin/clang++; do
    [[ -x "$cxx" ]] || continue
    cxx_found=$((cxx_found + 1))
    name=$(basename "$cxx")
    step "$name -x c++ examples/vecadd.c" \
        "$cxx" -std=c++17 -pedantic -Wall -Wextra -Werror -x c++ -I. examples/vecadd.c -pthread -ldl -o "$tmp/vecadd_$name"
    for backend in emu host; do
        step "run vecadd ($name) on $backend" env ADSM_BACKEND=$backend "$tmp/vecadd_$name"
    done
done
((cxx_found > 0)) || fail "no C++ compiler (/usr/bin/g++ or /usr/bin/clang++)"

# (b) C and C++ translation units in one program.
CC=${CC:-/usr/bin/cc}
CXX=${CXX:-/usr/bin/g++}
step "C TU with the implementation" \
    "$CC" -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -I. -c tests/cplusplus/impl.c -o "$tmp/impl.o"
step "C++ TU that launches" \
    "$CXX" -std=c++17 -Wall -Wextra -Werror -I. -c tests/cplusplus/mixed.cpp -o "$tmp/mixed.o"
step "link" "$CXX" "$tmp/impl.o" "$tmp/mixed.o" -pthread -ldl -o "$tmp/mixed"
step "run the mixed program on emu" env ADSM_BACKEND=emu "$tmp/mixed"

# (c) a C++ programmer's program: pedantic warnings as errors, a throwing kernel body
for cxx in /usr/bin/g++ /usr/bin/clang++; do
    [[ -x "$cxx" ]] || continue
    step "$(basename "$cxx") adsm.h inside extern \"C\" (compiles)" \
        "$cxx" -std=c++17 -pedantic -Wall -Wextra -Werror -I. -fsyntax-only tests/cplusplus/extern_c.cpp
done
# every public macro under the warnings strict C++ code bases turn on (C casts, 0 as NULL)
strict=(-pedantic -Wall -Wextra -Werror -Wold-style-cast -Wzero-as-null-pointer-constant -Wcast-qual)
step "g++ -std=c++11 strict warnings: tests/cplusplus/strict_user.cpp (compiles)" \
    /usr/bin/g++ -std=c++11 "${strict[@]}" -Wuseless-cast -I. -fsyntax-only tests/cplusplus/strict_user.cpp
step "g++ -std=c++03: tests/cplusplus/strict_user.cpp (compiles: no nullptr before C++11)" \
    /usr/bin/g++ -std=c++03 -Wall -Wextra -Werror -Wold-style-cast -Wcast-qual -I. -fsyntax-only tests/cplusplus/strict_user.cpp
if [[ -x /usr/bin/clang++ ]]; then
    step "clang++ -std=c++20 strict warnings: tests/cplusplus/strict_user.cpp (compiles)" \
        /usr/bin/clang++ -std=c++20 "${strict[@]}" -I. -fsyntax-only tests/cplusplus/strict_user.cpp
fi
step "g++ -std=c++11 -pedantic tests/cplusplus/cxx_users.cpp (compiles)" \
    /usr/bin/g++ -std=c++11 -pedantic -Wall -Wextra -Werror -I. -fsyntax-only tests/cplusplus/cxx_users.cpp
users=("/usr/bin/g++ -std=c++17" "/usr/bin/g++ -std=c++20")
[[ -x /usr/bin/clang++ ]] && users+=("/usr/bin/clang++ -std=c++17")
for u in "${users[@]}"; do
    read -r cxx std <<< "$u"
    bin="$tmp/cxx_users_$(basename "$cxx")_${std#-std=}"
    step "$(basename "$cxx") $std -pedantic tests/cplusplus/cxx_users.cpp" \
        "$cxx" "$std" -pedantic -Wall -Wextra -Werror -I. tests/cplusplus/cxx_users.cpp -pthread -ldl -o "$bin"
    for backend in emu host; do
        step "run cxx_users ($(basename "$cxx") $std) on $backend" env ADSM_BACKEND=$backend "$bin"
    done
done

# (d) nvcc
nvcc=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
if [[ -x "$nvcc" ]]; then
    step "nvcc -std=c++17 tests/cplusplus/launch.cu" \
        "$nvcc" -std=c++17 -Werror all-warnings -I. tests/cplusplus/launch.cu -o "$tmp/launch_cu" -ldl
    step "run the nvcc-built program on emu" env ADSM_BACKEND=emu "$tmp/launch_cu"
else
    echo "== nvcc not installed at $nvcc: skipped (d)"
fi
echo "PASS: cplusplus_test"
