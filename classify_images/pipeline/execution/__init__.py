"""Where the work runs: this machine (joblib) or a Dask cluster, numba kernels compiled once, progress bars."""
