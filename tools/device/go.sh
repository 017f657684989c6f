#!/bin/bash
# One device call, the one that carries the last part: setup.sh, then compare.py's points
# (ours and the PyTorch peer back to back) until SECONDS after the call's start (setup.sh
# only in the first such call on a machine); each
# --trace=POINT's profile is summarised, and the traces and HLO come back as profile.tgz
# and hlo.tgz. A POINT:ours or POINT:peer runs one of the two (compare.py).
#   bash tools/device/go.sh SECONDS [--trace=POINT] POINT[:ours|:peer]...
# $OUT gets setup.txt (the first call on a machine only), compare.jsonl, compare_log.txt,
# profile_summary.txt, profile.tgz, hlo.tgz. A new pack on the same warm machine needs
# `rm /tmp/electra_setup_ok` first. The exit status is compare.py's (3: the probe
# failed, nothing measured).
T0=$(date +%s); LIMIT=$1; shift
# A later call on the same warm machine finds the pack unpacked and probed: setup once.
if [ -f /tmp/electra_setup_ok ]; then
  echo "setup: done by an earlier call on this machine"
else
  bash tools/device/setup.sh > $OUT/setup.txt 2>&1
  rc=$?; tail -12 $OUT/setup.txt
  [ $rc -eq 0 ] || { echo "probe failed: no point measured"; exit 3; }
  touch /tmp/electra_setup_ok
fi
source tools/device/env.sh
TRACE=/tmp/electra_trace
rm -rf $TRACE  # a warm machine keeps an earlier call's traces
# 25 s kept for each traced point's summary, and 10 for the archives.
traced=$(printf '%s\n' "$@" | grep -c '^--trace=')
python3 tools/device/compare.py \
  --seconds=$(( T0 + LIMIT - 10 - 25 * traced - $(date +%s) )) --trace_dir=$TRACE "$@"
crc=$?
for d in $TRACE/profile/*; do
  [ -d "$d" ] && { echo "=== ${d##*/}"; timeout 20 python3 tools/profile_summary.py \
    --profile_dir=$d --hlo_dir=$TRACE/hlo/${d##*/} --top=20; } >> $OUT/profile_summary.txt 2>&1
done
[ -d $TRACE/profile ] && tar czf $OUT/profile.tgz -C $TRACE profile
# The compiled programs only (the dump holds every stage of every one).
[ -d $TRACE/hlo ] && (cd $TRACE && find hlo -name '*after_optimizations*' |
  tar czf $OUT/hlo.tgz -T -)
ls -la $OUT
exit $crc
