#!/usr/bin/env bash
# Run the GPU-marked tests and the benchmarks on a GPU machine that has no network:
# wheels for dask, distributed (and dask-cuda, to compare) come from .whl/ (see CONTRIBUTING in README).
set -uo pipefail
out=${OUT:-benchmarks/results}
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site . >/dev/null
python3 -m compileall -q -j 0 /tmp/site >/dev/null  # bytecode, as a normal pip install leaves it
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
for step in "$@"; do
  case $step in
    tests) python3 -m pytest -p no:cacheprovider -q -rs tests 2>&1 | tee "$out/tests.log" | tail -25 ;;
    gputests) python3 -m pytest -p no:cacheprovider -q -rs -m gpu tests 2>&1 | tee "$out/gputests.log" | tail -25 ;;
    startup) python3 benchmarks/startup.py --repeat ${REPEAT:-7} --out "$out/startup.json" 2>&1 | tail -30 ;;
    bench) python3 -m dask gpu bench --size small --json "$out/bench-small.json" 2>&1 | tail -12 ;;
    info) python3 -m dask gpu info ;;
    spill) python3 benchmarks/spill.py --out "$out/spill.json" 2>&1 | tail -20 ;;
    oversubscribe) python3 benchmarks/oversubscribe.py --out "$out/oversubscribe.json" 2>&1 | tail -8 ;;
    transfer) python3 benchmarks/transfer.py --out "$out/transfer.json" 2>&1 | tail -20 ;;
    seed2tb) python3 benchmarks/seed_2tb.py --size ${SIZE:-500000} --out "$out/seed-2tb.json" 2>&1 | tail -30 ;;
  esac
done
