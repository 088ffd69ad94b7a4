#!/usr/bin/env bash
# Spark GPU discovery script: prints the GPUs of this host as Spark's resource JSON,
#   {"name": "gpu", "addresses": ["0", "1", ...]}
# Used for spark.executor.resource.gpu.discoveryScript and spark.worker.resource.gpu.discoveryScript.
set -euo pipefail
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo '{"name": "gpu", "addresses": []}'
  exit 0
fi
addresses=$(nvidia-smi --query-gpu=index --format=csv,noheader | sed -e 's/^ *//' -e 's/.*/"&"/' | paste -sd, -)
echo "{\"name\": \"gpu\", \"addresses\": [${addresses}]}"
