"""Common dask.array operations, run on NumPy chunks and on CuPy chunks and compared.

Each case is a function of two dask arrays built from the same values (``x``: 60 x 40,
``y``: 40 x 30, chunks of 20) that returns dask arrays; :func:`run_case` computes it with
chunks of the given array module and :func:`check` compares against the NumPy result.
``python -m dask_gpu.array.compat --out FILE.md`` writes the table of what passes on CuPy.
"""

from __future__ import annotations

import argparse
import json

import dask
import dask.array as da
import numpy as np

SHAPE_X, SHAPE_Y, CHUNK = (60, 40), (40, 30), 20


def _svd_parts(u, s, v):
    return (u * s) @ v  # the factors' signs are free; their product is not


CASES = {
    # creation
    "ones_like / full": lambda x, y: (da.ones_like(x) + da.full_like(x, 2.0),),
    "arange / linspace": lambda x, y: (
        da.arange(0, 60, 1, chunks=20, like=x._meta),
        da.linspace(0, 1, 50, chunks=10),
    ),
    "eye / tri": lambda x, y: (da.eye(40, chunks=20) + da.tril(x[:40]),),
    # elementwise
    "arithmetic": lambda x, y: ((x + 1) * 2 - x / 3,),
    "ufuncs": lambda x, y: (da.sin(x) + da.exp(-x) + da.sqrt(x),),
    "where / clip / astype": lambda x, y: (da.where(x > 0.5, x, -x), da.clip(x, 0.2, 0.8), x.astype("float32")),
    # reductions
    "sum / prod / mean": lambda x, y: (x.sum(), x.prod(axis=0), x.mean(axis=1)),
    "var / std": lambda x, y: (x.var(), x.std(axis=0, ddof=1)),
    "min / max / argmin / argmax": lambda x, y: (x.min(), x.max(axis=1), x.argmin(axis=0), x.argmax()),
    "nansum / nanmean": lambda x, y: (
        da.nansum(da.where(x > 0.9, np.nan, x)),
        da.nanmean(da.where(x > 0.9, np.nan, x)),
    ),
    "any / all": lambda x, y: ((x > 0.99).any(), (x > 0.01).all(axis=0)),
    "cumsum / cumprod": lambda x, y: (x.cumsum(axis=0), (x + 0.5).cumprod(axis=1)),
    # slicing and indexing
    "strided slicing": lambda x, y: (x[::2, 1::3], (x + 1)[::2, ::2].sum()),
    "fancy indexing": lambda x, y: (x[[0, 5, 7, 59]], x[:, [1, 3, 39]]),
    "boolean mask": lambda x, y: (x[x > 0.5],),
    # structure
    "rechunk / transpose": lambda x, y: (x.rechunk((30, 10)), x.T.rechunk(40)),
    "concatenate / stack": lambda x, y: (da.concatenate([x, x], axis=1), da.stack([x, 2 * x])),
    "reshape / flip / roll": lambda x, y: (
        x.rechunk((60, 40)).reshape(40, 60),
        x.ravel(),
        da.flip(x, axis=0),
        da.roll(x, 3, axis=1),
    ),
    "pad": lambda x, y: (da.pad(x, 2, mode="constant"),),
    # linear algebra
    "matmul / dot / tensordot": lambda x, y: (x @ y, da.dot(x, y), da.tensordot(x, y, axes=1)),
    "einsum": lambda x, y: (da.einsum("ij,jk->ik", x, y),),
    "linalg.qr": lambda x, y: (da.matmul(*da.linalg.qr(x.rechunk((20, 40)))),),
    "linalg.svd": lambda x, y: (_svd_parts(*da.linalg.svd(x.rechunk((20, 40)))),),
    "linalg.svd_compressed": lambda x, y: (da.linalg.svd_compressed(x, k=40, seed=0)[1],),
    "linalg.solve": lambda x, y: (da.linalg.solve(x[:40] + 40 * da.eye(40, chunks=20), y[:, :1]),),
    "linalg.lstsq": lambda x, y: (da.linalg.lstsq(x.rechunk((20, 40)), x[:, :1].rechunk((20, 1)))[0],),
    # signal, blocks, statistics
    "fft": lambda x, y: (da.fft.fft(x.rechunk((20, 40)), axis=1),),
    "map_blocks": lambda x, y: (x.map_blocks(lambda b: b * 2 + 1, dtype=x.dtype),),
    "map_overlap": lambda x, y: (x.map_overlap(lambda b: b[:-1] + b[1:], depth={0: 1}, boundary="none",
                                                chunks=((19, 18, 19), (20, 20))),),
    "percentile": lambda x, y: (da.percentile(x.ravel(), [10, 50, 90]),),
    "unique": lambda x, y: (da.unique((x * 10).astype("int64")),),
    "apply_gufunc": lambda x, y: (da.apply_gufunc(lambda a: a.sum(axis=-1), "(i)->()", x.rechunk((20, 40))),),
    "histogram": lambda x, y: (da.histogram(x, bins=10, range=(0, 1))[0],),
    "topk / argtopk": lambda x, y: (da.topk(x.ravel(), 5), da.argtopk(x.ravel(), 5)),
}

# Known gaps on CuPy chunks (measured; docs/compatibility.md): dask.array makes NumPy chunks or
# converts implicitly here. Fixing one turns its strict xfail in the tests into a failure to update.
GAPS = {
    "arange / linspace": "da.linspace makes NumPy chunks whatever the input",
    "eye / tri": "da.eye makes NumPy chunks",
    "linalg.svd_compressed": "its random projection is drawn with NumPy",
    "linalg.solve": "da.eye makes NumPy chunks",
    "topk / argtopk": "dask converts CuPy chunks to NumPy implicitly",
}

# Cases whose answers may legitimately differ in more than rounding between libraries.
TOLERANCE = {"linalg.svd_compressed": 1e-6, "percentile": 2e-2}


def inputs(xp):
    """x and y as dask arrays with ``xp`` chunks, from the same NumPy values."""
    rng = np.random.default_rng(0)
    x, y = rng.random(SHAPE_X), rng.random(SHAPE_Y)
    return da.from_array(xp.asarray(x), chunks=CHUNK), da.from_array(xp.asarray(y), chunks=CHUNK)


def run_case(name: str, xp) -> list[np.ndarray]:
    """The case's results with ``xp`` chunks, as NumPy arrays (checking the chunk type on the way)."""
    x, y = inputs(xp)
    outputs = dask.compute(*CASES[name](x, y), scheduler="sync")
    results = []
    for out in outputs:
        if xp is not np and not isinstance(out, (xp.ndarray, xp.generic)):
            raise TypeError(f"returned {type(out).__name__}, not {xp.__name__} data")
        results.append(np.asarray(out.get() if hasattr(out, "get") else out))
    return results


def check(name: str, expected: list[np.ndarray], got: list[np.ndarray]) -> None:
    rtol = TOLERANCE.get(name, 1e-9)
    for e, g in zip(expected, got, strict=True):
        assert e.shape == g.shape, f"shape {g.shape} != {e.shape}"
        if name == "boolean mask" or name == "unique":
            e, g = np.sort(e), np.sort(g)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol)


def table(xp) -> tuple[str, dict]:
    """Run every case with ``xp`` chunks against NumPy; a Markdown table and the raw outcome."""
    outcome = {}
    for name in CASES:
        try:
            check(name, run_case(name, np), run_case(name, xp))
            outcome[name] = "passes"
        except Exception as e:  # the table records how a case fails
            outcome[name] = f"fails: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    rows = ["| operation | CuPy chunks |", "| --- | --- |"]
    rows += [f"| {name} | {result.replace('|', '/')} |" for name, result in outcome.items()]
    passed = sum(r == "passes" for r in outcome.values())
    return f"{passed} of {len(outcome)} pass\n\n" + "\n".join(rows) + "\n", outcome


def main():
    parser = argparse.ArgumentParser(description="dask.array on CuPy chunks against NumPy")
    parser.add_argument("--out", default="docs/compatibility.md")
    parser.add_argument("--json")
    args = parser.parse_args()
    import cupy

    text, outcome = table(cupy)
    with open(args.out, "w") as f:
        f.write(f"# dask.array on CuPy chunks\n\nCuPy {cupy.__version__}, dask {dask.__version__}: {text}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(outcome, f, indent=2)
    print(text)


if __name__ == "__main__":
    main()
