"""The device shuffle: distributed's P2P shuffle, with partitions that stay on the GPU.

distributed runs it as it runs its own P2P shuffles, for ``shuffle``, hash joins, ``sort_values``,
``set_index`` and ``split_out`` groupbys alike: its scheduler plugin starts a run on each worker,
the barrier task waits for every input, and a lost worker restarts the run. What dask-gpu changes
is the run, :class:`DeviceShuffleRun`, where distributed's turns partitions into Arrow tables on
the host:

- each input partition is split on the device, in one libcudf call (:mod:`.tables`);
- pieces for this worker never leave the device unless its memory tiers spill them: they live in
  the worker's :class:`~dask_gpu.memory.store.DeviceHostDiskStore`, under its device limit,
  spilled device -> host -> disk with the task data;
- pieces for another worker travel as device buffers: device to device over UCX, through pinned
  host memory over TCP;
- each output partition is concatenated on the device.

The scheduler side (:mod:`.scheduler`) gives cuDF-backed shuffles this run instead of distributed's.
"""

from __future__ import annotations

import pickle
import threading
from collections import defaultdict
from collections.abc import MutableMapping
from dataclasses import dataclass, fields
from functools import partial
from typing import Any

from dask.sizeof import sizeof
from distributed.metrics import context_meter, thread_time
from distributed.protocol import cuda_deserialize, cuda_serialize, dask_deserialize, dask_serialize

from dask_gpu import internals
from dask_gpu.dataframe import tables
from dask_gpu.memory import dispatch


class Shipment:
    """The pieces one worker sends another, in one message: ``(input partition, output partition, piece)``."""

    __slots__ = ("items",)

    def __init__(self, items: list):
        self.items = items


@sizeof.register(Shipment)
def _sizeof_shipment(shipment: Shipment) -> int:
    return sum(tables.nbytes(piece) for _, _, piece in shipment.items)


def _serialize(shipment: Shipment, on_device: bool):
    """Each cuDF piece as its metadata and one buffer: on the device for UCX, in pinned memory otherwise."""
    header, frames = {"items": [], "layouts": []}, []
    for source, target, piece in shipment.items:
        if isinstance(piece, tables.Piece):
            metadata, data = piece.pack()
            frames += [metadata, data if on_device else dispatch.to_pinned(dispatch.as_bytes(data))]
            header["layouts"].append(piece.layout)
        else:  # a pandas piece, on the host
            frames.append(pickle.dumps(piece, protocol=5))
        header["items"].append((int(source), int(target), isinstance(piece, tables.Piece)))
    header["layouts"] = pickle.dumps(header["layouts"])
    return header, frames


def _deserialize(header, frames) -> Shipment:
    layouts, frames, items = iter(pickle.loads(header["layouts"])), iter(frames), []
    for source, target, is_piece in header["items"]:
        if is_piece:
            piece = tables.Piece.unpack(next(frames), next(frames), next(layouts))
        else:
            piece = pickle.loads(next(frames))
        items.append((source, target, piece))
    return Shipment(items)


cuda_serialize.register(Shipment)(partial(_serialize, on_device=True))
cuda_deserialize.register(Shipment)(_deserialize)
dask_serialize.register(Shipment)(partial(_serialize, on_device=False))
dask_deserialize.register(Shipment)(_deserialize)


class DeviceShuffleRun(internals.ShuffleRun):
    """One worker's part of one device shuffle (see the module's docstring)."""

    def __init__(self, worker_for: dict, spec: internals.DataFrameShuffleSpec, pieces: MutableMapping, **kwargs):
        super().__init__(**kwargs)
        self.worker_for = worker_for
        self.npartitions = spec.npartitions
        self.meta, self.column = spec.meta, spec.column
        self.frames = tables.frames_for(spec.meta, spec.column, spec.drop_column)
        self.pieces = pieces  # (output partition, input partition) -> piece
        self.inputs: defaultdict[int, list[int]] = defaultdict(list)  # output partition -> inputs held here
        self.lock = threading.Lock()

    # -- inputs: split, keep what is ours, send the rest ------------------------------------------

    def add_partition(self, data, partition_id: int) -> int:
        self.raise_if_closed()
        if self.transferred:
            raise RuntimeError(f"Cannot add more partitions to {self}")
        self.validate_data(data)
        with (
            internals.shuffle_run_metrics(self, "foreground"),
            context_meter.meter("p2p-shard-partition-noncpu"),
            context_meter.meter("p2p-shard-partition-cpu", func=thread_time),
        ):
            pieces = self.frames.split(data, self.npartitions)
        del data
        mine, theirs = [], defaultdict(list)
        for target, piece in pieces.items():
            worker = self.worker_for.get(target)  # None: an output partition nobody asked for
            if worker == self.local_address:
                mine.append((partition_id, target, piece))
            elif worker is not None:
                theirs[worker].append((partition_id, target, piece))
        self._keep(mine)
        if theirs:
            shipments = {worker: (partition_id, Shipment(items)) for worker, items in theirs.items()}
            internals.shuffle_run_ship(self, shipments)
        return self.run_id

    def _keep(self, items: list) -> None:
        for source, target, piece in items:
            self.pieces[target, source] = piece
            with self.lock:
                self.inputs[target].append(source)

    async def send(self, address: str, shards: list):
        shipment = Shipment([item for _, s in shards for item in s.items])
        return await internals.retry(partial(internals.shuffle_run_send, self, address, shipment),
                                     count=self.RETRY_COUNT, delay_min=self.RETRY_DELAY_MIN,
                                     delay_max=self.RETRY_DELAY_MAX)

    async def _receive(self, data: Shipment) -> None:
        self.raise_if_closed()
        fresh = [item for item in data.items if item[:2] not in self.received]  # a retried message comes twice
        self.received.update(item[:2] for item in fresh)
        self.total_recvd += sizeof(data)
        try:
            await self.offload(self._keep, fresh)  # may spill: not on the event loop
        except Exception as e:
            internals.shuffle_run_failed(self, e)
            raise

    # -- outputs -----------------------------------------------------------------------------------

    def _get_output_partition(self, partition_id: int, key, **kwargs):
        with self.lock:
            sources = sorted(self.inputs.pop(partition_id, ()))  # the order of the inputs, as other methods give
        return self.frames.concat([self.pieces.pop((partition_id, source)) for source in sources])

    def _get_assigned_worker(self, partition_id: int) -> str:
        return self.worker_for[partition_id]

    def validate_data(self, data) -> None:
        if set(data.columns) != set(self.meta.columns):
            raise ValueError(f"Expected {self.meta.columns=} to match {data.columns=}.")

    async def close(self) -> None:
        await super().close()
        with self.lock:
            held, self.inputs = self.inputs, defaultdict(list)
        for target, sources in held.items():
            for source in sources:
                self.pieces.pop((target, source), None)

    def read(self, path):
        raise NotImplementedError("a device shuffle keeps no files of its own")

    def deserialize(self, buffer: Any) -> Any:
        raise NotImplementedError("a device shuffle receives Shipments")


@dataclass(frozen=True)
class DeviceShuffleSpec(internals.DataFrameShuffleSpec):
    """distributed's specification of a dataframe shuffle, run as a :class:`DeviceShuffleRun`."""

    @classmethod
    def of(cls, spec: internals.DataFrameShuffleSpec) -> DeviceShuffleSpec:
        return cls(**{f.name: getattr(spec, f.name) for f in fields(spec)})

    def create_run_on_worker(self, run_id, span_id, worker_for, plugin) -> DeviceShuffleRun:
        from dask_gpu.memory.store import DeviceHostDiskStore

        data = plugin.worker.data
        pieces = data.space(("shuffle", self.id, run_id)) if isinstance(data, DeviceHostDiskStore) else {}
        return DeviceShuffleRun(worker_for=worker_for, spec=self, pieces=pieces,
                                **internals.shuffle_run_arguments(self.id, run_id, span_id, plugin))
