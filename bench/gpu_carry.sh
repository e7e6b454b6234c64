#!/usr/bin/env bash
# What bench/gpu_run.sh needs beside the wheels (bench/gpu_wheels.sh), into .gpu_carry
# (ignored: `echo /.gpu_carry/ >> .git/info/exclude`), for the device tool's carry:
#   triton-server/   Triton's qa/L0_backend_python, qa/python_models, qa/common and
#                    qa/L0_dlpack_multi_gpu at v2.51.0 (r24.10), only read
#   python_backend/  python_backend's examples/ at r24.10
#   pa/              perf_analyzer 2.48.0 (the tritonclient 2.48.0 wheel's binary, as
#                    ../shared/perf/setup_anchor.sh takes it) and the libraries the GPU
#                    machine lacks: libcudart.so.12 (nvidia-cuda-runtime-cu12 12.9.79),
#                    libb64, libssl3, zlib (Debian 12 packages)
#   bash bench/gpu_carry.sh SERVER_GIT PYTHON_BACKEND_GIT
# each a git directory holding those tags (the `fetch` tool's copies:
# /work/.mirror/triton-inference-server+server/repo, ...+python_backend/repo).
set -euo pipefail
server=${1:?usage: gpu_carry.sh SERVER_GIT PYTHON_BACKEND_GIT}
backend=${2:?usage: gpu_carry.sh SERVER_GIT PYTHON_BACKEND_GIT}
cd "$(dirname "$0")/.."
out=.gpu_carry
rm -rf "$out"
mkdir -p "$out/triton-server" "$out/python_backend" "$out/pa/lib"
git -C "$server" archive v2.51.0 qa/L0_backend_python qa/python_models qa/common \
    qa/L0_dlpack_multi_gpu | tar -x -C "$out/triton-server"
git -C "$backend" archive r24.10 examples | tar -x -C "$out/python_backend"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux1_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 -d "$tmp" tritonclient==2.48.0 \
    nvidia-cuda-runtime-cu12==12.9.79
python3 - "$tmp" "$out/pa" <<'PY'
import glob, shutil, sys, zipfile
tmp, pa = sys.argv[1], sys.argv[2]
for wheel, member, dest in (
        ("tritonclient-2.48.0-*.whl", "tritonclient-2.48.0.data/data/bin/perf_analyzer",
         "perf_analyzer"),
        ("nvidia_cuda_runtime_cu12-12.9.79-*.whl", "nvidia/cuda_runtime/lib/libcudart.so.12",
         "lib/libcudart.so.12")):
    with zipfile.ZipFile(glob.glob(f"{tmp}/{wheel}")[0]) as z, z.open(member) as src, \
            open(f"{pa}/{dest}", "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
chmod +x "$out/pa/perf_analyzer"
(cd "$tmp" && apt-get download -q libb64-0d libssl3 zlib1g >/dev/null)
for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$tmp/root"; done
for lib in libb64.so.0d libssl.so.3 libcrypto.so.3 libz.so.1; do
    cp -L "$(find "$tmp/root" -name "$lib" | head -1)" "$out/pa/lib/$lib"
done
missing=$(LD_LIBRARY_PATH="$out/pa/lib" ldd "$out/pa/perf_analyzer" | grep "not found" || true)
[ -z "$missing" ] || { echo "perf_analyzer still lacks: $missing"; exit 1; }
du -sh "$out"
