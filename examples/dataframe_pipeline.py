"""A dataframe pipeline on GPU workers: a merge, a group-by and a sort, checked against pandas.

    python examples/dataframe_pipeline.py [--rows 1000000] [--partitions 8]

With cuDF and dask-cudf installed the partitions are cuDF frames (``dataframe.backend: gpu``) on the
GPUs; without them, or without a GPU, they are pandas frames on (simulated, where there is no GPU) GPU
workers, and a line says so.
"""

import argparse
from importlib.util import find_spec

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
from distributed import Client

import dask_gpu
from dask_gpu import LocalCUDACluster

REGIONS = ["north", "south", "east", "west", "centre"]


def tables(rows: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Orders (customer, amount) and customers (customer, region), the same on every run."""
    rng = np.random.default_rng(2026)
    customers = max(rows // 10, 1)
    orders = pd.DataFrame({"customer": rng.integers(0, customers, rows), "amount": rng.gamma(2.0, 50.0, rows)})
    people = pd.DataFrame({"customer": np.arange(customers), "region": [REGIONS[i % 5] for i in range(customers)]})
    return orders, people


def pipeline(orders, people):
    """The same code for dask and pandas frames: revenue per region, and the five largest orders."""
    merged = orders.merge(people, on="customer")
    by_region = merged.groupby("region").amount.agg(["sum", "count"])
    largest = merged.sort_values("amount", ascending=False).head(5)
    return by_region, largest


def host(frame) -> pd.DataFrame:
    return frame.to_pandas() if hasattr(frame, "to_pandas") else frame  # cuDF to pandas


if __name__ == "__main__":  # the workers are processes of their own: this guard keeps them from running it
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args()
    cudf = find_spec("cudf") is not None and find_spec("dask_cudf") is not None
    if not dask_gpu.discover().usable:
        dask.config.set({"gpu.simulate": 2})
    on_gpus = cudf and dask_gpu.discover().state is dask_gpu.State.AVAILABLE  # not simulated ones
    if not on_gpus:
        print(f"{'no GPU here' if cudf else 'cuDF and dask-cudf are not installed here'}: pandas partitions on "
              f"{'simulated ' if dask_gpu.discover().devices[0].simulated else ''}GPU workers")
    orders, people = tables(args.rows)

    with LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster), \
            dask.config.set({"dataframe.backend": "gpu" if on_gpus else "pandas"}):
        frames = [dd.from_pandas(f, npartitions=args.partitions) for f in (orders, people)]
        if on_gpus:
            frames = [f.to_backend("gpu") for f in frames]  # cuDF partitions
        by_region, largest = dask.compute(*pipeline(*frames))
        want_region, want_largest = pipeline(orders, people)

        by_region = host(by_region).sort_index()
        print(by_region.to_string(float_format="{:.2f}".format))
        right = (np.allclose(by_region["sum"], want_region["sum"].sort_index())
                 and (by_region["count"].to_numpy() == want_region["count"].sort_index().to_numpy()).all()
                 and np.allclose(host(largest)["amount"], want_largest["amount"]))
        print(f"{args.rows:,} orders in {args.partitions} partitions: merge, groupby, sort "
              f"{'match pandas' if right else 'DIFFER from pandas'}")
