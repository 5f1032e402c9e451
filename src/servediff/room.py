"""Which machine a launch ran on: its room.

A comparison is measured in one room. A host name alone does not say which
machine that is: machines started from one image share it (every lease of a
cloud GPU box may be called "vm"), so a run resumed on a new lease would mix
two machines' speed without a word. A room is therefore the host name, the
GPU models, and a fingerprint of what tells two machines apart: the systemd
machine id and the UUIDs of the GPUs that NVML sees. Both are stored only
hashed (the machine id is meant to stay private). The boot id is recorded
beside it, hashed too: it changes with every restart of the machine, which is
the same room.
"""

from __future__ import annotations

import contextlib
import hashlib
import socket
from dataclasses import dataclass
from pathlib import Path

from servediff import gpu
from servediff.conditions import gpu_models
from servediff.evidence import Launch

MACHINE_ID = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
SALT = b"servediff room\n"


def _read(path: Path) -> str | None:
    with contextlib.suppress(OSError, UnicodeDecodeError):
        return path.read_text(encoding="utf-8").strip() or None
    return None


def _hash(parts: list[str]) -> str:
    return hashlib.sha256(SALT + "\n".join(parts).encode()).hexdigest()[:16]


def fingerprint() -> str | None:
    """This machine's fingerprint (machine id and GPU UUIDs, hashed); None where neither
    can be read."""
    machine = next((x for x in map(_read, MACHINE_ID) if x), None)
    parts = ([f"machine {machine}"] if machine else []) + [f"gpu {u}" for u in gpu.uuids()]
    return _hash(parts) if parts else None


def boot() -> str | None:
    """This boot of the machine, hashed; None where the kernel does not say."""
    found = _read(BOOT_ID)
    return _hash([f"boot {found}"]) if found else None


@dataclass(frozen=True)
class Room:
    host: str | None
    gpu_models: tuple[str, ...]
    # None: not recorded (a bundle written before fingerprints) or nothing readable
    fingerprint: str | None = None

    def same(self, other: Room) -> bool:
        """The same machine as far as both records tell (a fingerprint that one of them
        lacks is no difference)."""
        return (self.host, self.gpu_models) == (other.host, other.gpu_models) and (
            None in (self.fingerprint, other.fingerprint)
            or self.fingerprint == other.fingerprint)

    def label(self, node: str | None = None) -> str:
        """"host #fingerprint (GPU models)", with the Ray node where one ran it."""
        gpus = ", ".join(self.gpu_models) or "no GPU"
        print_id = f" #{self.fingerprint[:8]}" if self.fingerprint else ""
        ray = f" (Ray node {node[:8]})" if node else ""
        return f"{self.host}{print_id}{ray} ({gpus})"


def here() -> Room:
    return Room(socket.gethostname(), tuple(gpu_models()), fingerprint())


def of(launch: Launch) -> Room:
    return Room(launch.machine, tuple(launch.gpu_models), launch.room_id)
