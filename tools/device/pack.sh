#!/bin/bash
# Packs TensorFlow 2.21 and the rest of what tools/benchmark.py needs for a lent GPU
# machine that has no TensorFlow and reaches no registry (Python 3.12 there), in parts
# that fit the device tool's 64 MiB per call: .p00/ .p01/ ... in the repository root
# (ignored by .gitignore), each carried by one call. See BENCHMARKS.md, "GPU", for the
# calls, and WORKSPACE.md's layout entry for tools/device/.
#   tools/device/pack.sh [WORKDIR]       # ~15 minutes on 2 cores (zstd -19)
# ZSTD_LEVEL=3 packs in a minute, in more parts (a rehearsal: tools/device/rehearse.sh).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=${1:-/tmp/electra_gpu}
mkdir -p "$W/whl"
PLAT="--only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
# TF 2.21 is built with CUDA 12.5: its runtime, CUPTI (the profiler) and ptxas/libdevice
# (XLA) come from CUDA 12.8; cuBLAS and the libraries TF only opens are the image's
# CUDA 13 builds (tools/device/setup.sh). zstandard unpacks the parts there.
PKGS="tensorflow==2.21.0 tensorflow-text==2.21.1 keras==3.15.1 keras-hub==0.32.0
  ml-collections==1.1.0 protobuf==7.36.2 icu4py==1.2.0 namex optree termcolor gast
  astunparse kagglehub kagglesdk py-spy nvidia-cuda-runtime-cu12==12.8.90
  nvidia-cuda-cupti-cu12==12.8.90 nvidia-cuda-nvcc-cu12==12.8.93"
python3 -m pip download -q --no-deps $PLAT -d "$W/whl" $PKGS zstandard==0.25.0
rm -rf "$W/site"
(cd "$W/whl" && python3 -m pip install -q --no-deps --no-compile $PLAT --target "$W/site" \
  $(ls | grep -v '^zstandard'))
# What the benchmark never opens: TF's C++ headers, nvcc beyond ptxas and libdevice.
N="$W/site/nvidia"
rm -rf "$W/site/tensorflow/include" "$N/cuda_nvcc/include" "$N/cuda_nvcc/nvvm/lib64" \
  "$N/cuda_nvcc/nvvm/include" "$N/cuda_nvcc/lib" "$N/cuda_runtime/include" \
  "$N/cuda_cupti/include" "$N"/cuda_cupti/lib/libnvperf* "$N/cuda_cupti/lib/libcheckpoint.so"
find "$N/cuda_nvcc/bin" -type f ! -name ptxas -delete
tar -C "$W/site" -cf - . | zstd -q -${ZSTD_LEVEL:-19} --long=30 -T0 -f -o "$W/site.tar.zst"
rm -rf "$ROOT"/.p[0-9]*
# 61 MiB a part: with the tracked files (~2.1 MB) every call stays under the device
# tool's 64 MiB. zstandard's wheel (5.3 MiB; setup.sh installs it from any part) goes in
# the last part where it fits, else in a part of its own.
(cd "$W" && rm -f part* && split -b 61M -d -a 2 site.tar.zst part)
for f in "$W"/part*; do i=${f##*part}; mkdir -p "$ROOT/.p$i"; cp "$f" "$ROOT/.p$i/site.part$i"; done
wheel=$(ls "$W"/whl/zstandard-*.whl)
if [ $(( $(stat -c %s "$ROOT/.p$i/site.part$i") + $(stat -c %s "$wheel") )) -gt $(( 62 * 2**20 )) ]; then
  i=$(printf '%02d' $(( 10#$i + 1 ))); mkdir -p "$ROOT/.p$i"
fi
cp "$wheel" "$ROOT/.p$i/"
# The PyTorch peer lives outside the project (../shared/peers/): a copy beside compare.py,
# untracked and not ignored, so that it travels with the working tree on every call.
cp "$ROOT/../shared/peers/hf_electra_bench.py" "$ROOT/tools/device/hf_electra_bench.py"
du -sh "$ROOT"/.p[0-9]*
for d in "$ROOT"/.p[0-9]*; do
  [ $(du -sm "$d" | cut -f1) -le 62 ] || { echo "$d is over 62 MiB: too large for a call"; exit 1; }
done
