"""Running a plan's loads on a Ray cluster: the driver (ray_run.py) and what a worker runs
(worker.py). Ray is an optional extra: `pip install servediff[ray]`."""
