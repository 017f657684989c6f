#!/bin/bash
# One device call, the one that carries the last part: setup.sh, then measure.sh's points
# until SECONDS after the call's start.   bash tools/device/go.sh SECONDS POINT...
T0=$(date +%s); LIMIT=$1; shift
bash tools/device/setup.sh 2>&1 | tee $OUT/setup.txt
[ ${PIPESTATUS[0]} -eq 0 ] || { echo "probe failed: no point measured"; exit 3; }
bash tools/device/measure.sh $(( T0 + LIMIT - $(date +%s) )) "$@"
