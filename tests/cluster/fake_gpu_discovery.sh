#!/usr/bin/env bash
# Test stand-in for scripts/gpu_discovery.sh: hands every Spark worker on this host two GPU
# addresses no other worker got, counting in $TFOS_FAKE_GPU_DIR (set by the test).
set -euo pipefail
dir="${TFOS_FAKE_GPU_DIR:?}"
exec 9>"$dir/lock"
flock 9
n=$(cat "$dir/next" 2>/dev/null || echo 0)
echo $((n + 2)) > "$dir/next"
echo "{\"name\": \"gpu\", \"addresses\": [\"$n\", \"$((n + 1))\"]}"
