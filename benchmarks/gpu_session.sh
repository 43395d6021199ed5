#!/usr/bin/env bash
# Run the GPU-marked tests and the benchmarks on a GPU machine that has no network:
# wheels for dask, distributed (and dask-cuda, to compare) come from .whl/ (see CONTRIBUTING in README).
set -uo pipefail
out=${OUT:-benchmarks/results}
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH UCX_WARN_UNUSED_ENV_VARS=n
if [ ! -f /tmp/site/.wheels ]; then  # once per machine
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  # UCX (distributed-ucxx and its libraries), unpacked and trimmed: too large for .whl/ as wheels
  [ -f .whl/ucx-site.tar.xz ] && tar xJf .whl/ucx-site.tar.xz -C /tmp/site
  touch /tmp/site/.wheels
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
python3 -m pip install -q --upgrade --no-index --no-deps --no-build-isolation --target /tmp/site . 2>&1 | grep -v WARN
python3 -m compileall -q -j 0 /tmp/site >/dev/null  # bytecode, as a normal pip install leaves it
for step in "$@"; do
  case $step in
    tests) python3 -m pytest -p no:cacheprovider -q -rs tests 2>&1 | tee "$out/tests.log" | tail -25 ;;
    gputests) python3 -m pytest -p no:cacheprovider -q -rs -m gpu tests 2>&1 | tee "$out/gputests.log" | tail -25 ;;
    startup) python3 benchmarks/startup.py --repeat ${REPEAT:-7} --out "$out/startup.json" 2>&1 | tail -30 ;;
    bench) timeout ${BENCH_TIMEOUT:-550} python3 -m dask gpu bench ${BENCH:---size small} --json "$out/bench${TAG:-}.json" \
             --plot "$out/bench${TAG:-}.png" 2>&1 | grep -v WARN | tee "$out/bench${TAG:-}.log" | tail -30 ;;
    info) python3 -m dask gpu info; nvidia-smi topo -m
          python3 -c "import cupy; n = cupy.cuda.runtime.getDeviceCount(); print('peer access:', [(a, b, cupy.cuda.runtime.deviceCanAccessPeer(a, b)) for a in range(n) for b in range(n) if a != b])"
          python3 -c "import distributed_ucxx, ucxx; print('distributed-ucxx', distributed_ucxx.__version__)" 2>&1 | tail -1 ;;
    scaling) timeout 300 python3 benchmarks/scaling.py --size ${SIZE:-full} --workloads ${WORKLOADS:-sum,transpose} \
               ${SCALING:-} --out "$out/scaling${TAG:-}.json" 2>&1 | grep -v WARN | tail -30 ;;
    spill) python3 benchmarks/spill.py --out "$out/spill.json" 2>&1 | tail -20 ;;
    oversubscribe) python3 benchmarks/oversubscribe.py --out "$out/oversubscribe.json" 2>&1 | tail -8 ;;
    transfer) timeout 200 python3 benchmarks/transfer.py --out "$out/transfer.json" 2>&1 | tail -20 ;;
    seed2tb) timeout 300 python3 benchmarks/seed_2tb.py --size ${SIZE:-500000} --out "$out/seed-2tb.json" 2>&1 | tail -30 ;;
  esac
done
