"""`servediff run PLAN --ray ADDRESS`: the runner's placement on a Ray cluster (`OnRay`).

The runner's one load loop (runner.py) runs here too; only where a launch runs differs.
Each comparison (a group of arms, `plan.comparisons`) is a lane with a Ray placement
group of one bundle (the CPU slots and GPUs one load needs) on one node: its loads
run there one after another in the plan's counterbalanced order, while other
comparisons run on their nodes at the same time. The machine itself is a `room.Room`,
named in every launch the group runs. A cost load never shares its
node with another running load: the driver holds it back until its node is
free, and starts nothing else there while it runs. A worker runs one load
with the same code as a local run (`runner.measure_load`, in worker.py) and
returns its files; the driver alone writes the bundle, as atomically as a
local run, and resumes the same way. A worker or node lost mid-load is a
launch that ended: what is left of its engine is stopped and recorded on that
node, and the load runs again, on a node of the same GPU model if the node is
gone. Ctrl-C cancels the remote loads, stops their engines and records them.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servediff import atomic
from servediff.bundle import write_manifest
from servediff.context import RunContext
from servediff.errors import InputError, ServediffError
from servediff.evidence import INTERRUPTED, Launch, Phase, load_name
from servediff.plan import Plan, lock
from servediff.runner import Lane, LoadKey, Measuring
from servediff.scale import worker
from servediff.scale.worker import LoadJob, LoadResult
from servediff.schedule import CellSpec


def connect(address: str) -> Any:
    """ray, initialised against `address` ("auto": the cluster this machine belongs to,
    else a new local one); a clear refusal when Ray is missing or nothing answers."""
    try:
        import ray
    except ImportError:
        raise InputError("--ray: Ray is not installed here; install it with "
                         "pip install 'servediff[ray]'") from None
    target = os.environ.get("RAY_ADDRESS") if address == "auto" else address
    if target and target != "auto":
        reachable(target)
    if not ray.is_initialized():
        try:
            ray.init(address=None if address == "auto" else address,
                     include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InputError(f"--ray {address}: no Ray cluster answers there ({exc})"
                             ) from None
    return ray


def reachable(address: str, timeout_s: float = 10.0) -> None:
    """Refuse an address nothing answers at (ray.init would retry for minutes)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"--ray {address}: expected auto, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise InputError(f"--ray {address}: no Ray cluster answers there "
                         f"({exc.strerror or exc})") from None


def bundle_for(cpus: float, gpus: float) -> dict[str, float]:
    return {"CPU": cpus, **({"GPU": gpus} if gpus else {})}


def check_resources(ray: Any, cpus: float, gpus: float) -> None:
    """Exit 2 when no node has what one load asks for."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    fits = [n for n in nodes if n["Resources"].get("CPU", 0) >= cpus
            and n["Resources"].get("GPU", 0) >= gpus]
    if not fits:
        have = "; ".join(f"{n['NodeManagerAddress']}: {n['Resources'].get('CPU', 0):g} CPU, "
                         f"{n['Resources'].get('GPU', 0):g} GPU" for n in nodes) or "no node"
        raise InputError(f"scale: a load asks for {cpus:g} CPU and {gpus:g} GPU "
                         f"(scale.cpus_per_load, scale.gpus_per_load); no node of the "
                         f"cluster has that ({have})")


def node_allows(phase: Phase, group: Group, groups: list[Group]) -> bool:
    """Whether a load of `phase` may start in `group` now: a cost load only on a node where
    nothing else runs, and nothing beside a running cost load. A cost load waiting for its
    node holds back other drift loads there, so that the node empties for it (else a busy
    neighbour would start load after load and push every cost load to the end)."""
    others = [x for x in groups if x is not group and x.node == group.node]
    running = [x for x in others if x.ref is not None]
    if phase == "cost":
        return not running
    return not any(x.job is not None and x.job.phase == "cost" for x in running) and \
        not any(x.lane.waiting() == "cost" for x in others)


@dataclass
class Group:
    """One comparison's lane on the cluster: its placement group, the node it landed on
    and the load running there."""

    lane: Lane
    pg: Any = None  # the Ray placement group
    node: str | None = None
    job: LoadJob | None = None
    ref: Any = None
    node_class: dict[str, float] = field(default_factory=dict)


class OnRay:
    """The runner's placement on a Ray cluster: a lane per comparison, each in a placement
    group of one bundle (the CPU slots and GPUs one load needs) on one node. A run's rooms
    are its comparisons' nodes, and every launch names its node."""

    def __init__(self, address: str) -> None:
        self.address = address

    def open(self, context: RunContext) -> None:
        # no Ray, no cluster, no node that fits
        ray = connect(self.address)
        scale = context.plan.scale
        check_resources(ray, scale.cpus_per_load, scale.gpus_per_load)

    def lanes(self, plan: Plan) -> list[list[str]]:
        return plan.groups()

    @contextmanager
    def measuring(self, context: RunContext, base_dir: Path,
                  lanes: list[Lane]) -> Iterator[Measuring]:
        from ray.util.placement_group import remove_placement_group

        measuring = RayMeasuring(context, base_dir, lanes)
        try:
            yield measuring
        except BaseException as exc:
            # Ctrl-C, or a refusal (a busy machine) that ends the run: the other remote
            # loads are cancelled, their engines stopped and recorded, before it ends
            measuring.cancel(INTERRUPTED if isinstance(exc, KeyboardInterrupt) else
                             f"cancelled: the run stopped ({exc})")
            raise
        finally:
            for group in measuring.groups:
                if group.pg is not None:
                    remove_placement_group(group.pg)


class RayMeasuring:
    """The lanes at work on the cluster: each load a Ray task in its lane's placement group,
    its files merged into the bundle by this driver alone."""

    def __init__(self, context: RunContext, base_dir: Path, lanes: list[Lane]) -> None:
        import ray
        from ray.util.placement_group import placement_group

        self.ray: Any = ray
        self.context, self.base_dir = context, base_dir
        scale = context.plan.scale
        self.run_id = f"{lock(context.plan, context.corpus).sha256[:12]}-{uuid.uuid4().hex[:8]}"
        self.remote_load = ray.remote(max_retries=0)(worker.run_load)
        self.remote_reap = ray.remote(max_retries=0, num_cpus=0)(worker.reap)
        self.bundle = bundle_for(scale.cpus_per_load, scale.gpus_per_load)
        self.groups = [Group(lane, placement_group([self.bundle], strategy="STRICT_PACK"))
                       for lane in lanes]

    def start(self, lane: Lane, key: LoadKey, todo: list[CellSpec]) -> bool:
        """Start the lane's next launch once Ray has placed its group and its node allows
        it."""
        from ray.util.placement_group import placement_group_table
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        group = next(x for x in self.groups if x.lane is lane)
        if group.node is None:
            # the group is ready once Ray has reserved its bundle on a node
            table = placement_group_table(group.pg)
            if table.get("state") != "CREATED":
                return False
            group.node = table["bundles_to_node_id"][0]
            # its class, read while the node is alive: a lost node's group moves to one of
            # the same GPU model
            group.node_class = group.node_class or self.node_class(group.node)
        arm, load, phase = key
        if not node_allows(phase, group, self.groups):
            return False  # a cost load has its node to itself
        context = self.context
        group.job = LoadJob(plan=context.plan, corpus=context.corpus, arm=arm, load=load,
                            phase=phase, todo=todo, base_dir=str(self.base_dir.resolve()),
                            run_id=self.run_id,
                            seeds=worker.collect(context.layout.root,
                                                 load_name(arm, load, phase), todo))
        context.observer.load_starting(
            arm, load, len(context.load_record(arm, load, phase).launches) + 1, phase)
        scale = context.plan.scale
        group.ref = self.remote_load.options(
            num_cpus=scale.cpus_per_load, num_gpus=scale.gpus_per_load,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                group.pg, placement_group_bundle_index=0)).remote(group.job)
        return True

    def ended(self) -> list[Lane]:
        """Wait a moment for a load to end; merge those that did. A finished comparison
        gives its placement group back."""
        from ray.util.placement_group import remove_placement_group

        for group in self.groups:
            if not group.lane.loads and group.pg is not None:
                remove_placement_group(group.pg)
                group.pg = None
        refs = [group.ref for group in self.groups if group.ref is not None]
        if not refs:
            time.sleep(0.2)  # waiting for a placement
            return []
        done, _ = self.ray.wait(refs, num_returns=1, timeout=1.0)
        ended = [group for group in self.groups if group.ref is not None and group.ref in done]
        for group in ended:
            self.collect(group)
        return [group.lane for group in ended]

    def collect(self, group: Group) -> None:
        """Merge a finished (or lost) load into the bundle; a lost node's group moves to
        a node of the same class."""
        from ray.util.placement_group import placement_group, remove_placement_group

        ray, job, ref = self.ray, group.job, group.ref
        assert job is not None
        group.ref = group.job = None
        error: ServediffError | None = None
        try:
            result: LoadResult = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, ServediffError):
                error = cause
            result = self.lost(group, job, f"the load's worker failed: {cause!r}")
        except ray.exceptions.RayError as exc:
            result = self.lost(group, job, "the Ray worker running this load was lost "
                               f"({type(exc).__name__})")
            if result.node == "" and group.node is not None:
                # the node is gone: a new placement group of the same class for the rest
                remove_placement_group(group.pg)
                group.pg = placement_group([{**self.bundle, **group.node_class}],
                                           strategy="STRICT_PACK")
                group.node = None
        self.merge(job, result)
        if error is not None:
            raise error

    def lost(self, group: Group, job: LoadJob, why: str) -> LoadResult:
        """Stop and record what is left of the load on its node; an empty result with no
        node when the node cannot be reached."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self.ray
        self.context.observer.note(f"{job.name}: {why}")
        if group.node is None:
            return LoadResult(files={}, node="")
        try:
            found: LoadResult = ray.get(self.remote_reap.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(group.node, soft=False)
            ).remote(job, why), timeout=300)
            return found
        except ray.exceptions.RayError as exc:
            self.context.observer.note(f"{job.name}: its node cannot be reached ({exc!r}); "
                                       "its engine could not be checked")
            # the launch is recorded here, since its own record went with the node
            record = self.context.load_record(job.arm, job.load, job.phase)
            now = time.time()
            record.launches.append(Launch(
                attempt=len(record.launches) + 1, command=[], env_diff={}, options={},
                host="", port=0, pid=0, started_at=now, finished_at=now, node=group.node,
                error=f"{why}; its node cannot be reached, so its engine could not be "
                      "checked or stopped by servediff"))
            self.context.write_load(record)
            return LoadResult(files={}, node="")

    def node_class(self, node: str) -> dict[str, float]:
        """The GPU model of a node as a Ray resource (nodes with GPUs carry one)."""
        for n in self.ray.nodes():
            if n["NodeID"] == node:
                return {k: 0.001 for k in n["Resources"] if k.startswith("accelerator_type:")}
        return {}

    def merge(self, job: LoadJob, result: LoadResult) -> None:
        """The driver alone writes the bundle: the load's files from the worker, atomically;
        partial files the worker removed (a sweep that finished) go here too."""
        layout = self.context.layout
        root = layout.root
        for ref, data in sorted(result.files.items()):
            path = root / ref
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_bytes(path, data)
        if result.files:
            for path in (p for cell in job.todo for p in layout.partials(cell.name)):
                if str(path.relative_to(root)) not in result.files:
                    path.unlink()
        write_manifest(root)
        observer = self.context.observer
        for note in result.notes:
            observer.note(note)
        record = self.context.load_record(job.arm, job.load, job.phase)
        if record.launches and record.launches[-1].seconds_to_ready is not None:
            observer.load_ready(job.arm, job.load, record.launches[-1].seconds_to_ready,
                                job.phase)
        for name, seconds in result.cells:
            observer.cell_finished(name, seconds)

    def cancel(self, why: str) -> None:
        """Ctrl-C: cancel the remote loads, then stop and record their engines."""
        running = [group for group in self.groups if group.ref is not None]
        for group in running:
            self.ray.cancel(group.ref, force=True)
        for group in running:
            assert group.job is not None
            self.merge(group.job, self.lost(group, group.job, why))
