"""GPU and CPU workers in one cluster: tasks that ask for the GPU resource run on GPU workers only.

    python examples/mixed_workers.py [--tasks 40] [--cpu-workers 1]

A LocalCUDACluster with ``cpu_workers=N`` runs a worker per GPU (``resources={"GPU": 1}``) and N workers
that see no GPU. ``client.compute(graph, resources={"GPU": 1})`` sends every task of a graph to GPU
workers; so does ``dask.annotate(resources={"GPU": 1})`` around the graph's making, computed with
``optimize_graph=False`` (dask's graph optimization fuses tasks and drops their annotations).
``client.map(..., workers=[...])`` sends tasks to the CPU workers. Without a GPU the GPU workers are
simulated, and a line says so.
"""

import argparse
import collections
import os

import dask
import dask.bag as db
from distributed import Client, get_worker

import dask_gpu
from dask_gpu import LocalCUDACluster


def where(i: int) -> tuple[str, int, str]:
    """Which worker ran this task, its square, and the GPUs that worker sees."""
    return get_worker().name, i * i, os.environ.get("CUDA_VISIBLE_DEVICES", "")


if __name__ == "__main__":  # the workers are processes of their own: this guard keeps them from running it
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--cpu-workers", type=int, default=1)
    args = parser.parse_args()
    if not dask_gpu.discover().usable:
        dask.config.set({"gpu.simulate": 2})
        print("no GPU here: 2 simulated GPU workers (DASK_GPU__SIMULATE=N chooses how many)")

    with LocalCUDACluster(cpu_workers=args.cpu_workers, dashboard_address=False) as cluster, \
            Client(cluster) as client:
        squares = db.from_sequence(range(args.tasks), npartitions=args.tasks).map(where)
        by_compute = client.compute(squares, resources={"GPU": 1}).result()  # every task of the graph
        with dask.annotate(resources={"GPU": 1}):
            annotated = db.from_sequence(range(args.tasks), npartitions=args.tasks).map(where)
        by_annotation = annotated.compute(optimize_graph=False)  # fusing would drop the annotations
        cpu_names = [f"cpu-{i}" for i in range(args.cpu_workers)]
        on_cpus = client.gather(client.map(where, range(args.tasks), workers=cpu_names))

        runs = [("compute(resources=GPU)", by_compute), ("annotate(resources=GPU)", by_annotation),
                ("map(workers=cpu-*)", on_cpus)]
        for label, ran in runs:
            count = collections.Counter(name for name, _, _ in ran)
            seen = sorted({visible or "none" for _, _, visible in ran})
            right = [square for _, square, _ in ran] == [i * i for i in range(args.tasks)]
            print(f"{label} tasks ran on {dict(sorted(count.items()))}, seeing GPUs {seen}; "
                  f"results {'right' if right else 'WRONG'}")
