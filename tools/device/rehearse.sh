#!/bin/bash
# The pack's rehearsal, on a CPU machine: what the device machine gets, and nothing else.
# Copies pack.sh's parts (.p*/) into an empty directory, unpacks them there as setup.sh
# does, and runs compare.py's tiny point on the CPU (ours traced: a profile and an HLO dump, as
# go.sh's --trace point) under Python 3.12 started with -S (no site-packages) and a path of
# the pack, a stand-in for the device image's packages (IMAGE below: only names that
# /work/.library/device/KINDS.md lists for the 'cuda' image, installed from PyPI into a
# directory of their own) and the repository. A module the pack left out fails here.
# The peer (PyTorch) runs under PEER_PYTHON (the image has torch and transformers).
#   ZSTD_LEVEL=3 bash tools/device/pack.sh   # first
#   bash tools/device/rehearse.sh PYTHON3.12 [WORKDIR] [PEER_PYTHON]
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=$1; W=${2:-/tmp/electra_rehearsal}; PEER_PYTHON=${3:-python3}
IMAGE="numpy absl-py h5py ml-dtypes opt-einsum packaging requests urllib3 certifi
  charset-normalizer idna six typing-extensions wrapt rich markdown-it-py mdurl pygments
  flatbuffers grpcio tensorboard tensorboard-data-server markdown werkzeug markupsafe
  psutil setuptools etils fsspec filelock regex pyyaml tqdm tokenizers huggingface-hub
  hf-xet safetensors sentencepiece httpx httpcore h11 anyio shellingham typer click"
rm -rf "$W"; mkdir -p "$W/p" "$W/out"
T0=$(date +%s)
cp "$ROOT"/.p[0-9]*/* "$W/p/"
echo "parts: $(ls "$W"/p/site.part* | wc -l), $(du -sm "$W/p" | cut -f1) MiB with the zstandard wheel"
"$PY" -m pip install -q --no-index --no-deps --target "$W/zst" "$W"/p/zstandard-*.whl
T1=$(date +%s)
PYTHONPATH="$W/zst" "$PY" -S "$ROOT/tools/device/unpack.py" "$W/p" "$W/site"
echo "unpacked in $(( $(date +%s) - T1 )) s: $(du -sh "$W/site" | cut -f1)"
"$PY" -m pip install -q --no-deps --only-binary=:all: --target "$W/image" $IMAGE
cd "$ROOT"
PYTHONPATH="$W/site:$W/image:$ROOT" OUT="$W/out" "$PY" -S tools/device/compare.py \
  --device=cpu --seconds=400 --peer_python="$PEER_PYTHON" --trace_dir="$W/trace" \
  --trace=tiny-32-4 tiny-32-4
# go.sh summarises each traced point's profile with this, there.
PYTHONPATH="$W/site:$W/image:$ROOT" "$PY" -S tools/profile_summary.py \
  --profile_dir="$W/trace/profile/tiny-32-4" > "$W/out/profile_summary.txt" 2>&1 ||
  { echo "profile_summary failed: $W/out/profile_summary.txt"; exit 1; }
ls "$W/trace/hlo/tiny-32-4" | grep -q after_optimizations ||
  { echo "no HLO dump in $W/trace/hlo/tiny-32-4"; exit 1; }
echo "rehearsal: $(( $(date +%s) - T0 )) s; log: $W/out/compare_log.txt"
