"""A plan of two independent comparisons, one after the other here against on a Ray
cluster with two slots: wall times side by side and their ratio.

The plan is the integration test's (tests/integration/test_ray.py): two comparisons of
two arms each on the embedded engine, 2 cold drift loads per arm, 4 texts scored and
repeated, one thread per engine. The cluster is two Ray nodes on this machine with one
CPU slot each (ray.cluster_utils.Cluster), started before the clock; the serial run
uses the same code without Ray. The model conversion is done before either clock.

    python benchmarks/ray_scale.py
"""

from __future__ import annotations

import sys
import tempfile
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray
from ray.cluster_utils import Cluster

from servediff import models
from servediff.plan import resolve_plan
from servediff.runner import Runner, SilentObserver
from servediff.scale.ray_run import OnRay
from tests.integration.test_ray import PLAN


def main() -> None:
    models.smollm2_dir(lambda message: None)
    plan, corpus = resolve_plan(tomllib.loads(PLAN), "two-rooms.toml", Path.cwd())
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.monotonic()
            Runner(plan, corpus, Path(tmp) / "serial", Path.cwd(), SilentObserver()).run()
            serial = time.monotonic() - t0
            runner = Runner(plan, corpus, Path(tmp) / "ray", Path.cwd(), SilentObserver(),
                            placement=OnRay(cluster.address))
            t0 = time.monotonic()
            runner.run()
            parallel = time.monotonic() - t0
    finally:
        ray.shutdown()  # the driver first: a cluster does not remove the node it talks to
        cluster.shutdown()
    loads = len(plan.arms) * plan.loads_per_arm
    print(f"plan: {len(plan.groups())} comparisons x 2 arms x {plan.loads_per_arm} drift "
          f"loads ({loads} loads), {len(corpus.texts)} texts")
    print(f"serial, one load at a time    {serial:7.1f} s")
    print(f"Ray, 2 nodes of 1 slot each   {parallel:7.1f} s")
    print(f"ratio serial / Ray            {serial / parallel:7.2f}")


if __name__ == "__main__":
    main()
