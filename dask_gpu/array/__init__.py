"""GPU arrays: the ``gpu`` backend of dask.array."""
