#!/usr/bin/env bash
# The GPU proof run (issue 8). On a machine with an NVIDIA GPU and no internet access:
#
#   1. build   llama-cpp-python with CUDA for this GPU only (CMAKE_CUDA_ARCHITECTURES=native)
#              from the stripped sdist in .gpu-bundle/ (made by scripts/prepare_gpu_bundle.sh
#              where PyPI is reachable), into $WORK/site; a finished build there is reused
#   2. doctor  `specchat doctor` must name the CUDA backend and list the GPU with its memory
#   3. tests   the exactness tests (greedy speculative == plain, the χ² tests) and the offload,
#              memory-check and hardware tests, every layer offloaded (a GPU build's default)
#   4. proof   a ~0.4 B-parameter pair written with the gguf package (no downloads), loaded
#              with every layer on the GPU: greedy speculative == plain token for token, and
#              plain vs speculative tokens/s (specchat.devtools.gpu_proof)
#
# then prints a summary. Logs and figures go to $OUT (the device tool's folder) or $WORK/out:
# build.log (its tail), doctor.txt, pytest.log, gpu_proof.txt, gpu_proof.json; bisect.txt when
# a model load crashed (scripts/gpu_load_bisect.py: which earlier step of a process causes it).
#
#   scripts/gpu_check.sh                         on the GPU machine
#   scripts/gpu_check.sh --build-only            step 1 alone (to split a short time limit)
#   scripts/gpu_check.sh --cpu-dry-run           steps 2-4 here, on the installed CPU build
#   scripts/gpu_check.sh --cpu-dry-run --build   and step 1 too, with CUDA off (minutes)
#
# Environment: PYTHON (python3), CUDA_ARCH (default: the GPU's compute capability, e.g. 90 for
# an H100/H200), SCALE (gpu | large | cpu), GPU_CHECK_WORK (/tmp/specchat-gpu), GPU_BUNDLE
# (.gpu-bundle), GPU_CMAKE_EXTRA (more CMake flags: -DGGML_CUDA_FA=off skips the flash-attention
# kernels, about half of the CUDA sources, when a lease is too short for the whole build).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

dry_run=0 build_in_dry_run=0 build_only=0
for arg in "$@"; do
  case $arg in
    --cpu-dry-run) dry_run=1 ;;
    --build) build_in_dry_run=1 ;;
    --build-only) build_only=1 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check: unknown option $arg (try --help)" >&2; exit 2 ;;
  esac
done

PY=${PYTHON:-python3}
WORK=${GPU_CHECK_WORK:-/tmp/specchat-gpu}
BUNDLE=${GPU_BUNDLE:-$ROOT/.gpu-bundle}
OUTDIR=${OUT:-$WORK/out}
SCALE=${SCALE:-$([ $dry_run = 1 ] && echo cpu || echo gpu)}
mkdir -p "$WORK" "$OUTDIR"
export PYTHONUNBUFFERED=1 SPECCHAT_HOME=$WORK/home

declare -a summary=()
failed=0
step() { echo; echo "=== $* ($(date +%H:%M:%S))"; }
result() {  # result NAME STATUS DETAIL
  summary+=("$(printf '%-8s %-5s %s' "$1" "$2" "$3")")
  [ "$2" = FAIL ] && failed=1
  return 0
}
finish() {
  step "summary"
  printf '%s\n' "${summary[@]}"
  [ $dry_run = 1 ] && echo "(CPU dry run: no GPU was used)"
  exit $failed
}

# --- 0. the machine ---------------------------------------------------------------------------
step "machine"
"$PY" --version
if [ $dry_run = 0 ]; then
  if ! nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv; then
    echo "gpu_check: no NVIDIA GPU answers nvidia-smi (use --cpu-dry-run on a CPU machine)" >&2
    exit 2
  fi
  export PATH=$PATH:/usr/local/cuda/bin
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  nvcc --version | tail -2 || { echo "gpu_check: nvcc (the CUDA compiler) not found" >&2; exit 2; }
  # Compile for this GPU's compute capability only (9.0 -> 90); "native" asks CMake to probe.
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  CUDA_ARCH=${CUDA_ARCH:-${cap:-native}}
fi

# --- 1. build ---------------------------------------------------------------------------------
site=$WORK/site
if [ $dry_run = 0 ]; then
  cmake_args="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCH -DLLAVA_BUILD=off"
  cmake_args+=${GPU_CMAKE_EXTRA:+ $GPU_CMAKE_EXTRA}
  built_lib=$site/llama_cpp/lib/libggml-cuda.so
else
  cmake_args="-DGGML_CUDA=off -DLLAVA_BUILD=off"
  built_lib=$site/llama_cpp/lib/libllama.so
fi
if [ $dry_run = 0 ] || [ $build_in_dry_run = 1 ]; then
  step "build llama-cpp-python ($cmake_args)"
  sdist=$(ls "$BUNDLE"/llama_cpp_python-*.tar.gz 2>/dev/null | head -1)
  if [ -z "$sdist" ]; then
    echo "gpu_check: no llama-cpp-python sdist in $BUNDLE: run scripts/prepare_gpu_bundle.sh" \
         "where PyPI is reachable and carry .gpu-bundle" >&2
    exit 2
  fi
  stamp="$(basename "$sdist") $cmake_args"
  if [ -f "$built_lib" ] && [ "$(cat "$site/.built-from" 2>/dev/null)" = "$stamp" ]; then
    echo "reusing the build in $site"
    result build PASS "reused $site"
  else
    t0=$SECONDS
    rm -rf "$site.new"
    # --no-build-isolation: the build tools (scikit-build-core, cmake, ninja) come from this
    # Python, since nothing can be fetched here. A fixed build-dir makes a rerun after a
    # time-out continue where the compiler stopped.
    if CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
       "$PY" -m pip install -v --no-index --no-deps --no-build-isolation --no-cache-dir \
         --config-settings="build-dir=$WORK/build" \
         --target "$site.new" "$sdist" > "$WORK/build.log" 2>&1 \
       && [ -f "$site.new/llama_cpp/lib/$(basename "$built_lib")" ]
    then
      rm -rf "$site" && mv "$site.new" "$site" && echo "$stamp" > "$site/.built-from"
      result build PASS "$((SECONDS - t0)) s, $(du -sh "$site/llama_cpp/lib" | cut -f1) of libraries"
    else
      tail -40 "$WORK/build.log"
      result build FAIL "see build.log"
    fi
    tail -3000 "$WORK/build.log" > "$OUTDIR/build.log"
  fi
  [ $failed = 1 ] && finish
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
fi
[ $build_only = 1 ] && finish

# Pure-Python packages the GPU image lacks travel as wheels in the bundle.
if [ $dry_run = 0 ] && ls "$BUNDLE"/wheels/*.whl > /dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$WORK/deps" \
    "$BUNDLE"/wheels/*.whl && export PYTHONPATH=$PYTHONPATH:$WORK/deps
fi
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}

# The CUDA backend prints its devices on stderr at import: keep stdout's last line alone.
offload=$("$PY" -c 'import llama_cpp; print(int(llama_cpp.llama_supports_gpu_offload()))' 2>/dev/null | tail -1)
echo "llama_cpp from $("$PY" -c 'import llama_cpp; print(llama_cpp.__file__)'), GPU offload: $offload"
if [ $dry_run = 0 ] && [ "$offload" != 1 ]; then
  result offload FAIL "this llama-cpp-python cannot offload to the GPU"
  finish
fi

# --- 2. doctor --------------------------------------------------------------------------------
step "specchat doctor"
"$PY" -m specchat doctor > "$OUTDIR/doctor.txt" 2>&1
sed -n '/^hardware/,/^folders/p' "$OUTDIR/doctor.txt" | sed '$d'
if [ $dry_run = 1 ]; then
  grep -q "backend:" "$OUTDIR/doctor.txt" && result doctor PASS "backend and devices listed" \
    || result doctor FAIL "no hardware section (see doctor.txt)"
elif grep -Eq "backend: +CUDA" "$OUTDIR/doctor.txt" && grep -Eq "^ +CUDA0 +gpu" "$OUTDIR/doctor.txt"
then
  result doctor PASS "$(grep -E 'backend:' "$OUTDIR/doctor.txt" | sed 's/^ *//')"
else
  result doctor FAIL "doctor does not show the CUDA backend and device (see doctor.txt)"
fi

# --- 3. tests ---------------------------------------------------------------------------------
step "exactness, offload and memory tests"
tests=()
for f in tests/test_speculative*.py tests/test_verify*.py tests/test_engine_plain.py \
         tests/test_offload*.py tests/test_memory_plan*.py tests/test_hardware*.py; do
  [ -f "$f" ] && tests+=("$f")
done
if ! ls tests/test_speculative*.py > /dev/null 2>&1; then
  echo "note: no tests/test_speculative*.py in this tree yet (the speculative engine is not merged):"
  echo "      plain-decoding, offload and memory tests only"
fi
echo "${tests[*]}"
# The real demo models cannot be fetched here; their tests are marked slow.
"$PY" -m pytest -q -p no:cacheprovider -m "not slow" "${tests[@]}" 2>&1 | tee "$OUTDIR/pytest.log"
rc=${PIPESTATUS[0]}
line=$(grep -E "[0-9]+ (passed|failed)" "$OUTDIR/pytest.log" | tail -1 | tr -d '=')
[ "$rc" = 0 ] && result tests PASS "$line" || result tests FAIL "${line:-pytest exit $rc}"
[ "$rc" -gt 128 ] && crashed=1

# --- 4. proof run -----------------------------------------------------------------------------
step "proof run: scale $SCALE, $([ $dry_run = 0 ] && echo "every layer offloaded" || echo "CPU build")"
require=$([ $dry_run = 0 ] && echo --require-gpu)
"$PY" -m specchat.devtools.gpu_proof --scale "$SCALE" $require --out "$WORK/models" \
  --json "$OUTDIR/gpu_proof.json" 2>&1 | tee "$OUTDIR/gpu_proof.txt"
rc=${PIPESTATUS[0]}
if [ "$rc" = 0 ]; then
  result proof PASS "$(grep -E '^loaded' "$OUTDIR/gpu_proof.txt")"
elif [ "$rc" -gt 128 ]; then
  result proof FAIL "crashed with signal $((rc - 128)) (see gpu_proof.txt)"
else
  result proof FAIL "$(grep -E '^FAIL' "$OUTDIR/gpu_proof.txt" | head -1)"
fi
rm -rf "$WORK/models"  # gigabytes of random weights
crashed=${crashed:-0}; [ "$rc" -gt 128 ] && crashed=1

# --- 5. a crashed load: which earlier step of the process causes it ---------------------------
if [ "$crashed" = 1 ]; then
  step "a load crashed: bisecting what came before it"
  "$PY" scripts/gpu_load_bisect.py 2>&1 | tee "$OUTDIR/bisect.txt"
  result bisect INFO "$(grep -cv ' ok' "$OUTDIR/bisect.txt") of $(wc -l < "$OUTDIR/bisect.txt") steps crashed the load (bisect.txt)"
fi

if "$PY" -m specchat bench --help > /dev/null 2>&1; then
  echo "note: \`specchat bench\` exists in this tree; the proof pair is written by"
  echo "      python -m specchat.devtools.gpu_proof --out DIR for a longer bench on it"
fi
finish
