#!/usr/bin/env bash
# cuML for a GPU machine without network, to run beside cuDF: cuml-cu13 and the libraries it loads that the
# machine's image lacks (libcuml, libcuvs, libraft, pylibraft, raft-dask, nvforest, treelite), installed into a
# folder, trimmed of headers and static libraries, compressed with xz and cut into parts of 58 MB under .cuml/
# (git-ignored), each small enough to travel with one remote command. RMM comes with .whl, libkvikio with
# cuDF's parts, distributed-ucxx (which raft-dask imports) with .whl/ucx-site.tar.xz (ucx_bundle.sh); NCCL and
# CUDA's math libraries are on the machine.
#
# Here, once, from the project's root:   benchmarks/cuml_bundle.sh
# There, after .whl, cuDF and UCX are installed into /tmp/site, back to back (a machine goes 30 s after a call):
#   cmd k   carry [".cuml/ck"], k = 1 .. N-1:   mkdir -p /tmp/cuml-parts && cp .cuml/ck/p* /tmp/cuml-parts/
#   cmd N   carry [".cuml/cN"]:                 bash .cuml/cN/install.sh   (prints cuML's version)
set -euo pipefail
version=26.10
out=$(pwd)/.cuml
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
target=(--python-version 3.12 --implementation cp --only-binary=:all: --platform manylinux_2_28_x86_64
        --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64)
python3 -m pip download -q --no-deps "${target[@]}" -d "$work/wheels" \
  "cuml-cu13==$version.*" "libcuml-cu13==$version.*" "libcuvs-cu13==$version.*" "cuvs-cu13==$version.*" \
  "libraft-cu13==$version.*" "pylibraft-cu13==$version.*" "raft-dask-cu13==$version.*" \
  "nvforest-cu13==$version.*" "libnvforest-cu13==$version.*" "treelite<5"
python3 -m pip install -q --no-index --no-deps --no-compile "${target[@]}" --target "$work/site" "$work"/wheels/*.whl
cd "$work/site"
find . -name '*.a' -delete
rm -rf libcuml/include libcuvs/include libnvforest/include libraft/include
tar cf - . | xz -T0 -6 > "$work/cuml-site.tar.xz"
rm -rf "$out" && mkdir -p "$out"
split -b 58M -d -a 1 "$work/cuml-site.tar.xz" "$out/p"
n=0
for f in "$out"/p*; do n=$((n + 1)); mkdir -p "$out/c$n"; mv "$f" "$out/c$n/"; done
cat > "$out/c$n/install.sh" <<'EOS'
set -eu
here=$(cd "$(dirname "$0")" && pwd); mkdir -p /tmp/cuml-parts /tmp/site; cp "$here"/p* /tmp/cuml-parts/
cd /tmp/cuml-parts && ls p* | sort -V | xargs cat | xz -d | tar xf - -C /tmp/site
PYTHONPATH=/tmp/site python3 -c "import cuml, raft_dask; from cuml.dask.cluster import KMeans; print('cuml', cuml.__version__)"
EOS
du -sh "$out"/c*
echo "$n parts: carry .cuml/c1 .. .cuml/c$n, one a command, and run .cuml/c$n/install.sh last"
