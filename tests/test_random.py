"""Counter-based random numbers: Philox, the distributions, chunk invariance, CPU = GPU."""

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.special
import scipy.stats

from dask_gpu import random
from dask_gpu.array import distributions, plan
from dask_gpu.array.distributions import Draw, NumpyOps

gpu = pytest.mark.gpu

# Random123's known answers for Philox4x32-10 (words 0 and 1): (counter, key) -> output.
PHILOX_KAT = [
    ((0, 0, 0, 0), (0, 0), 0x6627E8D5E169C58D),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), 0x408F276D41C83B0E),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0), 0xD16CFE0994FDCCEB),
]


@pytest.mark.parametrize(("counter", "key", "expected"), PHILOX_KAT)
def test_philox_matches_the_reference_answers(counter, key, expected):
    n = np.array([counter[0] | counter[1] << 32], dtype=np.uint64)
    assert int(distributions.philox_u64(n, counter[2] | counter[3] << 32, key)[0]) == expected


def test_log_exp_and_the_normal_quantile_are_accurate():
    rng = np.random.default_rng(0)
    x = np.exp(rng.uniform(-700, 700, 10000))
    assert np.max(np.abs(distributions.log(NumpyOps, x) - np.log(x)) / np.spacing(np.abs(np.log(x)))) <= 4
    y = rng.uniform(-700, 700, 10000)
    assert np.max(np.abs(distributions.exp(NumpyOps, y) - np.exp(y)) / np.spacing(np.exp(y))) <= 4
    p = np.concatenate([rng.uniform(0, 1, 10000), 10.0 ** -np.arange(1, 17), 1 - 10.0 ** -np.arange(1, 16)])
    z, ref = distributions.ndtri(NumpyOps, p), scipy.special.ndtri(p)
    assert np.max(np.abs(z - ref) / np.maximum(np.abs(ref), 1e-3)) < 1e-14


def test_the_same_values_for_every_chunking():
    a = random.default_rng(42).normal(10, 1, size=(300, 200), chunks=(70, 45)).compute()
    b = random.default_rng(42).normal(10, 1, size=(300, 200), chunks=-1).compute()
    c = random.default_rng(43).normal(10, 1, size=(300, 200), chunks=-1).compute()
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_each_call_is_a_new_stream_and_a_seed_repeats_it():
    rng = random.default_rng(7)
    first, second = rng.random(1000, chunks=300).compute(), rng.random(1000, chunks=300).compute()
    again = random.default_rng(7).random(1000).compute()
    assert not np.array_equal(first, second) and np.array_equal(first, again)


def test_slicing_commutes_with_drawing():
    x = random.default_rng(5).standard_normal(size=(97, 89), chunks=(20, 30))
    whole = x.compute()
    for index in [(slice(None, None, 2), slice(1, None, 3)), (slice(90, 3, -4),), (slice(5, 6), slice(None, None, -1))]:
        assert np.array_equal(x[index].compute(), whole[index])


def test_slices_are_drawn_not_cut_out(monkeypatch):
    x = random.default_rng(5).random(size=(100, 100), chunks=50)
    drawn = []
    original = distributions._sample_numpy
    monkeypatch.setattr(distributions, "_sample_numpy", lambda d, n: drawn.append(n.size) or original(d, n))
    x[::2, ::5].compute()
    assert sum(drawn) == 50 * 20


DISTRIBUTIONS = {  # method: (parameters, scipy distribution)
    "random": ((), scipy.stats.uniform()),
    "uniform": ((-2.0, 3.0), scipy.stats.uniform(-2, 5)),
    "standard_normal": ((), scipy.stats.norm()),
    "normal": ((10.0, 2.0), scipy.stats.norm(10, 2)),
    "lognormal": ((0.5, 0.75), scipy.stats.lognorm(0.75, scale=np.exp(0.5))),
    "standard_exponential": ((), scipy.stats.expon()),
    "exponential": ((3.0,), scipy.stats.expon(scale=3)),
    "gumbel": ((1.0, 2.0), scipy.stats.gumbel_r(1, 2)),
    "logistic": ((1.0, 2.0), scipy.stats.logistic(1, 2)),
    "laplace": ((1.0, 2.0), scipy.stats.laplace(1, 2)),
    "rayleigh": ((2.0,), scipy.stats.rayleigh(scale=2)),
    "weibull": ((1.5,), scipy.stats.weibull_min(1.5)),
    "pareto": ((3.0,), scipy.stats.lomax(3)),
    "power": ((2.5,), scipy.stats.powerlaw(2.5)),
}


@pytest.mark.parametrize("method", sorted(DISTRIBUTIONS))
def test_distributions_pass_a_kolmogorov_smirnov_test(method):
    params, reference = DISTRIBUTIONS[method]
    values = getattr(random.default_rng(11), method)(*params, size=200_000, chunks=70_000).compute()
    assert scipy.stats.kstest(values, reference.cdf).pvalue > 1e-3


def test_integers_are_uniform_and_in_range():
    values = random.default_rng(3).integers(-5, 5, size=100_000, chunks=30_000).compute()
    assert values.dtype == np.int64 and values.min() == -5 and values.max() == 4
    assert scipy.stats.chisquare(np.bincount(values + 5)).pvalue > 1e-3
    assert random.default_rng(3).integers(3, size=10, endpoint=True, dtype=np.uint8).compute().dtype == np.uint8


def test_float32_is_the_float64_values_rounded():
    a = random.default_rng(9).normal(size=1000, dtype=np.float32).compute()
    b = random.default_rng(9).normal(size=1000).compute()
    assert a.dtype == np.float32 and np.array_equal(a, b.astype(np.float32))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda g: g.normal(0, -1, size=3), ValueError, "scale = -1"),
        (lambda g: g.weibull(0, size=3), ValueError, "a = 0"),
        (lambda g: g.exponential(np.ones(3)), TypeError, "scale must be a real number"),
        (lambda g: g.integers(5, 5), ValueError, "low >= high"),
        (lambda g: g.random(size=-1), ValueError, "size must be a non-negative"),
        (lambda g: g.random(size=3, dtype=np.int32), TypeError, "float64 or float32"),
        (lambda g: g.pareto(size=3), TypeError, "missing required parameters \\['a'\\]"),
        (lambda g: g.normal(0, 1, 2, size=3), TypeError, "takes 2 parameters"),
    ],
)
def test_bad_parameters_get_clear_errors(call, error, match):
    with pytest.raises(error, match=match):
        call(random.default_rng(0))


def test_the_gpu_backend_bit_generator_is_only_a_seed():
    bitgen = random.Philox(42)
    children = [random.Philox(child) for child in bitgen._seed_seq.spawn(3)]  # what dask.array does
    assert [b._seed_seq.spawn_key for b in children] == [(0,), (1,), (2,)]
    assert dask.base.tokenize(random.Philox(1)) == dask.base.tokenize(random.Philox(1))
    assert isinstance(random.default_rng(bitgen), random.BlockGenerator)


# --- on a GPU ---------------------------------------------------------------------------------


@gpu
@pytest.mark.parametrize("method", sorted(DISTRIBUTIONS) + ["integers"])
def test_gpu_values_are_bit_identical_to_the_cpu(method):
    import cupy

    params = (-7, 1000) if method == "integers" else tuple(float(p) for p in DISTRIBUTIONS[method][0])
    dtype = np.dtype(np.int64 if method == "integers" else np.float64)
    draw = Draw((12345, 678), 3, method, params, (3000, 2000), dtype)
    for region in [distributions.whole(draw.shape), (range(7, 2999, 2), range(1999, 3, -3))]:
        cpu = plan.sample(draw, region)
        on_gpu = plan.sample(Draw(**{**draw.__dict__, "library": "cupy"}), region)
        assert isinstance(on_gpu, cupy.ndarray) and np.array_equal(cpu, on_gpu.get())


@gpu
def test_cupy_chunks_hold_the_numpy_values():
    x = random.default_rng(1).lognormal(0, 1, size=(2000, 1500), chunks=(700, 500)).compute()
    with dask.config.set({"array.backend": "gpu"}):
        y = random.default_rng(1).lognormal(0, 1, size=(2000, 1500), chunks=(1000, 1500))
        assert type(y._meta).__module__.startswith("cupy")
        y = y.compute()
    assert np.array_equal(x, y.get())


@gpu
def test_the_backend_default_rng_draws_blocks_with_philox():
    with dask.config.set({"array.backend": "gpu"}):
        x = da.random.default_rng(0).normal(10, 1, size=(2000, 2000), chunks=1000)
        gamma = da.random.default_rng(0).gamma(2.0, size=(100,), chunks=50)  # CuPy's Generator draws it
    block = x.blocks[1, 0].compute()
    assert type(block).__module__.startswith("cupy")
    assert abs(float(x.mean().compute()) - 10) < 5e-3 and abs(float(x.std().compute()) - 1) < 5e-3
    assert float(gamma.min().compute()) > 0


def test_numpy_chunks_on_a_gpu_cluster_say_how_to_get_cupy_ones(simulate):
    from distributed import Client, LocalCluster

    from dask_gpu import LocalCUDACluster

    simulate(1)
    with LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster):
        with pytest.warns(UserWarning, match=r"dask.config.set\(\{'array.backend': 'gpu'\}\) makes CuPy chunks"):
            x = random.default_rng(1).normal(size=(10,), chunks=5)
        assert type(x._meta) is np.ndarray
    with LocalCluster(n_workers=1, dashboard_address=":0", processes=False) as cluster, Client(cluster):
        random.default_rng(1).normal(size=(10,), chunks=5)  # no GPU workers: nothing to say (warnings are errors)
