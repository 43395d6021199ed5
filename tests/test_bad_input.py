"""Every parser of user input, over arbitrary input: a well-formed value, or a ValueError naming the bad value.

Sizes, fractions, counts, resources, protocols, flags, ``CUDA_VISIBLE_DEVICES``, simulated devices,
worker-port ranges, the ``dask gpu worker`` command line and the ``gpu.*`` configuration. For any
input each parser returns a value of the right type and range, or raises ValueError (exit code 2
through the CLI) whose message names the value, or for a composite value its bad part: never
another exception, a hang, or nonsense (nan, a negative size, a unit without a number) accepted.

Last, dask-cuda's habits: ``workers=[0]`` finds the worker of GPU 0, and ``dask cuda`` without dask-cuda
names the ``dask gpu`` command to run.
"""

from __future__ import annotations

import contextlib
import math
import re
import string
import subprocess
import sys
import time
import warnings
from importlib import metadata
from importlib.util import find_spec
from unittest import mock

import dask
import pytest
from click.testing import CliRunner
from dask.utils import byte_sizes, format_bytes
from distributed import SpecCluster
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st

from dask_gpu import config, devices, options
from dask_gpu import machine
from dask_gpu import parse as parsers
from dask_gpu.cli import gpu
from dask_gpu.cluster import LocalCUDACluster
from dask_gpu.launch import apportion_ports
from dask_gpu.options import WorkerOptions

with warnings.catch_warnings(), contextlib.suppress(ImportError):
    # hypothesis imports libcst to write up a failure, and libcst's import warns (an error here)
    warnings.simplefilter("ignore", DeprecationWarning)
    import libcst  # noqa: F401

FAST = settings(max_examples=150, deadline=None, derandomize=True)  # the same examples on every run
SLOW = settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])

# -- strategies ------------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(),
    st.text(max_size=12),
    st.binary(max_size=4),
)
anything = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.tuples(inner), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
numbers = st.one_of(st.integers(), st.floats(), st.integers(-(10**400), 10**400))
odd_numbers = ["nan", "-inf", "1e400", "1_000", "0x10", "", " ", "-0", "+1", "٣", "²"]
number_text = numbers.map(str) | st.sampled_from(odd_numbers)
units = st.sampled_from([*byte_sizes, "GB", "GiB", "KB", "x", "e", "bytes", "gbgb"])
size_text = st.builds("{}{}{}".format, number_text, st.sampled_from(["", " ", "  "]), units | st.just("%"))
sizes = st.one_of(anything, size_text, st.text(alphabet="0123456789.eE+-% kKmMgGiIbB,", max_size=12))
size_keywords = st.sampled_from(["auto", "AUTO ", "none", "None", "0", "", " "])


def parts(value) -> list:
    """The value and, for a container or a composite string like "0,x" or "A=1 B=x", its parts."""
    found = [value]
    if isinstance(value, str):  # entries, then words, then the sides of NAME=AMOUNT
        found += {p.strip() for pattern in (r",", r"[\s,]+", r"[\s,=]+") for p in re.split(pattern, value)}
    elif isinstance(value, (list, tuple)):
        found += [p for item in value for p in parts(item)]
    elif isinstance(value, dict):
        found += [p for item in value.items() for p in parts(item)]
    return found


def names(message: str, value, *also) -> bool:
    """Whether the message names the value (its repr or str, in any case) or, for a composite, a part of it.

    A whole value may appear bare (``nthreads ... not 0``) or quoted without its spaces; a part must appear quoted,
    as repr writes it.
    """
    text = message.lower()
    whole = [repr(value), str(value).strip(), repr(str(value).strip()), *map(str, also)]
    quoted = [repr(p) for p in parts(value)[1:]] + [repr(str(p).strip()) for p in parts(value)[1:]]
    return any(c.lower() in text for c in [*whole, *quoted] if c)


def outcome(parse, value, *also):
    """``parse(value)``, or None where it raises a ValueError that names the value (anything else fails)."""
    try:
        return parse(value)
    except ValueError as e:
        assert names(str(e), value, *also), f"{e!s} does not name {value!r}"
        return None


# -- counts, saturation ------------------------------------------------------------------


@FAST
@given(value=anything | number_text, minimum=st.integers(0, 2))
@example(value="²", minimum=0).via("found: int() refused what str.isdigit() took")
@example(value="--5", minimum=0).via("found: int() refused what lstrip('-').isdigit() took")
@example(value="9" * 5000, minimum=0).via("found: int() refuses 4300 digits")
def test_parse_count(value, minimum):
    result = outcome(lambda v: parsers.count(v, "things", minimum), value)
    if result is not None:
        assert type(result) is int and result >= minimum
        assert result == (value if isinstance(value, int) else int(value.strip()))


@FAST
@given(st.integers(1, 10**30), st.sampled_from(["{}", " {} ", "+{}"]))
def test_parse_nthreads_round_trip(n, form):
    assert parsers.nthreads(n) == n
    assert parsers.nthreads(form.format(n)) == n


@FAST
@given(anything | number_text)
@example(10**400).via("found: OverflowError")
def test_parse_saturation(value):
    result = outcome(parsers.saturation, value)
    if value is None:
        assert result is None
    elif result is not None:
        assert type(result) is float and result > 0  # inf allowed, nan never
        assert not isinstance(value, bool)


# -- sizes and fractions -------------------------------------------------------------------


@pytest.mark.parametrize("parse", [parsers.memory_limit, parsers.device_memory_limit])
@FAST
@given(value=sizes | size_keywords)
@example(value="").via("found: 1 byte")
@example(value="GB").via("found: 1 GB")
@example(value="0.4 B").via("found: 0, no limit")
@example(value="1 2GB").via("found: 12 GB")
@example(value=10**400).via("found: OverflowError")
@example(value=" -1e0 ").via("found: the message named -1, not the value")
@example(value="5e-324%").via("found: 0.0, no limit")
def test_parse_memory_limits(parse, value):
    result = outcome(parse, value)
    if result is None:
        return
    assert result == "auto" or type(result) in (int, float)
    if type(result) is float:
        assert 0 < result <= 1  # a fraction
    if type(result) is int:
        assert result >= 0  # bytes; 0: no limit
    if result == 0:  # "no limit" only where asked for, never a value rounded down
        assert value in (None, 0, 0.0, "0") or str(value).strip().lower() in ("none", "0") or "0" in str(value)
    if isinstance(value, str) and not any(c.isdigit() for c in value):
        assert value.strip().lower() in ("auto", "none")  # "GB" or "" is not a size


@pytest.mark.parametrize("parse", [parsers.memory_limit, parsers.device_memory_limit])
@FAST
@given(n=st.integers(0, 10**12), sep=st.sampled_from(["", " "]), unit=st.sampled_from([u for u in byte_sizes if u]))
def test_sizes_with_units(parse, n, sep, unit):
    result = parse(f"{n}{sep}{unit.upper()}")
    assert type(result) is int and result == pytest.approx(n * byte_sizes[unit], rel=1e-15)


@pytest.mark.parametrize("parse", [parsers.memory_limit, parsers.device_memory_limit])
@FAST
@given(st.integers(1, 2**62))
def test_format_bytes_round_trip(parse, n):
    result = parse(format_bytes(n))  # "1.50 GiB": two decimals
    assert type(result) is int and result == pytest.approx(n, rel=0.01)
    assert parse(n) == (1.0 if n == 1 else n) and parse(str(n)) == parse(n)


@pytest.mark.parametrize("parse", [parsers.memory_limit, parsers.device_memory_limit])
@FAST
@given(st.floats(0, 1, exclude_min=True))
def test_fractions_accepted(parse, f):
    assert parse(f) == f and parse(repr(f)) == f
    assert parse(f"{f * 100!r}%") == pytest.approx(f)


@pytest.mark.parametrize("parse", [parsers.memory_limit, parsers.device_memory_limit])
@FAST
@given(
    st.one_of(
        st.floats(max_value=0, exclude_max=True),
        st.integers(max_value=-1),
        st.sampled_from([math.nan, math.inf, -math.inf]),
        st.builds(float.__add__, st.integers(1, 2**40).map(float), st.floats(0.01, 0.99)),  # not whole bytes
        st.one_of(st.integers(max_value=-1), st.floats(max_value=-1e-300)).map("{}GB".format),
        st.floats(100, 1e300, exclude_min=True).map("{!r}%".format),
        units.filter(lambda u: u != "%"),
    )
)
def test_nonsense_sizes_refused(parse, value):
    with pytest.raises(ValueError) as info:
        parse(value)
    assert names(str(info.value), value)


limits = st.one_of(
    st.floats(0, 1),
    st.integers(0, 2**50),
    st.builds("{}{}".format, st.integers(0, 10**6), st.sampled_from(["B", "kB", "MB", "GiB", "TB"])),
    st.floats(0, 100, exclude_min=True).map("{!r}%".format),
    st.just("auto"),
    sizes,
)


@FAST
@given(limit=limits, total=st.integers(1, 2**45))
@example(limit=1e-30, total=1000).via("found: 0, no limit")
def test_device_memory_bytes(limit, total):
    parsed = outcome(parsers.device_memory_limit, limit)
    if parsed is None:
        return
    result = outcome(lambda v: parsers.device_memory_bytes(v, total), parsed, limit)
    if result is not None:
        assert type(result) is int and 0 <= result <= total
        assert (result == 0) == (parsed == 0)  # a positive limit never becomes "no limit"


# -- resources ---------------------------------------------------------------------------

resource_names = st.text(alphabet=string.ascii_letters + "_", min_size=1, max_size=5)
amounts = st.floats(0, 1e18) | st.integers(0, 10**18)


resource_text = st.builds(
    lambda sep, pairs: sep.join(f"{k}={v}" for k, v in pairs),
    st.sampled_from([" ", ",", ", "]),
    st.lists(st.tuples(st.text(max_size=4) | resource_names, number_text), max_size=3),
)


@FAST
@given(anything | resource_text)
@example([]).via("found: {}")
@example(0).via("found: {}")
@example({"A": True}).via("found: 1.0")
@example({"": 1, 2: 3}).via("found: names '' and '2'")
@example({"A": 10**400}).via("found: OverflowError")
def test_parse_resources(value):
    result = outcome(parsers.resources, value)
    if result is not None:
        assert type(result) is dict
        assert all(type(k) is str and k.strip() for k in result)
        assert all(type(v) is float and math.isfinite(v) and v >= 0 for v in result.values())
        if not value:
            assert result == {} and (value is None or value == "" or value == {})


@FAST
@given(st.dictionaries(resource_names, amounts, max_size=4), st.sampled_from([" ", ",", " , "]))
def test_resources_round_trip(resources, sep):
    text = sep.join(f"{k}={v!r}" for k, v in resources.items())
    expected = {k: float(v) for k, v in resources.items()}
    assert parsers.resources(text) == parsers.resources(resources) == expected


@FAST
@given(resource_names, amounts, amounts)
def test_resource_named_twice_refused(name, a, b):
    with pytest.raises(ValueError, match=f"resource {re.escape(repr(name))} is given twice"):
        parsers.resources(f"{name}={a} {name}={b}")


# -- modules, protocol, flags, directories -----------------------------------------------


def no_side_effects(value) -> bool:
    """Not a module whose import does something visible (find_spec imports a dotted name's parents)."""
    return not any(name in str(value) for name in ("this", "antigravity", "__hello__", "__phello__"))


module_names = st.sampled_from(["json", "xml.dom", "os.path, json", "json xml", "json,nope_x", "a-b", "1abc"])


@FAST
@given((anything | module_names).filter(no_side_effects))
@example(True).via("found: TypeError")
@example({"json": 1}).via("found: ('json',)")
def test_parse_pre_import(value):
    result = outcome(machine.pre_import, value)
    if result is not None:
        assert type(result) is tuple
        assert all(type(name) is str and find_spec(name) is not None for name in result)


@FAST
@given(anything | st.sampled_from(["tcp", "TLS://", " ucx ", "ws", "http", "tcp:/"]))
def test_parse_protocol(value):
    result = outcome(parsers.protocol, value)
    assert result is None or result in ("tcp", "tls", "ucx", "ucxx", "inproc", "ws", "wss")
    if result is not None:
        assert isinstance(value, str) and result in value.lower()


@FAST
@given(st.sampled_from(["tcp", "tls", "ucx", "ucxx", "inproc", "ws", "wss"]), st.booleans(), st.booleans())
def test_protocol_round_trip(protocol, upper, suffix):
    text = f" {protocol.upper() if upper else protocol}{'://' if suffix else ''} "
    assert parsers.protocol(text) == protocol


@FAST
@given(anything)
def test_parse_flag(value):
    result = outcome(lambda v: parsers.flag(v, "cpu_affinity"), value)
    assert result is value if isinstance(value, bool) else result is None  # "no" is not True


@FAST
@given(
    protocol=st.sampled_from([None, "tcp", "tls", "ucx"]),
    transports=st.dictionaries(st.sampled_from(sorted(options.UCX_TRANSPORTS.values())), st.booleans(), max_size=4),
)
def test_parse_ucx(protocol, transports):
    if transports and protocol not in (None, "ucx"):  # None: a worker's protocol is its scheduler's, maybe UCX
        with pytest.raises(ValueError) as info:
            options.parse_ucx(protocol, transports)
        keywords = [k for k, v in options.UCX_TRANSPORTS.items() if v in transports]
        assert all(k in str(info.value) for k in keywords) and repr(protocol) in str(info.value)
        return
    result = options.parse_ucx(protocol, transports)
    assert {k: result[k] for k in transports} == transports  # what was chosen stays chosen
    links = ("tcp", "nvlink", "infiniband")
    if any(v is False for v in transports.values()) and not any(transports.values()):  # dask-cuda's rule
        assert all(result[k] is True for k in links if k not in transports)
    assert result.get("cuda-copy", False) is any(result.get(k) for k in links)  # GPU buffers need cuda-copy


@FAST
@given(anything)
def test_parse_local_directory(value):
    result = outcome(parsers.local_directory, value)
    assert result is None or (type(result) is str and result == value and value.strip())


# -- WorkerOptions.resolve: every keyword at once --------------------------------------------

keywords = st.fixed_dictionaries(
    {},
    optional={
        "nthreads": anything | number_text,
        "memory_limit": sizes | size_keywords,
        "device_memory_limit": sizes | size_keywords,
        "resources": anything,
        "local_directory": anything,
        "pre_import": (anything | st.sampled_from(["json", "json,xml.dom"])).filter(no_side_effects),
        "protocol": anything | st.sampled_from(["tcp", "ucx", "tls://"]),
        "cpu_affinity": anything,
        "enable_nvlink": anything,
        "enable_tcp_over_ucx": anything,
    },
)


@pytest.mark.filterwarnings("ignore:protocol=.* needs the distributed-ucxx package:UserWarning")
@FAST
@given(keywords)
@example({"cpu_affinity": "no"}).via("found: True")
@example({"protocol": "ucx", "enable_nvlink": "no"}).via("found: NVLink on")
@example({"local_directory": 5}).via("found: passed on to the workers")
@example({"pre_import": 5}).via("found: TypeError")
def test_resolve_keywords(kwargs):
    try:
        opts = WorkerOptions.resolve(**kwargs)
    except ValueError as e:
        named = any(names(str(e), v) for v in kwargs.values()) or any(k in str(e) for k in options.UCX_TRANSPORTS)
        assert named, f"{e!s} names none of {kwargs!r}"
        return
    assert type(opts.nthreads) is int and opts.nthreads >= 1
    assert opts.memory_limit == "auto" or type(opts.memory_limit) in (int, float)
    assert opts.device_memory_limit == "auto" or type(opts.device_memory_limit) in (int, float)
    assert all(type(v) is float and v >= 0 for v in opts.resources.values())
    assert type(opts.cpu_affinity) is bool and all(type(v) is bool for v in opts.ucx.values())
    assert opts.local_directory is None or type(opts.local_directory) is str
    assert all(type(m) is str for m in opts.pre_import)
    assert not set(kwargs) - set(options.UCX_TRANSPORTS) & set(opts.extra)  # nothing left unparsed


# -- CUDA_VISIBLE_DEVICES and simulated devices ---------------------------------------------

SYSTEM = devices.simulated_system(4)
UUIDS = [d.uuid for d in SYSTEM.devices]
device_tokens = st.one_of(
    st.integers(-2, 6).map(str),
    st.sampled_from(UUIDS).flatmap(lambda u: st.integers(4, len(u)).map(lambda n: u[:n])),
    st.sampled_from(["GPU-", "MIG-", "gpu-zz", "MIG-1", "", " ", "0x1", "00", "²", "٣", "1.0", "-0"]),
    st.text(max_size=4),
)
visible = st.one_of(
    anything,
    st.lists(device_tokens, max_size=4).map(",".join),
    st.lists(device_tokens | st.integers(-1, 5), max_size=3),
)


@FAST
@given(visible)
@example(1.0).via("found: TypeError")
@example(b"0,1").via("found: devices '48', '44', '49'")
@example({"0": 1}).via("found: ('0',)")
def test_parse_visible_devices(value):
    result = outcome(devices.parse_visible_devices, value)
    if result is not None:
        assert type(result) is tuple and len(set(result)) == len(result)
        for token in result:
            assert (token.isascii() and token.isdigit()) or token[:4].upper() in ("GPU-", "MIG-")


@FAST
@given(visible)
@example("²").via("found: int() refused what str.isdigit() took")
@example("٣").via("found: CUDA would be given '٣' for device 3")
@example("0" * 5000 + "1").via("found: int() refuses 4300 digits")
def test_select(value):
    assume(value is not None)  # None reads the environment; see test_select_reads_the_environment
    result = outcome(lambda v: devices.select(SYSTEM, v), value)
    if result is not None:
        assert [t for t, _ in result] == list(devices.parse_visible_devices(value))
        assert all(d in SYSTEM.devices for _, d in result)
        assert len({d.uuid for _, d in result}) == len(result) > 0


@FAST
@given(st.permutations(range(4)).flatmap(lambda p: st.integers(1, 4).map(lambda n: p[:n])), st.booleans())
def test_select_round_trip(indices, by_uuid):
    tokens = [UUIDS[i][:12] if by_uuid else str(i) for i in indices]
    selected = devices.select(SYSTEM, ",".join(tokens))
    assert [d.index for _, d in selected] == list(indices)
    assert [t for t, _ in selected] == tokens


def test_select_reads_the_environment(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,x")
    with pytest.raises(ValueError, match="'x'"):
        devices.select(SYSTEM)


@FAST
@given(
    st.one_of(
        anything,
        st.integers(-5, 10**30),
        st.lists(size_text | st.integers(-5, 10**12), max_size=3),
        st.lists(size_text, max_size=3).map(",".join),
        st.sampled_from(["17179869184", "9" * 5000, "4.0", "16GB,", ",", "1e300", "²", "٣"]),
    )
)
@example("²").via("found: int() refused what str.isdigit() took")
@example([""]).via("found: a 1-byte device")
@example([" gb"]).via("found: a 1 GB device")
@example([1.5]).via("found: a 1-byte device")
@example("17179869184").via("found: a hang, building 17 billion devices")
def test_simulated_system(spec):
    system = outcome(devices.simulated_system, spec)
    if system is not None:
        assert system.state is devices.State.SIMULATED
        assert len(system.devices) <= devices.MAX_SIMULATED
        assert all(type(d.memory_total) is int and d.memory_total > 0 for d in system.devices)


@FAST
@given(st.integers(devices.MAX_SIMULATED + 1, 10**18), st.sampled_from([int, str, float]))
def test_simulated_count_too_large_is_refused_not_built(n, form):
    with pytest.raises(ValueError, match=f"more than {devices.MAX_SIMULATED} devices"):
        devices.simulated_system(form(n))


# -- worker ports ------------------------------------------------------------------------------


@FAST
@given(first=st.integers(1, 65535), span=st.integers(0, 200), n=st.integers(1, 8), nanny=st.booleans())
def test_apportion_ports(first, span, n, nanny):
    last = min(first + span, 65535)
    spec = str(first) if last == first else f"{first}:{last}"
    shares = outcome(lambda s: apportion_ports(s, s if nanny else None, n), spec)
    if shares is None:
        assert last - first + 1 < n  # only too few ports for the workers
        return
    workers = [w["worker_port"] for w in shares]
    assert len(workers) == n and all(workers)
    flat = [p for w in workers for p in w]
    assert sorted(flat) == list(range(first, last + 1))  # disjoint, covering
    assert all(w["port"] == (w["worker_port"] if nanny else 0) for w in shares)


# -- dask gpu worker: the command line ---------------------------------------------------------

CLI_OPTIONS = {
    "memory-limit": sizes.map(str),
    "device-memory-limit": sizes.map(str),
    "resources": st.text(max_size=10) | st.sampled_from(["MEM=1", "A=1 A=2", "A=x", "=1", "A=-1", "A=nan"]),
    "cuda-visible-devices": st.lists(device_tokens, max_size=3).map(",".join),
    "protocol": st.text(max_size=6) | st.sampled_from(["tcp", "tls", "ucx", "http"]),
    "pre-import": st.text(max_size=8).filter(no_side_effects) | st.sampled_from(["json", "json,nope_x", "a-b"]),
    "worker-port": st.text(max_size=8) | st.builds("{}:{}".format, st.integers(-5, 10**15), st.integers(-5, 10**15)),
    "nanny-port": st.text(max_size=8) | st.integers(-5, 10**6).map(str),
    "nthreads": number_text,
    "death-timeout": number_text,
    "local-directory": st.sampled_from(["", " ", "/tmp/x"]),
    "rmm-pool-size": sizes.map(str),
}
CLICK_TYPES = {"nthreads": int, "death-timeout": float}  # click converts these before any check of ours
ACCEPTABLE = {  # what an option with no library parser may be, where the command goes on
    "nthreads": lambda v: int(v) >= 1,
    "death-timeout": lambda v: 0 < float(v) < math.inf,
    "worker-port": lambda v: v.strip() in ("", "0") or all(0 < int(p) < 65536 for p in v.split(":")),
    "nanny-port": lambda v: v.strip() in ("", "0") or all(0 < int(p) < 65536 for p in v.split(":")),
    "local-directory": str.strip,
}
LIBRARY_PARSERS = {
    "memory-limit": parsers.memory_limit,
    "device-memory-limit": parsers.device_memory_limit,
    "resources": parsers.resources,
    "cuda-visible-devices": lambda v: devices.select(devices.simulated_system(2), v),
    "protocol": parsers.protocol,
    "pre-import": parsers.pre_import,
}


def run_worker(*args):
    """``dask gpu worker`` on 2 simulated GPUs, with its nannies replaced: (exit code, output, started)."""
    started = []

    async def no_nannies(worker):
        started.append(worker.specs)
        return 0

    with dask.config.set({"gpu.simulate": 2}), mock.patch("dask_gpu.launch.serve", no_nannies):
        result = CliRunner().invoke(
            gpu, ["worker", "tcp://127.0.0.1:1", *args], env={"CUDA_VISIBLE_DEVICES": None}, catch_exceptions=False
        )
    return result.exit_code, result.output, started


@pytest.mark.filterwarnings("ignore:protocol=.* needs the distributed-ucxx package:UserWarning")
@SLOW
@given(st.sampled_from(sorted(CLI_OPTIONS)).flatmap(lambda o: st.tuples(st.just(o), CLI_OPTIONS[o])))
@example(("worker-port", "9000:99999999999")).via("found: a hang, listing every port of the range")
@example(("death-timeout", "nan")).via("found: accepted")
@example(("death-timeout", "-1")).via("found: accepted")
@example(("memory-limit", "GB")).via("found: 1 GB")
@example(("resources", "A=1 A=2")).via("found: A=2")
def test_worker_option(option_value):
    option, value = option_value
    code, output, started = run_worker(f"--{option}={value}")
    event(f"exit code {code}")
    assert code in (0, 2), output
    parse = LIBRARY_PARSERS.get(option)
    accepted = outcome(parse, value) if parse else None
    if code == 2:
        assert not started  # checked before anything starts
        also = [accepted] if accepted else []
        with contextlib.suppress(ValueError, KeyError):
            also.append(CLICK_TYPES[option](value))  # the value as click converted it
        assert names(output, value, *also), output
    else:
        assert len(started) == 1 and started[0]  # one worker per selected GPU
        assert parse is None or accepted is not None  # the library refused it, the CLI must too
        assert option not in ACCEPTABLE or ACCEPTABLE[option](value)


@SLOW
@given(st.integers(1, 65535), st.integers(65536, 10**18), st.sampled_from(["worker-port", "nanny-port"]))
def test_worker_port_range_too_large_is_refused_at_once(first, last, option):
    code, output, started = run_worker(f"--{option}={first}:{last}")
    assert code == 2 and "outside 1-65535" in output and not started


# -- the gpu.* configuration -------------------------------------------------------------------

# read where they act, not as a cluster starts: the array optimizer's switch, and CuPy's compile settings (as
# dask-gpu is imported)
CONFIG_KEYS = sorted(set(config.defaults["gpu"]) - {"simulate", "dashboard-address", "array-optimize", "compile-less"})


class Started(Exception):
    """The cluster got past its checks (SpecCluster.__init__ would start the scheduler)."""


def build_cluster():
    with mock.patch.object(SpecCluster, "__init__", side_effect=Started):
        LocalCUDACluster(CUDA_VISIBLE_DEVICES="0,1", dashboard_address=False)


@pytest.mark.filterwarnings("ignore:protocol=.* needs the distributed-ucxx package:UserWarning")
@settings(max_examples=25, deadline=None, derandomize=True)
@given(key=st.sampled_from(CONFIG_KEYS), value=anything.filter(no_side_effects))
def test_config_values(key, value):
    with dask.config.set({"gpu.simulate": 2, f"gpu.{key}": value}):
        try:
            build_cluster()
        except ValueError as e:
            event("refused")
            message = str(e).lower()
            assert key in message or key.replace("-", "_") in message or names(message, value), str(e)
        except Started:
            event("accepted")


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.sampled_from(CONFIG_KEYS), st.data())
def test_config_bad_values_refused(key, data):
    """Values the schema refuses never start a cluster."""
    bad = {
        "nthreads": st.integers(max_value=0) | st.text(max_size=3) | st.floats(),
        "memory-limit": st.floats(-1e9, -0.1) | st.just("GB"),
        "device-memory-limit": st.sampled_from([-1, 1.5, "150%", "x", math.nan]),
        "local-directory": st.sampled_from(["", 5, [], {}]),
        "protocol": st.sampled_from(["http", "", 5]),
        "pre-import": st.sampled_from(["a-b", 5, [1]]),
        "resources": st.sampled_from([{"A": -1}, {"A": "x"}, 5, [], {"": 1}, {"A": True}]),
        "cpu-affinity": st.sampled_from(["yes", "no", 1, None]),
        "cpu-workers": st.integers(max_value=-1) | st.just("x") | st.just(10**9),
        "worker-saturation": st.sampled_from([0, -1, "x", math.nan, True]),
        "allocator": st.sampled_from(["cuda", 5]),
        "rmm-pool-size": st.sampled_from(["x", -1, "GB"]),
        "rmm-maximum-pool-size": st.sampled_from(["x", -1]),
        "rmm-managed-memory": st.sampled_from(["yes", 1]),
        "rmm-async": st.sampled_from(["no", 0]),
        "rmm-release-threshold": st.sampled_from(["x", 5]),
        "rmm-log-directory": st.sampled_from(["/nonexistent/dir", 5]),
        "rmm-track-allocations": st.sampled_from(["yes", 1]),
        "cudf-spill": st.sampled_from(["yes", 1]),
        "cudf-spill-stats": st.sampled_from([-1, "x", True, 1.5]),
        "rmm-allocator-external-lib-list": st.sampled_from(["numpy", 5, ["cupy", "jax"], {"cupy": 1}]),
        "log-spilling": st.sampled_from(["yes", 1, None]),
        "shuffle": st.sampled_from(["gpus", 5, "", "tasks"]),
        "partition-size": st.sampled_from([0, -1, "x", 1.5, "GB", None]),
        "kernel-cache": st.sampled_from([5, ["a"], "/proc/no-such-directory", True]),
    }
    value = data.draw(bad[key])
    with dask.config.set({"gpu.simulate": 2, f"gpu.{key}": value}):
        with pytest.raises(ValueError) as info:
            build_cluster()
    message = str(info.value).lower()
    assert key in message or key.replace("-", "_") in message or names(message, value), str(info.value)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.text(alphabet=string.ascii_lowercase + "-_", min_size=1, max_size=12))
def test_config_unknown_key_refused(key):
    known = set(config.defaults["gpu"])
    assume(key.replace("_", "-") not in known and key.strip("-_") == key)
    with dask.config.set({"gpu.simulate": 2, f"gpu.{key}": 1}):
        with pytest.raises(ValueError, match=f"unknown configuration key gpu.{re.escape(key)}"):
            build_cluster()


@pytest.mark.parametrize("typo, meant", [("nthread", "nthreads"), ("device-memory-limt", "device-memory-limit")])
def test_config_typo_suggests_the_key(typo, meant):
    with dask.config.set({f"gpu.{typo}": 2}):
        with pytest.raises(ValueError, match=f"did you mean gpu.{meant}"):
            WorkerOptions.resolve()


@pytest.mark.parametrize(
    "text, match",
    [
        ("gpu:\n  nthreads: two\n", "'two'"),
        ("gpu:\n  nthread: 2\n", "gpu.nthread: did you mean gpu.nthreads"),
        ("gpu:\n  device-memory-limit: 150%\n", "'150%'"),
        ("gpu:\n  memory-limit: GB\n", "'gb'"),
        ("gpu:\n  resources: {MEM: -1}\n", "resource 'MEM' must be >= 0"),
        ("gpu:\n  cpu-affinity: yes please\n", "'yes please'"),
    ],
)
def test_config_file(tmp_path, text, match):
    (tmp_path / "gpu.yaml").write_text(text)
    loaded = dask.config.collect([str(tmp_path)], env={})  # as dask reads ~/.config/dask/*.yaml
    with dask.config.set({f"gpu.{key}": value for key, value in loaded["gpu"].items()}):
        with pytest.raises(ValueError, match=match):
            WorkerOptions.resolve()


# -- dask-cuda's habits ------------------------------------------------------------------------


def worker_name():
    from distributed import get_worker

    return get_worker().name


def wait_for(predicate, timeout=30):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_workers_given_as_device_indices_as_dask_cuda_named_them():
    from distributed import Client

    with dask.config.set({"gpu.simulate": 2}), LocalCUDACluster(dashboard_address=False) as cluster, \
            Client(cluster) as client:
        assert client.submit(worker_name, workers=[1], pure=False).result(timeout=30) == "gpu-1"
        assert client.submit(worker_name, workers=0, pure=False).result(timeout=30) == "gpu-0"
        cluster.scale(1)  # gpu-1 goes, and its index with it: 1 is no worker, as in distributed
        wait_for(lambda: len(cluster.scheduler.workers) == 1)
        with pytest.raises(TypeError, match="got 1"):
            client.submit(worker_name, workers=[1], pure=False).result(timeout=30)


def test_dask_cuda_names_dask_gpu_where_dask_cuda_is_not_installed(monkeypatch):
    from dask_gpu.cuda import cli

    monkeypatch.setattr(cli, "entry_points", lambda group: [])
    result = CliRunner().invoke(cli.cuda, ["worker", "tcp://127.0.0.1:8786", "--rmm-pool-size", "1GB"])
    assert result.exit_code == 2
    assert result.stderr == ("Error: dask-cuda is not installed; dask-gpu's equivalent is: "
                             "dask gpu worker tcp://127.0.0.1:8786 --rmm-pool-size 1GB\n")
    assert "dask gpu worker" in CliRunner().invoke(cli.cuda, []).stderr
    # where dask-cuda is installed, dask gets a hidden command of another name: dask-cuda's runs, and dask,
    # which warns on every run where two commands share a name, has no reason to
    dask_cuda = metadata.EntryPoint("cuda", "dask_cuda.cli:cuda", "dask_cli")
    monkeypatch.setattr(cli, "entry_points", lambda group: [dask_cuda, metadata.EntryPoint("cuda", cli.ENTRY_POINT,
                                                                                          "dask_cli")])
    assert cli.cuda.name != "cuda" and cli.cuda.hidden


def test_dask_cuda_through_the_dask_command():
    installed = [ep.value for ep in metadata.entry_points(group="dask_cli") if ep.name == "cuda"]
    assert "dask_gpu.cuda.cli:cuda" in installed, "pyproject.toml's entry points need a reinstall: pip install -e ."
    command = ["dask", "cuda", "worker", "tcp://127.0.0.1:8786", "--help"]
    result = subprocess.run([sys.executable, "-W", "error::UserWarning", "-m", *command], capture_output=True,
                            text=True, timeout=60)
    if find_spec("dask_cuda") is None:
        assert (result.returncode, result.stderr) == (2, "Error: dask-cuda is not installed; dask-gpu's equivalent "
                                                         "is: dask gpu worker tcp://127.0.0.1:8786 --help\n")
    else:  # dask-cuda's own, with no warning of two commands named cuda
        assert result.returncode == 0 and "dask gpu" not in result.stderr, result.stderr
