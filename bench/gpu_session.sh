#!/usr/bin/env bash
# One GPU session (the device tool's machine: torch + triton, no Ray/pydantic/OR-Tools, no network).
# Carry .wheels/ (pure wheels for Python 3.12: ortools, pydantic, ...; see docs/benchmarks.md).
#   bash bench/gpu_session.sh tests     # verify/exploit/fault suites on CUDA, GPU-only tests included
#   bash bench/gpu_session.sh bench     # verifier throughput + timing spread, lowering under the verifier
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
python -m pip install -q --no-deps --no-index --target /tmp/deps .wheels/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/deps:$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
case "${1:-tests}" in
  tests)
    python -m pytest -q -p no:cacheprovider tests/verify tests/exploits tests/faults 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -40 ;;
  bench)
    python bench/verify_throughput.py --device cuda -n "${N:-32}" 2>&1 | tee "$OUT/verify_throughput_gpu.txt"
    python bench/lowering.py --device cuda --profile "${PROFILE:-small}" --level2 "${L2:-40}" --level5 "${L5:-20}" \
      2>&1 | tee "$OUT/lowering_gpu.txt" | tail -60 ;;
esac
