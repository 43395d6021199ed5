"""What GPUs exist: NVML discovery, simulated devices, and ``CUDA_VISIBLE_DEVICES``.

A machine without NVML, a driver or a GPU is a :class:`State` with a message,
never an exception at import or discovery time: callers decide whether a
missing GPU is an error (a GPU cluster) or a fact to report (``dask gpu info``).
"""

from __future__ import annotations

import enum
import functools
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from dask_gpu import config
from dask_gpu import parse

SIMULATED_MEMORY = 16 * 2**30
MAX_SIMULATED = 1024  # a sane bound: gpu.simulate=17179869184 (a size meant as a count) must not hang


class State(enum.Enum):
    AVAILABLE = "available"
    SIMULATED = "simulated"
    NO_NVML = "no-nvml"  # the nvidia-ml-py package is not installed
    NO_DRIVER = "no-driver"  # NVML's library or the driver is missing or failed
    NO_GPU = "no-gpu"  # the driver works and sees no GPU
    NVML_ERROR = "nvml-error"  # NVML started but failed reading a GPU


class NoGPUError(RuntimeError):
    """No usable GPU, with the reason and what to do."""


@dataclass(frozen=True)
class Device:
    """One GPU, or one MIG instance of a GPU (then ``mig_index`` is set)."""

    index: int  # NVML index of the physical GPU
    name: str
    uuid: str  # "GPU-..." or "MIG-..."
    memory_total: int
    cpu_affinity: tuple[int, ...] = ()  # cores nearest the GPU; empty when unknown
    mig_index: int | None = None
    mig: tuple[Device, ...] = ()  # MIG instances of a MIG-enabled GPU
    simulated: bool = False

    @property
    def label(self) -> str:
        """Short stable name, used to name workers: ``gpu-0``, ``gpu-0-mig-1``."""
        if self.mig_index is None:
            return f"gpu-{self.index}"
        return f"gpu-{self.index}-mig-{self.mig_index}"

    def describe(self) -> dict:
        """The device as plain data (JSON, worker plugins)."""
        return {
            "label": self.label,
            "index": self.index,
            "mig_index": self.mig_index,
            "name": self.name,
            "uuid": self.uuid,
            "memory_total": self.memory_total,
            "cpu_affinity": list(self.cpu_affinity),
            "simulated": self.simulated,
        }

    @property
    def token(self) -> str:
        """How CUDA_VISIBLE_DEVICES names this device by default."""
        return self.uuid if self.mig_index is not None else str(self.index)


@dataclass(frozen=True)
class System:
    """Result of discovery: the state, the GPUs, and versions when known."""

    state: State
    devices: tuple[Device, ...] = ()
    message: str = ""
    driver_version: str | None = None
    cuda_version: str | None = None

    @property
    def usable(self) -> bool:
        return self.state in (State.AVAILABLE, State.SIMULATED) and bool(self.devices)

    def require(self, what: str = "a GPU cluster") -> System:
        """Return self, or raise NoGPUError saying why there is no GPU and what to do."""
        if not self.usable:
            raise NoGPUError(
                f"{what} needs a GPU, and none is usable: {self.message} "
                "To build and test GPU cluster code without a GPU, simulate devices with "
                "DASK_GPU__SIMULATE=N (or dask.config.set({'gpu.simulate': N})); "
                "for CPU-only work use distributed.LocalCluster."
            )
        return self


def discover(simulate=None) -> System:
    """Describe this machine's GPUs; ``simulate`` (or config ``gpu.simulate``) fakes them."""
    simulate = config.get("simulate", simulate)
    if simulate in (None, 0, "", "0"):
        return nvml_system()
    return simulated_system(simulate)


# -- simulated devices ------------------------------------------------------------


def simulated_system(spec) -> System:
    """Devices from ``gpu.simulate``: a count, or a list of memory sizes."""
    sizes = parse.simulated_sizes(spec, SIMULATED_MEMORY, MAX_SIMULATED)
    cores = _split_cores(sorted(os.sched_getaffinity(0)), len(sizes))
    devices = tuple(
        Device(
            index=i,
            name="Simulated GPU",
            # distinct prefixes, like real UUIDs
            uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_OID, f'dask-gpu-simulated-{i}')}",
            memory_total=size,
            cpu_affinity=cores[i],
            simulated=True,
        )
        for i, size in enumerate(sizes)
    )
    return System(
        State.SIMULATED,
        devices,
        f"{len(devices)} simulated device(s) (gpu.simulate); no GPU is used.",
        driver_version="simulated",
        cuda_version="simulated",
    )


def _split_cores(cores: Sequence[int], n: int) -> list[tuple[int, ...]]:
    """Split cores into n contiguous groups, like sockets; share them when too few."""
    if n == 0:
        return []
    if len(cores) < n:
        return [tuple(cores)] * n
    step, extra = divmod(len(cores), n)
    groups, start = [], 0
    for i in range(n):
        stop = start + step + (i < extra)
        groups.append(tuple(cores[start:stop]))
        start = stop
    return groups


# -- NVML -----------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def nvml_system() -> System:
    """The real GPUs, through NVML. Cached: hardware does not change under a process."""
    try:
        import pynvml
    except ImportError:
        return System(State.NO_NVML, message="the NVML bindings are missing (pip install nvidia-ml-py).")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return System(
            State.NO_DRIVER,
            message=f"NVML could not start ({e}): no NVIDIA driver is installed or loaded here.",
        )
    try:
        return _read_nvml(pynvml)
    except pynvml.NVMLError as e:
        return System(State.NVML_ERROR, message=f"NVML failed reading the GPUs ({e}); `nvidia-smi` may say more.")
    finally:
        pynvml.nvmlShutdown()


def _read_nvml(nvml) -> System:
    driver = _text(nvml.nvmlSystemGetDriverVersion())
    cuda = nvml.nvmlSystemGetCudaDriverVersion()
    cuda = f"{cuda // 1000}.{cuda % 1000 // 10}"
    devices = tuple(_read_device(nvml, i) for i in range(nvml.nvmlDeviceGetCount()))
    if not devices:
        return System(State.NO_GPU, message="the NVIDIA driver sees no GPU.", driver_version=driver, cuda_version=cuda)
    return System(
        State.AVAILABLE,
        devices,
        f"{len(devices)} GPU(s) found through NVML.",
        driver_version=driver,
        cuda_version=cuda,
    )


def _read_device(nvml, index: int) -> Device:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    affinity = _affinity(nvml, handle)
    return Device(
        index=index,
        name=_text(nvml.nvmlDeviceGetName(handle)),
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        memory_total=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        cpu_affinity=affinity,
        mig=_read_mig(nvml, handle, index, affinity),
    )


def _read_mig(nvml, handle, index: int, affinity) -> tuple[Device, ...]:
    try:
        current, _ = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError:  # not supported: not a MIG-capable GPU
        return ()
    if current != nvml.NVML_DEVICE_MIG_ENABLE:
        return ()
    instances = []
    for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
        except nvml.NVMLError:  # an empty slot
            continue
        instances.append(
            Device(
                index=index,
                name=_text(nvml.nvmlDeviceGetName(mig)),
                uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
                memory_total=int(nvml.nvmlDeviceGetMemoryInfo(mig).total),
                cpu_affinity=affinity,
                mig_index=len(instances),
            )
        )
    return tuple(instances)


def _affinity(nvml, handle) -> tuple[int, ...]:
    """Cores nearest the GPU, from NVML's bitmask of 64-bit words."""
    words = ((os.cpu_count() or 1) + 63) // 64
    try:
        mask = nvml.nvmlDeviceGetCpuAffinity(handle, words)
    except nvml.NVMLError:
        return ()
    return tuple(unpack_bitmask(mask))


def unpack_bitmask(words, bits: int = 64) -> list[int]:
    """The positions of the set bits of ``words`` (least significant word first): [1 + 2 + 8] -> [0, 1, 3]."""
    return [bits * w + b for w, mask in enumerate(words) for b in range(bits) if int(mask) >> b & 1]


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# -- CUDA_VISIBLE_DEVICES ---------------------------------------------------------


parse_visible_devices = parse.visible_devices  # the public name, beside the devices it names


def select(system: System, visible=None) -> list[tuple[str, Device]]:
    """The devices a cluster uses, as (CUDA_VISIBLE_DEVICES token, device) pairs.

    ``visible`` (a string or list) wins; else the ``CUDA_VISIBLE_DEVICES`` environment
    variable; else every GPU, with MIG-enabled GPUs split into their instances.
    """
    system.require()
    value = visible if visible is not None else os.environ.get("CUDA_VISIBLE_DEVICES")
    tokens = parse_visible_devices(value)
    if tokens is None:
        return [(d.token, d) for gpu in system.devices for d in (gpu.mig or (gpu,))]
    if not tokens:
        raise ValueError(f"CUDA_VISIBLE_DEVICES is empty ({value!r}): it hides every GPU. Unset it or name a device.")
    selected = [(t, _find(system, t)) for t in tokens]
    first = {}
    for token, device in selected:
        if device.uuid in first:  # e.g. "0,GPU-<uuid of 0>"
            raise ValueError(
                f"CUDA_VISIBLE_DEVICES names device {device.uuid} ({device.label}) twice, as "
                f"{first[device.uuid]!r} and {token!r}: name each device once"
            )
        first[device.uuid] = token
    return selected


def find(device, system: System | None = None) -> Device:
    """The device that an index (0 or "0"), a ``GPU-``/``MIG-`` UUID or a UUID prefix names."""
    (token,) = parse_visible_devices([device])
    return _find((system or discover()).require(), token)


def own_device(system: System | None = None) -> Device:
    """This process's device: the first of its ``CUDA_VISIBLE_DEVICES`` (a worker's own GPU), else device 0."""
    return find(parse.own_device_token(os.environ.get("CUDA_VISIBLE_DEVICES")) or "0", system)


def rotate(tokens: Sequence[str], position: int) -> str:
    """``CUDA_VISIBLE_DEVICES`` for the worker of ``tokens[position]``: its own device first, then the others."""
    return ",".join([*tokens[position:], *tokens[:position]])


def _find(system: System, token: str) -> Device:
    if parse.is_index(token):
        for device in system.devices:
            if str(device.index) == (token.lstrip("0") or "0"):  # no int(): any number of digits
                return device
        last = len(system.devices) - 1
        raise ValueError(
            f"CUDA_VISIBLE_DEVICES entry {token!r} is not a GPU on this machine (indices 0-{last} exist)"
        )
    pool = [m for d in system.devices for m in d.mig] if token.upper().startswith("MIG-") else system.devices
    matches = [d for d in pool if d.uuid.lower().startswith(token.lower())]
    if len(matches) == 1:
        return matches[0]
    known = ", ".join(d.uuid for d in pool) or "none"
    if not matches:
        raise ValueError(f"CUDA_VISIBLE_DEVICES entry {token!r} matches no device UUID (known: {known})")
    raise ValueError(f"CUDA_VISIBLE_DEVICES entry {token!r} is ambiguous: it starts {len(matches)} UUIDs ({known})")
