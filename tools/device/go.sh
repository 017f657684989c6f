#!/bin/bash
# One device call, the one that carries the last part: setup.sh, then compare.py's points
# (ours and the PyTorch peer back to back) until SECONDS after the call's start; each
# --trace=POINT's profile is summarised and its trace and HLO come back as profile.tgz, hlo.tgz.
#   bash tools/device/go.sh SECONDS [--trace=POINT] POINT...
# $OUT gets setup.txt, compare.jsonl, compare_log.txt, profile_summary.txt, profile.tgz, hlo.tgz.
T0=$(date +%s); LIMIT=$1; shift
bash tools/device/setup.sh > $OUT/setup.txt 2>&1
rc=$?; tail -12 $OUT/setup.txt
[ $rc -eq 0 ] || { echo "probe failed: no point measured"; exit 3; }
source tools/device/env.sh
TRACE=/tmp/electra_trace
# 25 s kept for the summaries and the archive.
python3 tools/device/compare.py --seconds=$(( T0 + LIMIT - 25 - $(date +%s) )) \
  --trace_dir=$TRACE "$@"
for d in $TRACE/profile/*; do
  [ -d "$d" ] && { echo "=== ${d##*/}"; timeout 20 python3 tools/profile_summary.py \
    --profile_dir=$d; } >> $OUT/profile_summary.txt 2>&1
done
[ -d $TRACE/profile ] && tar czf $OUT/profile.tgz -C $TRACE profile
# The compiled programs only (the dump holds every stage of every one).
[ -d $TRACE/hlo ] && (cd $TRACE && find hlo -name '*after_optimizations*' |
  tar czf $OUT/hlo.tgz -T -)
ls -la $OUT
