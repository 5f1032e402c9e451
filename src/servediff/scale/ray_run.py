"""`servediff run PLAN --ray ADDRESS`: a plan's loads on a Ray cluster, a placement per comparison.

A placement is a comparison's Ray placement group and the node it landed on; the machine
itself is a `room.Room`, named in every launch the placement runs.

Each comparison (a group of arms, `plan.comparisons`) gets a placement group
of one bundle (the CPU slots and GPUs one load needs) on one node: its loads
run there one after another in the plan's counterbalanced order, while other
comparisons run on their nodes at the same time. A cost load never shares its
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
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from servediff import atomic
from servediff.bundle import write_manifest
from servediff.errors import InputError, ServediffError
from servediff.evidence import Launch, Phase, load_name
from servediff.plan import lock
from servediff.policy import LoadTurns
from servediff.runner import Runner
from servediff.scale import worker
from servediff.scale.worker import LoadJob, LoadResult


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


def node_allows(phase: Phase, placement: Placement, placements: list[Placement]) -> bool:
    """Whether a load of `phase` may start in `placement` now: a cost load only on a node
    where nothing else runs, and nothing beside a running cost load. A cost load waiting for its
    node holds back other drift loads there, so that the node empties for it (else a busy
    neighbour would start load after load and push every cost load to the end)."""
    others = [x for x in placements if x is not placement and x.node == placement.node]
    running = [x for x in others if x.ref is not None]
    if phase == "cost":
        return not running
    return not any(x.job is not None and x.job.phase == "cost" for x in running) and \
        not any(x.waiting() == "cost" for x in others)


@dataclass
class Placement:
    """One comparison: its arms, its loads still to run, its placement and what runs there."""

    arms: list[str]
    loads: deque[tuple[str, int, Phase]]
    group: Any = None  # the placement group
    node: str | None = None
    job: LoadJob | None = None
    ref: Any = None
    # the launches of the load at the head of `loads` (the policy's retry rule)
    turns: LoadTurns | None = None
    node_class: dict[str, float] = field(default_factory=dict)

    def waiting(self) -> Phase | None:
        """The phase of the load this placement waits to start (None: it runs one, or is
        done)."""
        return self.loads[0][2] if self.ref is None and self.loads else None


class RayRunner(Runner):
    """The runner with its loads measured by Ray workers; resume, lock and manifest as
    a local run."""

    address: str = "auto"

    def check_room(self) -> None:
        """A cluster run's rooms are its comparisons' nodes (one placement group each), and
        every launch names its node."""

    def run(self) -> None:
        # refused before anything is written: no Ray, no cluster, no node that fits
        self.ray = connect(self.address)
        scale = self.context.plan.scale
        check_resources(self.ray, scale.cpus_per_load, scale.gpus_per_load)
        super().run()

    def measure(self, pending: list[tuple[str, int, Phase]]) -> None:
        """Run the pending loads on the cluster: each comparison's in its own placement, in the
        schedule's order, the comparisons side by side."""
        context, plan, ray = self.context, self.context.plan, self.ray
        from ray.util.placement_group import placement_group, remove_placement_group

        scale = plan.scale
        self.run_id = f"{lock(plan, context.corpus).sha256[:12]}-{uuid.uuid4().hex[:8]}"
        self.remote_load = ray.remote(max_retries=0)(worker.run_load)
        self.remote_reap = ray.remote(max_retries=0, num_cpus=0)(worker.reap)
        placements = [Placement(arms=g, loads=deque(x for x in pending if x[0] in g))
                 for g in plan.groups()]
        placements = [placement for placement in placements if placement.loads]
        bundle = bundle_for(scale.cpus_per_load, scale.gpus_per_load)
        for placement in placements:
            placement.group = placement_group([bundle], strategy="STRICT_PACK")
        try:
            while any(placement.loads for placement in placements):
                for placement in placements:
                    self.dispatch(ray, placement, placements)
                refs = [placement.ref for placement in placements if placement.ref is not None]
                if not refs:
                    time.sleep(0.2)  # waiting for a placement
                    continue
                done, _ = ray.wait(refs, num_returns=1, timeout=1.0)
                for placement in placements:
                    if placement.ref is not None and placement.ref in done:
                        self.collect(ray, placement, bundle, placement_group,
                                     remove_placement_group)
        except BaseException as exc:
            # Ctrl-C, or a refusal (a busy machine) that ends the run: the other remote
            # loads are cancelled, their engines stopped and recorded, before it ends
            self.cancel(ray, placements, "interrupted: servediff was stopped (SIGINT or SIGTERM)"
                        if isinstance(exc, KeyboardInterrupt) else
                        f"cancelled: the run stopped ({exc})")
            raise
        finally:
            for placement in placements:
                if placement.group is not None:
                    remove_placement_group(placement.group)

    def dispatch(self, ray: Any, placement: Placement, placements: list[Placement]) -> None:
        """Start the placement's next load once Ray has placed its group and its node allows
        it."""
        from ray.util.placement_group import placement_group_table, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        while placement.ref is None and placement.loads:
            arm, load, phase = placement.loads[0]
            if placement.turns is None:
                placement.turns = self.policy.turns(arm, load, phase)
            todo = placement.turns.next()
            if todo is None:
                placement.loads.popleft()
                placement.turns = None
                if not placement.loads:  # a finished comparison gives its placement back
                    remove_placement_group(placement.group)
                    placement.group = None
                continue
            if placement.node is None:
                # the placement is ready once Ray has reserved its bundle on a node
                table = placement_group_table(placement.group)
                if table.get("state") != "CREATED":
                    return
                placement.node = table["bundles_to_node_id"][0]
                # its class, read while the node is alive: a lost node's placement moves to one
                # of the same GPU model
                placement.node_class = placement.node_class or self.node_class(ray, placement.node)
            if not node_allows(phase, placement, placements):
                return  # a cost load has its node to itself
            placement.job = LoadJob(plan=self.context.plan, corpus=self.context.corpus, arm=arm,
                               load=load, phase=phase, todo=todo,
                               base_dir=str(self.base_dir.resolve()), run_id=self.run_id,
                               seeds=self.seeds(arm, load, phase, todo))
            self.context.observer.load_starting(
                arm, load, len(self.context.load_record(arm, load, phase).launches) + 1, phase)
            scale = self.context.plan.scale
            placement.ref = self.remote_load.options(
                num_cpus=scale.cpus_per_load, num_gpus=scale.gpus_per_load,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement.group, placement_group_bundle_index=0)).remote(placement.job)

    def seeds(self, arm: str, load: int, phase: Phase, todo: list[Any]) -> dict[str, bytes]:
        """What the bundle holds of the load so far, for the worker's scratch directory."""
        return worker.collect(self.layout.root, load_name(arm, load, phase), todo)

    def collect(self, ray: Any, placement: Placement, bundle: dict[str, float],
                placement_group: Any,
                remove_placement_group: Any) -> None:
        """Merge a finished (or lost) load into the bundle and decide what runs next."""
        job, ref = placement.job, placement.ref
        assert job is not None
        placement.ref = placement.job = None
        error: ServediffError | None = None
        try:
            result: LoadResult = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, ServediffError):
                error = cause
            result = self.lost(ray, placement, job, f"the load's worker failed: {cause!r}")
        except ray.exceptions.RayError as exc:
            result = self.lost(ray, placement, job, "the Ray worker running this load was lost "
                               f"({type(exc).__name__})")
            if result.node == "" and placement.node is not None:
                # the node is gone: a new placement of the same class for the rest
                remove_placement_group(placement.group)
                placement.group = placement_group([{**bundle, **placement.node_class}],
                                             strategy="STRICT_PACK")
                placement.node = None
        self.merge(job, result)
        if error is not None:
            raise error
        assert placement.turns is not None
        placement.turns.ended()

    def lost(self, ray: Any, placement: Placement, job: LoadJob, why: str) -> LoadResult:
        """Stop and record what is left of the load on its node; an empty result with no
        node when the node cannot be reached."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.context.observer.note(f"{job.name}: {why}")
        if placement.node is None:
            return LoadResult(files={}, node="")
        try:
            found: LoadResult = ray.get(self.remote_reap.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(placement.node, soft=False)
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
                host="", port=0, pid=0, started_at=now, finished_at=now, node=placement.node,
                error=f"{why}; its node cannot be reached, so its engine could not be "
                      "checked or stopped by servediff"))
            self.context.write_load(record)
            return LoadResult(files={}, node="")

    @staticmethod
    def node_class(ray: Any, node: str) -> dict[str, float]:
        """The GPU model of a node as a Ray resource (nodes with GPUs carry one)."""
        for n in ray.nodes():
            if n["NodeID"] == node:
                return {k: 0.001 for k in n["Resources"] if k.startswith("accelerator_type:")}
        return {}

    def merge(self, job: LoadJob, result: LoadResult) -> None:
        """The driver alone writes the bundle: the load's files from the worker, atomically;
        partial files the worker removed (a sweep that finished) go here too."""
        root = self.layout.root
        for ref, data in sorted(result.files.items()):
            path = root / ref
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_bytes(path, data)
        if result.files:
            for path in (p for cell in job.todo for p in self.layout.partials(cell.name)):
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

    def cancel(self, ray: Any, placements: list[Placement], why: str) -> None:
        """Ctrl-C: cancel the remote loads, then stop and record their engines."""
        running = [placement for placement in placements if placement.ref is not None]
        for placement in running:
            ray.cancel(placement.ref, force=True)
        for placement in running:
            assert placement.job is not None
            self.merge(placement.job, self.lost(ray, placement, placement.job, why))

