#!/bin/bash
# On the device machine, repository root, in the call that carries the last part:
# unpacks the parts (.p*/ copied to /tmp/p by the earlier calls) into /tmp/site, links
# the image's CUDA 13 libraries under the names TF 2.21 opens, probes TF on the GPU.
# Exit status: the probe's (0: TF sees the GPU and its bf16 matmul is right).
set -u
T0=$(date +%s)
mkdir -p /tmp/p; cp -n .p[0-9]*/* /tmp/p/ 2>/dev/null
python3 -c "import zstandard" 2>/dev/null ||
  python3 -m pip install -q --no-index --no-deps --target /tmp/zst /tmp/p/zstandard-*.whl
PYTHONPATH=/tmp/zst python3 tools/device/unpack.py /tmp/p /tmp/site
[ $? -eq 0 ] || { echo "unpacking failed: is a part missing?"; exit 4; }
echo "unpacked in $(( $(date +%s) - T0 )) s: $(du -sh /tmp/site | cut -f1)"
L=/tmp/site/nvidia/standin/lib; mkdir -p $L; dirs=""
for pair in libcublas.so.12:libcublas.so.13 libcublasLt.so.12:libcublasLt.so.13 \
            libcufft.so.11:libcufft.so.12 libcusolver.so.11:libcusolver.so.12 \
            libcusparse.so.12:libcusparse.so.12 libcudnn.so.9:libcudnn.so.9 \
            libcurand.so.10:libcurand.so.10 libnccl.so.2:libnccl.so.2 \
            libnvJitLink.so.12:libnvJitLink.so.13; do
  want=${pair%%:*}
  have=$(find /opt /usr/local /usr/lib -name "${pair##*:}" 2>/dev/null | grep -v /tmp/site | head -1)
  echo "$want -> ${have:-MISSING}"
  [ -n "$have" ] && ln -sf "$have" $L/$want && dirs="$dirs:$(dirname "$have")"
done
echo "${dirs#:}" | tr ':' '\n' | sort -u | paste -sd: > /tmp/libdirs
source tools/device/env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
timeout 150 python3 tools/device/probe.py > /tmp/probe.log 2>&1; rc=$?
grep -v -E "^(WARNING: All log|I0000)" /tmp/probe.log | tail -20
echo "setup and probe: $(( $(date +%s) - T0 )) s, probe exit $rc"
exit $rc
