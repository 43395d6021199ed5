"""GPU dataframes: cuDF-backed Dask collections on GPU workers, and the shuffle that keeps them on the device."""
