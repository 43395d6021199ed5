"""How a table's parquet files cut each column into pages: pages a column chunk, and their sizes.

cuDF decodes a page in one GPU thread block, so a layout whose column chunks are one page each (DuckDB's writer
makes a page of a whole column chunk) decodes in as many blocks as it has row groups, however large they are. The
page headers are read from the files (Thrift's compact protocol), as no parquet library exposes them.

    python benchmarks/parquet_pages.py /tmp/tpch10-duckdb-threads/orders o_comment o_orderkey
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a table's folder of parquet files")
    parser.add_argument("columns", nargs="+")
    args = parser.parse_args(argv)

    import pyarrow.parquet as pq

    found = sorted(glob.glob(os.path.join(args.folder, "*.parquet")))
    for column in args.columns:
        counts, sizes = [], []
        for path in found:
            metadata = pq.ParquetFile(path).metadata
            index = metadata.schema.to_arrow_schema().names.index(column)
            for group in range(metadata.num_row_groups):
                pages = page_sizes(path, metadata.row_group(group).column(index))
                counts.append(len(pages))
                sizes += pages
        print(f"{column}: {len(found)} files, {len(counts)} column chunks, {sum(counts)} pages (median "
              f"{statistics.median(counts):g} a chunk), median page {statistics.median(sizes) / 2**20:.2f} MiB "
              "uncompressed", flush=True)


def page_sizes(path: str, chunk) -> list[int]:
    """The uncompressed size of each page (dictionary pages included) of a column chunk."""
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(chunk.total_compressed_size)
    at, sizes = 0, []
    while at < len(data):
        header, at = _struct(data, at)
        sizes.append(header[2])  # PageHeader: 2 uncompressed_page_size, 3 compressed_page_size
        at += header[3]
    return sizes


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def _struct(data: bytes, at: int) -> tuple[dict, int]:
    """A Thrift compact struct at ``at``: its integer fields by id (others skipped), and where it ends."""
    fields, last = {}, 0
    while True:
        head = data[at]
        at += 1
        if head == 0:
            return fields, at
        delta, kind = head >> 4, head & 0x0F
        if delta:
            last += delta
        else:
            raw, at = _varint(data, at)
            last = (raw >> 1) ^ -(raw & 1)
        if kind in (5, 6):  # i32, i64: zigzag varints
            raw, at = _varint(data, at)
            fields[last] = (raw >> 1) ^ -(raw & 1)
        else:
            at = _skip(data, at, kind)


def _skip(data: bytes, at: int, kind: int) -> int:
    if kind in (1, 2):  # booleans live in the field's header
        return at
    if kind == 3:
        return at + 1
    if kind == 4:
        return _varint(data, at)[1]
    if kind == 7:
        return at + 8
    if kind == 8:
        size, at = _varint(data, at)
        return at + size
    if kind in (9, 10):  # list, set
        head = data[at]
        at += 1
        count, element = head >> 4, head & 0x0F
        if count == 15:
            count, at = _varint(data, at)
        for _ in range(count):
            at = _skip(data, at, element)
        return at
    if kind == 12:
        return _struct(data, at)[1]
    raise ValueError(f"Thrift compact type {kind} is not in parquet's page headers")


if __name__ == "__main__":
    main()
