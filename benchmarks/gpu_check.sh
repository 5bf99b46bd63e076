#!/usr/bin/env bash
# RoPE on a GPU in one short call: the device, the Triton kernel's parity tests on CUDA, then
# `posenc bench rope --only gpu --json` (the kernel's bandwidth against the device's peak).
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]
#
# Needs a CUDA machine whose python (PYTHON, default python3) has torch and triton (torch's
# CUDA builds bring it) and pytest; posenc runs from this checkout's src/, nothing installed.
# The JSON goes to stdout and to OUT_DIR/rope_gpu.json (default: $OUT where set, else /tmp).
# Not yet run on a GPU: Triton compiles one kernel per case variant, so the parity tests may
# take minutes; each part has a time limit (PARITY_S, default 400 s; BENCH_S, 150 s) so that
# the whole fits one 10-minute call. Fails if any part did.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
out=${1:-${OUT:-/tmp}}
mkdir -p "$out"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET  # the compiled kernel, not the interpreter

"$PYTHON" - <<'PY' || exit 1
import sys

import torch

if not torch.cuda.is_available():
    sys.exit("no CUDA device: nothing to check")
import triton

from posenc.bench.rope_gpu import device_peak

device = torch.device("cuda", torch.cuda.current_device())
peak = device_peak(device)
print(
    f"device: {torch.cuda.get_device_name(device)}, torch {torch.__version__} "
    f"(CUDA {torch.version.cuda}), triton {triton.__version__}, peak "
    + ("unknown (this torch lacks the fields)" if peak is None else f"{peak / 1e9:.0f} GB/s")
)
PY

status=0
echo "=== parity: the Triton kernel against the torch path on CUDA"
timeout "${PARITY_S:-400}" "$PYTHON" -m pytest -q -p no:cacheprovider \
    tests/rotary/kernels/test_triton.py tests/rotary/kernels/test_rotate.py -k "triton or cuda" \
    || status=1

echo "=== bench: posenc bench rope --only gpu --json"
timeout "${BENCH_S:-150}" "$PYTHON" -c "from posenc.cli import main; raise SystemExit(main())" \
    bench rope --only gpu --json >"$out/rope_gpu.json" || status=1
cat "$out/rope_gpu.json"
"$PYTHON" - "$out/rope_gpu.json" <<'PY' || status=1
import json
import sys

from posenc.bench.rope import format_result

result = json.load(open(sys.argv[1]))
result.pop("targets", None)
print(format_result(result))
PY
exit "$status"
