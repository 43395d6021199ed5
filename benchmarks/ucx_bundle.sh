#!/usr/bin/env bash
# Build .whl/ucx-site.tar.xz: distributed-ucxx and its libraries for CUDA 13 and Python 3.12,
# installed into a folder, trimmed of static libraries, tools and headers, and compressed. As
# wheels they are too large to carry to a GPU machine without network; gpu_session.sh unpacks
# this into its site folder when it is there.
set -euo pipefail
out=$(pwd)/.whl/ucx-site.tar.xz
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
target=(--python-version 3.12 --platform manylinux_2_28_x86_64 --only-binary=:all:)
python3 -m pip download -q --no-deps "${target[@]}" -d "$work/wheels" \
  distributed-ucxx-cu13 ucxx-cu13 libucxx-cu13 "libucx-cu13<1.22" "cuda-core<2"
python3 -m pip install -q --no-index --no-deps --no-compile "${target[@]}" --target "$work/site" "$work"/wheels/*.whl
cd "$work/site"
find . -name '*.a' -delete
rm -rf libucx/bin libucx/include libucxx/include libucx/lib/ucx/libucx_perftest* cuda/core/cu12
mkdir -p "$(dirname "$out")"
tar cJf "$out" .
ls -l "$out"
