#!/bin/bash
# On the device machine after setup.sh: issue 17's GPU points, one process each, in the
# order given, each under a time cap (a point that outlives it is killed, its stacks and
# the GPU's state noted in $OUT/stacks.txt first); stops when SECONDS are spent.
#   bash tools/device/measure.sh SECONDS base128 small128 ...
# Points: {small,base,large}{128,512}, base128_fwdbwd (optimizer outside XLA),
# base128_nojit (no XLA). base128 also writes a profiler trace and its summary.
# $OUT gets log.txt, results.jsonl, profile_summary.txt, profile.tgz, stacks.txt and, with
# XLA_EXTRA="--xla_gpu_enable_triton_gemm=false --xla_dump_to=/tmp/hlo" before the command,
# hlo.tgz (XLA_EXTRA="" turns Triton GEMMs back on). The device tool returns 8 files at most.
set -u
source tools/device/env.sh
END=$(( $(date +%s) + $1 )); shift
LOG=$OUT/log.txt; RES=$OUT/results.jsonl; touch $RES
COMMON="--steps=20 --steps_per_loop=10 --warmup_steps=2 --matmul_size=8192
  --peak_tflops=989.4 --config.train.mixed_precision=bfloat16"
args() {  # point -> size seq batch [flags]
  case $1 in
    small128) echo small 128 128;;  small512) echo small 512 128;;
    base128) echo base 128 256 --profile_dir=/tmp/profile;;  base512) echo base 512 64;;
    large128) echo large 128 128;;  large512) echo large 512 32;;
    base128_fwdbwd) echo base 128 256 --config.train.xla_scope=forward_backward;;
    base128_nojit) echo base 128 256 --config.train.jit_compile=false;;
    *) echo "unknown point $1" >&2; return 1;;
  esac
}
for name in "$@"; do
  a=$(args $name) || continue; set -- $a
  size=$1 seq=$2 batch=$3; shift 3
  cap=$(( END - $(date +%s) )); [ $cap -gt 300 ] && cap=300
  if [ $cap -lt 60 ]; then echo "SKIP $name: ${cap} s left"; continue; fi
  echo "=== $name (cap ${cap} s) $(date +%T)" | tee -a $LOG
  t=$(date +%s)
  timeout -s KILL $cap python3 tools/benchmark.py --config=configs/electra.py:$size \
    --seq_len=$seq --batch_size=$batch $COMMON "$@" > /tmp/point.log 2>&1 &
  pid=$!
  ( sleep $(( cap - 20 )); p=$(pgrep -P $pid | head -1)  # python, under timeout
    [ -n "$p" ] && { echo "### $name at $(( $(date +%s) - t )) s"; py-spy dump --native --pid $p
      nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv
      ps -eo pid,pcpu,etime,args --sort=-pcpu | head -6; } >> $OUT/stacks.txt 2>&1 ) &
  watcher=$!
  wait $pid; rc=$?; kill $watcher 2>/dev/null; pkill -9 ptxas 2>/dev/null
  grep -v -E "^(I0000|WARNING: All log)" /tmp/point.log >> $LOG
  js=$(grep '^{' /tmp/point.log | tail -1)
  if [ -n "$js" ]; then
    echo "{\"point\": \"$name\", \"wall_s\": $(( $(date +%s) - t )), \"result\": $js}" >> $RES
    echo "OK $name in $(( $(date +%s) - t )) s"
  else
    echo "FAIL $name: exit $rc after $(( $(date +%s) - t )) s"; tail -3 /tmp/point.log
  fi
  if [ $name = base128 ] && [ -d /tmp/profile ]; then
    python3 tools/profile_summary.py --profile_dir=/tmp/profile > $OUT/profile_summary.txt 2>&1
    (cd /tmp && tar czf $OUT/profile.tgz profile)
  fi
done
# An HLO dump, if XLA_EXTRA asked for one (--xla_dump_to=/tmp/hlo).
[ -d /tmp/hlo ] && tar czf $OUT/hlo.tgz -C /tmp hlo
python3 - $RES <<'PY'
import json, sys
for line in open(sys.argv[1]):
    p = json.loads(line); r = p["result"]
    print(f'{p["point"]:15} {r["seq_per_sec"]:8.1f} seq/s  MFU {r["mfu"]:.3f}  '
          f'step {r["step_time_median_s"] * 1e3:6.1f} ms  {r["xla_scope"]:16}  '
          f'warm-up {r["warmup_s"]:5.1f} s  GPU peak {r.get("gpu_peak_memory_mib")} MiB  '
          f'matmul {r["matmul_peak_flops"] / 1e12:.0f} TFLOP/s')
PY
