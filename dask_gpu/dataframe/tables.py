"""Partitions taken apart by output partition and put back together: cuDF on the device, pandas on the host.

A shuffle splits each input partition into pieces by a column of output-partition numbers, and
concatenates the pieces of each output partition. cuDF pieces stay pylibcudf tables, split and
joined by libcudf in one call each: a cuDF frame for every piece would cost more Python than the
GPU spends on the data. The frame comes back once, for the output, with the input's dtypes
(categories and time zones live in cuDF's dtypes, not in its columns) and index names.

It reaches cuDF's internals (a frame's columns as pylibcudf columns, and a frame made from them)
through :mod:`dask_gpu.internals`, and calls pylibcudf's public API itself.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from dask.sizeof import sizeof

from dask_gpu import internals
from dask_gpu.memory import dispatch


def frames_for(meta, column: str, drop_column: bool):
    """The split and concatenate operations for ``meta``'s library: cuDF's, else pandas'."""
    module = type(meta).__module__.split(".")[0]
    return (CudfFrames if module == "cudf" else PandasFrames)(meta, column, drop_column)


class PandasFrames:
    """Host partitions: a stable sort by output partition, then slices."""

    def __init__(self, meta, column: str, drop_column: bool):
        self.column = column
        self.empty = meta.drop(columns=[column]) if drop_column else meta

    def split(self, df, npartitions: int) -> dict:
        codes = np.asarray(df[self.column])
        order = np.argsort(codes, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(codes, minlength=npartitions))])
        body = df[list(self.empty.columns)].take(order)
        return {int(j): body.iloc[bounds[j]:bounds[j + 1]] for j in np.flatnonzero(np.diff(bounds))}

    def concat(self, pieces: list):
        import pandas as pd

        return pd.concat(pieces) if pieces else self.empty.copy()


class Layout(NamedTuple):
    """What a table needs to be its input's frame again: the index names, and the cuDF dtypes of the
    index columns, then the data columns."""

    index_names: tuple
    dtypes: tuple


class Piece:
    """Rows of one input partition bound for one output partition: a pylibcudf table on the device.

    The pieces of one split are views of one partitioned table (``parent``), which the memory
    tiers count once.
    """

    __slots__ = ("table", "layout", "parent", "__weakref__")

    def __init__(self, table, layout: Layout, parent: _Allocation):
        self.table, self.layout, self.parent = table, layout, parent

    @property
    def nrows(self) -> int:
        return self.table.num_rows()

    @property
    def nbytes(self) -> int:
        """Its share of the device bytes under it."""
        return self.parent.nbytes * self.nrows // max(self.parent.nrows, 1)

    def pack(self):
        """(host metadata, device bytes): the piece in one contiguous device buffer."""
        import pylibcudf as plc

        metadata, data = plc.contiguous_split.pack(self.table).release()
        return np.frombuffer(metadata, np.uint8), data

    @classmethod
    def unpack(cls, metadata, data, layout: Layout) -> Piece:
        """The inverse of :meth:`pack`; ``data`` on the device (any CUDA array) or in host memory."""
        import pylibcudf as plc

        if not hasattr(data, "__cuda_array_interface__"):
            data = dispatch.from_pinned(np.frombuffer(data, np.uint8))
        view = plc.gpumemoryview(data)
        table = plc.contiguous_split.unpack_from_memoryviews(memoryview(metadata), view)  # views of ``data``
        return cls(table, layout, _Allocation(view.nbytes, table.num_rows()))

    def __repr__(self) -> str:
        return f"<Piece {self.nrows} rows, {self.parent.nbytes} bytes under it>"


class _Allocation:
    """The device memory under a split's pieces, once: its identity is the allocation's."""

    __slots__ = ("nbytes", "nrows")

    def __init__(self, nbytes: int, nrows: int):
        self.nbytes, self.nrows = int(nbytes), int(nrows)


def nbytes(piece) -> int:
    """A piece's bytes, on the device or the host."""
    return piece.nbytes if isinstance(piece, Piece) else sizeof(piece)


sizeof.register(Piece)(nbytes)


def _piece_to_host(piece: Piece) -> dispatch.HostCopy:
    metadata, data = piece.pack()
    host = dispatch.to_pinned(dispatch.as_bytes(data))
    return dispatch.HostCopy((metadata, host, piece.layout), _piece_from_host, metadata.nbytes + host.nbytes)


def _piece_from_host(payload) -> Piece:
    return Piece.unpack(*payload)


dispatch.register_device_type(Piece, buffers=lambda p: [(id(p.parent), p.parent.nbytes)], to_host=_piece_to_host)


class CudfFrames:
    """Device partitions, as pylibcudf tables of their index and data columns."""

    def __init__(self, meta, column: str, drop_column: bool):
        self.column = column
        self.template = meta.drop(columns=[column]) if drop_column else meta
        self.names = list(internals.cudf_column_names(self.template))

    def split(self, df, npartitions: int) -> dict:
        import pylibcudf as plc

        columns = [*internals.cudf_columns(df.index), *(internals.cudf_column(df, name) for name in self.names)]
        with internals.read_as_pylibcudf(*columns, internals.cudf_column(df, self.column)) as readable:
            table = plc.Table(readable)
            parted, offsets = plc.partitioning.hash_partition(
                table, [len(columns)], npartitions, internals.identity_hash()
            )  # the number is the partition: libcudf's fast partitioner, not its general one
        body = plc.Table(list(parted.columns()[:-1]))
        parent = _Allocation(sum(c.device_buffer_size() for c in body.columns()), body.num_rows())
        layout = Layout(tuple(df.index.names), tuple(c.dtype for c in columns))
        tables = plc.copying.split(body, list(offsets[1:-1]))
        return {j: Piece(t, layout, parent) for j, t in enumerate(tables) if t.num_rows()}

    def concat(self, pieces: list):
        import cudf
        import pylibcudf as plc

        if not pieces:
            return self.template.copy()
        layout = pieces[0].layout
        if any(p.layout != layout for p in pieces):  # e.g. other categories: cuDF unifies them
            return cudf.concat([self._frame(p.table, p.layout) for p in pieces])
        tables = [p.table for p in pieces]
        # one allocation of its own: a view would keep every piece's parent alive
        table = plc.concatenate.concatenate(tables) if len(tables) > 1 else tables[0].copy()
        return self._frame(table, layout)

    def _frame(self, table, layout: Layout):
        columns = internals.from_pylibcudf(table.columns(), layout.dtypes)
        return internals.frame_like(self.template, columns, self.names, list(layout.index_names))
