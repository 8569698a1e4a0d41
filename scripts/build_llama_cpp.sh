#!/usr/bin/env bash
# Builds llama.cpp's own llama-server and llama-bench from the sources of the installed
# llama-cpp-python (its sdist, from pip), the comparison binaries for specchat's speed figures.
#
#   scripts/build_llama_cpp.sh [--version V] [--check-model FILE.gguf] [--jobs N]
#
# The build is cached outside the clone, in ${SPECCHAT_LLAMA_CPP_CACHE:-~/.cache/specchat-tests}/
# llama-cpp-<version>/, and prints the folder of the binaries last (bin/llama-server,
# bin/llama-bench). A second run with the same version reuses it.
#
# Flags: llama.cpp's native build (-DGGML_NATIVE=ON), what `pip install llama-cpp-python` gives
# on the same machine. On a CPU that reports Intel AMX, native flags compile llama.cpp's AMX
# kernels, which die with an illegal instruction on some machines (virtual machines whose CPU
# reports AMX). There the script says so and builds with the CPU's other instruction sets named
# one by one and AMX left out, so llama.cpp keeps its weight repacking (CPU_REPACK):
#   - before building, a small AMX program tries the tile instructions;
#   - with --check-model (a GGUF with Q4_0/Q4_K/Q8_0 weights), after a native build llama-bench
#     reads 32 tokens; if it dies, the build is redone without AMX.
set -euo pipefail

version=""
check_model=""
jobs="$(nproc 2>/dev/null || echo 2)"
while [ $# -gt 0 ]; do
    case "$1" in
        --version) version="$2"; shift 2 ;;
        --check-model) check_model="$2"; shift 2 ;;
        --jobs) jobs="$2"; shift 2 ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

python="${PYTHON:-python3}"
if [ -z "$version" ]; then
    version="$("$python" -c 'from importlib.metadata import version; print(version("llama-cpp-python"))')" || {
        echo "llama-cpp-python is not installed for $python: pass --version" >&2; exit 2; }
fi
root="${SPECCHAT_LLAMA_CPP_CACHE:-$HOME/.cache/specchat-tests}/llama-cpp-$version"
mkdir -p "$root"
log() { echo "build_llama_cpp: $*" >&2; }

# 1. The sources: the same sdist pip built the installed package from.
src="$root/src/llama_cpp_python-$version"
if [ ! -f "$src/vendor/llama.cpp/CMakeLists.txt" ]; then
    log "fetching the llama-cpp-python $version sdist"
    mkdir -p "$root/src"
    "$python" -m pip download --quiet --no-deps --no-binary llama-cpp-python \
        "llama-cpp-python==$version" -d "$root/src"
    tar -xzf "$root/src/llama_cpp_python-$version.tar.gz" -C "$root/src"
fi
llama="$src/vendor/llama.cpp"

# 2. Does this CPU report AMX, and do its tile instructions run here?
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
has() { case "$cpu_flags" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
amx_runs() {
    local dir="$root/amx-probe"
    mkdir -p "$dir"
    cat > "$dir/probe.c" <<'EOF'
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/syscall.h>
typedef struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } cfg_t;
int main(void) {
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */)) return 3;
    static int8_t a[16 * 64], b[16 * 64];
    static int32_t c[16 * 16];
    cfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 3; i++) { cfg.rows[i] = 16; cfg.colsb[i] = 64; }
    for (int i = 0; i < 16 * 64; i++) { a[i] = (int8_t) (i % 7); b[i] = (int8_t) (i % 5); }
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_loadd(1, a, 64);
    _tile_loadd(2, b, 64);
    _tile_dpbssd(0, 1, 2);
    _tile_stored(0, c, 64);
    _tile_release();
    printf("%d\n", c[5]);
    return 0;
}
EOF
    cc -O1 -mamx-tile -mamx-int8 "$dir/probe.c" -o "$dir/probe" 2>/dev/null || return 1
    "$dir/probe" >/dev/null 2>&1
}

# The CPU's instruction sets named one by one, without AMX (what GGML_NATIVE would pick).
non_amx_flags() {
    local f="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
    local pair
    for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx512f:AVX512 \
            avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16 avx512vbmi:AVX512_VBMI \
            avx_vnni:AVX_VNNI; do
        if has "${pair%%:*}"; then f="$f -DGGML_${pair#*:}=ON"; else f="$f -DGGML_${pair#*:}=OFF"; fi
    done
    echo "$f"
}

build() {  # build DIR FLAGS...
    local dir="$1"; shift
    log "building llama-server and llama-bench in $dir ($*); about 13 minutes on 2 cores"
    cmake -S "$llama" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=ON "$@" >"$dir.log" 2>&1 \
        || { tail -20 "$dir.log" >&2; return 1; }
    cmake --build "$dir" -j "$jobs" --target llama-server llama-bench >>"$dir.log" 2>&1 \
        || { tail -20 "$dir.log" >&2; return 1; }
    echo "$*" > "$dir/flags.txt"
}

crashes_with() {  # crashes_with BINDIR: llama-bench dies on the check model (a signal)
    [ -n "$check_model" ] || return 1
    local rc=0
    "$1/llama-bench" -m "$check_model" -p 32 -n 0 -r 1 -t 2 >/dev/null 2>&1 || rc=$?
    [ "$rc" -gt 128 ]
}

native="$root/build-native"
noamx="$root/build-no-amx"
choice=""
if [ -x "$noamx/bin/llama-server" ] && [ -x "$noamx/bin/llama-bench" ]; then
    choice="$noamx"
elif [ -x "$native/bin/llama-server" ] && [ -x "$native/bin/llama-bench" ] \
        && ! crashes_with "$native/bin"; then
    choice="$native"
fi

if [ -z "$choice" ]; then
    if has amx_tile && ! amx_runs; then
        log "this CPU reports AMX but its tile instructions die here: AMX left out"
        build "$noamx" $(non_amx_flags) && choice="$noamx"
    else
        mkdir -p "$native"
        build "$native" -DGGML_NATIVE=ON
        if crashes_with "$native/bin"; then
            log "the native build dies on $check_model (AMX kernels?): building again without AMX"
            build "$noamx" $(non_amx_flags) && choice="$noamx"
        else
            choice="$native"
        fi
    fi
fi
ln -sfn "$choice/bin" "$root/bin"
log "flags: $(cat "$choice/flags.txt")"
echo "$root/bin"
