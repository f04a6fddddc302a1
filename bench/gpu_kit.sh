#!/usr/bin/env bash
# Gathers what a GPU machine without a package archive needs to build adsm's GPU check: the
# Debian packages of stb (stb_ds, which the implementation includes) and Criterion (the test
# suites) with the shared libraries Criterion loads, downloaded (not installed) into .gpu_kit/
# (ignored by git). Run it on a machine that reaches the Debian archive, take .gpu_kit/ along, and
# bench/gpu_check.sh unpacks it into bench/results/kit/ and builds against it, without touching
# the system (nothing is installed there). About 5 MB; plus, xz-compressed (about 32 MB), the
# NVRTC of this machine's CUDA toolkit, for a GPU machine without one: gpu_check.sh unpacks it only
# where the loader and the usual folders find no NVRTC (adsm uses it where the driver's major
# version is at least the toolkit's, and says so otherwise).
#
#   bench/gpu_kit.sh            then copy the repository (with .gpu_kit/) to the GPU machine
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
packages=(
    libstb-dev                     # stb_ds.h
    libcriterion-dev libcriterion3 libboxfort-dev # Criterion's headers and library
    libnanomsg5 libffi8 libgit2-1.5 # what libcriterion.so.3 loads ...
    libhttp-parser2.9 libmbedtls14 libmbedx509-1 libmbedcrypto7 libssh2-1 libpcre2-8-0 libssl3 zlib1g # ... libgit2
    libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1 # ... and its Kerberos
)
mkdir -p .gpu_kit
rm -f .gpu_kit/*.deb
# apt-get download writes into the current folder; _apt cannot write here, so it warns and
# downloads as the caller (harmless)
(cd .gpu_kit && apt-get download "${packages[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" >&2 || true)
n=$(ls .gpu_kit/*.deb 2>/dev/null | wc -l)
((n == ${#packages[@]})) || { echo "gpu_kit: got $n of ${#packages[@]} packages (apt-get update first?)" >&2; exit 1; }
echo "gpu_kit: $n packages, $(du -sh .gpu_kit | cut -f1), in .gpu_kit/" >&2
nvrtc=$(ls /usr/local/cuda/lib64/libnvrtc.so.[0-9]* 2>/dev/null | grep -v alt | sort -V | tail -1)
if [[ -n $nvrtc ]]; then
    mkdir -p .gpu_kit/nvrtc
    rm -f .gpu_kit/nvrtc/*.xz
    for lib in "$nvrtc" $(ls /usr/local/cuda/lib64/libnvrtc-builtins.so.[0-9]*.[0-9]* 2>/dev/null | sort -V | tail -1); do
        xz -6 -T2 -c "$lib" > ".gpu_kit/nvrtc/$(basename "$lib").xz"
    done
    echo "gpu_kit: NVRTC $(basename "$nvrtc"), $(du -sh .gpu_kit/nvrtc | cut -f1) compressed, in .gpu_kit/nvrtc/" >&2
else
    echo "gpu_kit: no NVRTC in /usr/local/cuda/lib64: the GPU machine must have its own" >&2
fi
