#!/usr/bin/env bash
# Prepare, on a machine WITH access to PyPI, what scripts/gpu_check.sh needs on a GPU machine
# WITHOUT internet access, in .gpu-bundle/ (git-ignored):
#
#   .gpu-bundle/llama_cpp_python-<version>.tar.gz   the sdist, stripped of .git and
#                                                   vendor/llama.cpp/{models,docs,media,
#                                                   benches,tools/ui} (76 MB -> ~9 MB)
#   .gpu-bundle/wheels/*.whl                        pure-Python packages the GPU image may lack
#                                                   (gguf, diskcache, platformdirs, textual and
#                                                   its two small dependencies; starlette and
#                                                   uvicorn, which the command line imports)
#
# Usage: scripts/prepare_gpu_bundle.sh [path/to/llama_cpp_python-X.tar.gz]
# Without an argument the sdist of the installed llama-cpp-python version is fetched with
# `pip download`. Carry the folder to the GPU machine (the device tool: carry [".gpu-bundle"]).
set -euo pipefail
cd "$(dirname "$0")/.."

BUNDLE=.gpu-bundle
PYVER=${GPU_PYTHON_VERSION:-3.12}  # the GPU machine's python3 (wheels below are pure Python)
VERSION=${LLAMA_CPP_PYTHON_VERSION:-$(python -c \
  'import importlib.metadata as m; print(m.version("llama-cpp-python"))')}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

sdist=${1:-}
if [ -z "$sdist" ]; then
  echo "fetching the llama-cpp-python $VERSION sdist"
  python -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$tmp/dl"
  sdist=$(ls "$tmp"/dl/llama_cpp_python-*.tar.gz)
fi
[ -f "$sdist" ] || { echo "no such sdist: $sdist" >&2; exit 2; }
name=$(basename "$sdist" .tar.gz)

echo "stripping $name"
tar -xzf "$sdist" -C "$tmp"
# Not needed to build the library, and most of the size: the vendored repo's git pack, model
# vocab files, docs, images, benchmark logs and the web UI's sources.
rm -rf "$tmp/$name/.git" "$tmp/$name/vendor/llama.cpp/"{models,docs,media,benches,tools/ui}
mkdir -p "$BUNDLE/wheels"
rm -f "$BUNDLE"/llama_cpp_python-*.tar.gz
tar -czf "$BUNDLE/$name.tar.gz" -C "$tmp" "$name"

echo "fetching wheels for Python $PYVER"
want=()
for dist in gguf diskcache platformdirs textual mdit-py-plugins starlette uvicorn; do
  v=$(python -c "import importlib.metadata as m, sys
try: print(m.version('$dist'))
except m.PackageNotFoundError: print('')")
  want+=("$dist${v:+==$v}")
done
rm -f "$BUNDLE"/wheels/*.whl
python -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
  -d "$BUNDLE/wheels" "${want[@]}"

du -sh "$BUNDLE"/*.tar.gz "$BUNDLE/wheels"
size=$(du -sm "$BUNDLE" | cut -f1)
echo "bundle: ${size} MiB in $BUNDLE (the device tool carries at most 64 MiB with the tree)"
if [ "$size" -gt 56 ]; then
  echo "warning: the bundle leaves little room for the working tree" >&2
fi
