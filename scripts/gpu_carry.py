"""Carry an engine's wheels to a GPU machine that reaches no package registry.

The device machine has its own Python (3.12) and torch, and nothing downloadable; at
most 64 MiB travels per call, the working tree included, and files written outside the
repository copy survive between calls only while the machine stays warm (30 s). So an
engine travels as wheels, in folders small enough for one call each, sent back to back:

    here:    python3 scripts/gpu_carry.py fetch sglang-0.5.17      # hash-checked download
             python3 scripts/gpu_carry.py pack sglang-0.5.17 servediff-deps [--file F]
             (prints the exact sequence of device calls)
    device:  python3 scripts/gpu_carry.py stash .carry/NN           # one call per folder
             python3 scripts/gpu_carry.py install sglang-0.5.17 /root/engines/sglang

A wheel set is a manifest under scripts/carry/: one `name==version --hash=sha256:HEX` a
line, pip's own hash-checking format, resolved once against the device's packages (its
torch and the image's list) and committed. `lock` writes one from a list of pins. Wheels
larger than a folder are cut into pieces; `install` joins them, checks every wheel's
sha256 against the manifest, installs with `pip install --no-index --no-deps --target`,
and writes `servediff-carry.json` into the target: the set's name, the manifest's
sha256 and every package's version. servediff reads that file from the engine's
PYTHONPATH into each launch record, so a GPU bundle says exactly what served it.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "scripts" / "carry"
CACHE = ROOT / ".cache" / "gpu-wheels"
CARRY = ROOT / ".carry"
STASH = Path(os.environ.get("SERVEDIFF_STASH", "/root/stash"))
MIB = 1 << 20
# What travels in one call: the working tree and the carried folder together.
CALL_LIMIT = 64 * MIB
FOLDER_MAX = 60 * MIB
# Room left in each call for the tree to grow between packing and sending.
MARGIN = 3 * MIB
# The device's interpreter and platform: CPython 3.12 on manylinux x86_64.
PLATFORMS = ["manylinux_2_35_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64",
             "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64",
             "linux_x86_64", "any"]
LINE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)"
                  r" --hash=sha256:(?P<sha256>[0-9a-f]{64})$")
PIECE = re.compile(r"^(?P<file>.+)\.part(?P<n>\d{2})$")
REPACKED = ".tar.xz"


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    sha256: str

    @property
    def key(self) -> str:
        return normal(self.name)


def normal(name: str) -> str:
    """A distribution's name as wheel files and pip compare it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def manifest_path(wheel_set: str) -> Path:
    return MANIFESTS / f"{wheel_set}.txt"


def read_manifest(path: Path) -> list[Pin]:
    """The pins of a manifest; a line that is not a pin with its sha256 is an error that
    names the file and the line."""
    pins: list[Pin] = []
    seen: set[str] = set()
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = LINE.match(line)
        if m is None:
            raise SystemExit(f"{path}:{number}: expected `name==version "
                             f"--hash=sha256:<64 hex digits>`, got {line!r}")
        pin = Pin(m["name"], m["version"], m["sha256"])
        if pin.key in seen:
            raise SystemExit(f"{path}:{number}: {pin.name} is pinned twice")
        seen.add(pin.key)
        pins.append(pin)
    if not pins:
        raise SystemExit(f"{path}: no pins")
    return pins


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(MIB), b""):
            digest.update(block)
    return digest.hexdigest()


def wheel_name(filename: str) -> str:
    """The distribution name a wheel file is for."""
    return normal(filename.split("-", 1)[0])


def pip_download(requirements: list[str], dest: Path, hashes: bool) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "pip", "download", "-q", "--no-deps",
            "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
            "--abi", "cp312", "--abi", "abi3", "--abi", "none", "-d", str(dest)]
    for platform in PLATFORMS:
        args += ["--platform", platform]
    if hashes:
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
            fh.write("\n".join(requirements) + "\n")
        args += ["--require-hashes", "-r", fh.name]
    else:
        args += requirements
    subprocess.run(args, check=True)


def wheels_for(pins: list[Pin], folder: Path) -> dict[str, Path]:
    """Each pin's wheel in `folder`, by its sha256 (the manifest's, checked)."""
    by_name: dict[str, list[Path]] = {}
    for path in folder.glob("*.whl"):
        by_name.setdefault(wheel_name(path.name), []).append(path)
    out: dict[str, Path] = {}
    for pin in pins:
        match = [p for p in by_name.get(pin.key, []) if sha256(p) == pin.sha256]
        if not match:
            raise SystemExit(f"{folder}: no wheel of {pin.name}=={pin.version} with the "
                             f"manifest's sha256 {pin.sha256[:12]}...")
        out[pin.sha256] = match[0]
    return out


def lock(args: argparse.Namespace) -> None:
    """A manifest from a list of pins (name==version a line): download, hash, write."""
    pins = sorted({line.strip() for line in args.pins.read_text().splitlines()
                   if line.strip() and not line.startswith("#")}, key=str.lower)
    folder = CACHE / args.wheel_set
    pip_download(pins, folder, hashes=False)
    lines = [f"# {args.wheel_set}: wheels for the GPU machine (CPython 3.12, manylinux "
             "x86_64),", "# installed with pip install --no-index --no-deps --target DIR "
             "(scripts/gpu_carry.py)."]
    for comment in args.comment or []:
        lines.append(f"# {comment}")
    for pin in pins:
        name, version = pin.split("==")
        files = [p for p in folder.glob("*.whl") if wheel_name(p.name) == normal(name)
                 and f"-{version}-" in p.name]
        if len(files) != 1:
            raise SystemExit(f"{pin}: expected one wheel in {folder}, found {len(files)}")
        lines.append(f"{name}=={version} --hash=sha256:{sha256(files[0])}")
    manifest_path(args.wheel_set).parent.mkdir(parents=True, exist_ok=True)
    manifest_path(args.wheel_set).write_text("\n".join(lines) + "\n")
    print(f"wrote {manifest_path(args.wheel_set)} ({len(pins)} wheels)")


def fetch(args: argparse.Namespace) -> None:
    for wheel_set in args.wheel_sets:
        pins = read_manifest(manifest_path(wheel_set))
        folder = CACHE / wheel_set
        have = {sha256(p) for p in folder.glob("*.whl")} if folder.exists() else set()
        missing = [f"{p.name}=={p.version} --hash=sha256:{p.sha256}" for p in pins
                   if p.sha256 not in have]
        if missing:
            pip_download(missing, folder, hashes=True)
        wheels_for(pins, folder)
        print(f"{wheel_set}: {len(pins)} wheels in {folder}, every sha256 as the manifest "
              f"says ({sum(p.stat().st_size for p in folder.glob('*.whl')) / MIB:.0f} MiB)")


def tree_bytes() -> int:
    """Bytes of what travels with every call besides the carry: the tracked files and the
    untracked ones git does not ignore."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                          "--exclude-standard"], cwd=ROOT, check=True,
                         capture_output=True).stdout
    return sum((ROOT / f).stat().st_size for f in out.decode().split("\0")
               if f and (ROOT / f).is_file())


def folder_limit(tree: int) -> int:
    """The most one carry folder may hold: what a call leaves beside the tree, less a
    margin, and never more than FOLDER_MAX."""
    return min(FOLDER_MAX, CALL_LIMIT - tree - MARGIN)


def split(path: Path, piece: int, dest: Path) -> list[Path]:
    """`path` cut into pieces of at most `piece` bytes: NAME.part00, NAME.part01, ..."""
    out = []
    with path.open("rb") as fh:
        for n in range(100):
            block = fh.read(piece)
            if not block:
                break
            part = dest / f"{path.name}.part{n:02d}"
            part.write_bytes(block)
            out.append(part)
    return out


def layout(sizes: dict[str, int], limit: int) -> list[list[str]]:
    """Files into folders of at most `limit` bytes, largest first, each into the first
    folder it fits (every file is at most `limit`)."""
    folders: list[list[str]] = []
    room: list[int] = []
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        if sizes[name] > limit:
            raise ValueError(f"{name} is larger than a folder ({sizes[name]} > {limit})")
        for i, left in enumerate(room):
            if sizes[name] <= left:
                folders[i].append(name)
                room[i] -= sizes[name]
                break
        else:
            folders.append([name])
            room.append(limit - sizes[name])
    return folders


def pack(args: argparse.Namespace) -> None:
    limit = args.limit_mib * MIB if args.limit_mib else folder_limit(tree_bytes())
    if limit < 8 * MIB:
        raise SystemExit(f"only {limit / MIB:.1f} MiB per call is left beside the tree")
    shutil.rmtree(CARRY, ignore_errors=True)
    staging = CARRY / ".staging"
    staging.mkdir(parents=True)
    files: list[Path] = []
    for wheel_set in args.wheel_sets:
        pins = read_manifest(manifest_path(wheel_set))
        files += list(wheels_for(pins, CACHE / wheel_set).values())
    files += [Path(f) for f in args.file or []]
    repacked: dict[str, dict[str, str]] = {}
    for i, path in enumerate(files):
        if wheel_name(path.name) in {normal(n) for n in args.repack or []}:
            files[i], repacked[path.name] = repack(path)
    pieces: list[Path] = []
    for path in files:
        if path.stat().st_size > limit:
            pieces += split(path, limit, staging)
        else:
            pieces.append(path)
    sizes = {p.name: p.stat().st_size for p in pieces}
    where = {p.name: p for p in pieces}
    folders = layout(sizes, limit)
    calls = []
    for i, names in enumerate(folders, 1):
        folder = CARRY / f"{i:02d}"
        folder.mkdir()
        for name in names:
            src = where[name]
            if src.parent == staging:
                src.rename(folder / name)
            else:
                os.link(src, folder / name) if same_device(src, folder) else shutil.copy(
                    src, folder / name)
        calls.append({"carry": [f".carry/{i:02d}"],
                      "command": f"python3 scripts/gpu_carry.py stash .carry/{i:02d}"})
    shutil.rmtree(staging)
    if repacked:
        (CARRY / "01" / "repacked.json").write_text(json.dumps(repacked, indent=1) + "\n")
    total = sum(sizes.values())
    print(f"{len(files)} files, {total / MIB:.0f} MiB, in {len(folders)} folders of at most "
          f"{limit / MIB:.1f} MiB (tree {tree_bytes() / MIB:.1f} MiB beside each)")
    print("Device calls, back to back (the machine keeps /root/stash while warm, 30 s):")
    for n, call in enumerate(calls, 1):
        print(f"  {n:2d}. carry={json.dumps(call['carry'])} command={call['command']!r}")
    print("then: python3 scripts/gpu_carry.py install SET DEST  (one per wheel set)")
    (CARRY / "calls.json").write_text(json.dumps(calls, indent=1) + "\n")


def record_of(names: list[str]) -> str:
    """The name of a wheel's RECORD among its files."""
    found = [n for n in names if n.endswith(".dist-info/RECORD") and n.count("/") == 1]
    if len(found) != 1:
        raise SystemExit(f"expected one .dist-info/RECORD, found {found}")
    return found[0]


def repack(wheel: Path) -> tuple[Path, dict[str, str]]:
    """A wheel whose files compress far better with xz than in its zip (CUDA fatbins:
    sglang-kernel's 365 MiB wheel holds 1.1 GiB that xz takes to about a tenth): its files
    as WHEEL.tar.xz, and what the device checks them by. Cached by the wheel's sha256."""
    digest = sha256(wheel)
    out = CACHE / "repacked" / digest / (wheel.name + REPACKED)
    with zipfile.ZipFile(wheel) as zf:
        names = [i.filename for i in zf.infolist() if not i.is_dir()]
        record = hashlib.sha256(zf.read(record_of(names))).hexdigest()
        if not out.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
                zf.extractall(tmp)
                print(f"repacking {wheel.name} with xz (minutes for a large wheel)", flush=True)
                with (out.parent / "part").open("wb") as fh, subprocess.Popen(
                        ["tar", "--sort=name", "-cf", "-", "-C", tmp, "."],
                        stdout=subprocess.PIPE) as tar:
                    subprocess.run(["xz", "-T0", "-6", "-c"], stdin=tar.stdout, stdout=fh,
                                   check=True)
                if tar.returncode != 0:
                    raise SystemExit(f"tar of {wheel.name} failed")
            (out.parent / "part").rename(out)
    print(f"{wheel.name}: {wheel.stat().st_size / MIB:.0f} MiB as a wheel, "
          f"{out.stat().st_size / MIB:.0f} MiB repacked")
    return out, {"wheel_sha256": digest, "record_sha256": record}


def rebuild(packed: Path, expected: dict[str, str]) -> Path:
    """The wheel again, from its repacked files: the RECORD must be the one taken from the
    hash-checked wheel, and every file must be in it with its sha256 (nothing more, nothing
    less). The rebuilt zip's bytes differ from the original's; its contents do not."""
    wheel = packed.with_name(packed.name.removesuffix(REPACKED))
    with tempfile.TemporaryDirectory(dir=packed.parent) as tmp:
        with tarfile.open(packed, "r:xz") as tar:
            tar.extractall(tmp, filter="data")
        root = Path(tmp)
        names = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        record_name = record_of(names)
        record_bytes = (root / record_name).read_bytes()
        if hashlib.sha256(record_bytes).hexdigest() != expected["record_sha256"]:
            raise SystemExit(f"{packed.name}: its RECORD is not the wheel's")
        listed: dict[str, str] = {}
        for row in csv.reader(record_bytes.decode().splitlines()):
            if row and row[1]:
                algo, _, b64 = row[1].partition("=")
                if algo != "sha256":
                    raise SystemExit(f"{packed.name}: RECORD hashes {row[0]} with {algo}")
                listed[row[0]] = b64
        if set(names) - {record_name} != set(listed):
            raise SystemExit(f"{packed.name}: its files are not the ones its RECORD lists")
        for name, b64 in listed.items():
            digest = hashlib.sha256((root / name).read_bytes()).digest()
            if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != b64:
                raise SystemExit(f"{packed.name}: {name} differs from its RECORD")
        with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:
            for name in names:
                zf.write(root / name, name)
    packed.unlink()
    return wheel


def same_device(a: Path, b: Path) -> bool:
    return a.stat().st_dev == b.stat().st_dev


def stash(args: argparse.Namespace) -> None:
    STASH.mkdir(parents=True, exist_ok=True)
    for path in sorted(Path(args.folder).iterdir()):
        shutil.copy(path, STASH / path.name)
    have = sorted(STASH.iterdir())
    print(f"stash: {len(have)} files, {sum(p.stat().st_size for p in have) / MIB:.0f} MiB")


def join_pieces(folder: Path) -> None:
    """Every wheel cut into pieces in `folder`, put back together (pieces removed)."""
    groups: dict[str, list[tuple[int, Path]]] = {}
    for path in folder.iterdir():
        if m := PIECE.match(path.name):
            groups.setdefault(m["file"], []).append((int(m["n"]), path))
    for wheel, parts in groups.items():
        numbers = sorted(n for n, _ in parts)
        if numbers != list(range(len(numbers))):
            raise SystemExit(f"{wheel}: pieces {numbers} are not 0..{len(numbers) - 1}: "
                             "a carry call is missing")
        with (folder / wheel).open("wb") as out:
            for _, part in sorted(parts):
                with part.open("rb") as fh:
                    shutil.copyfileobj(fh, out, MIB)
        for _, part in parts:
            part.unlink()


def install(args: argparse.Namespace) -> None:
    path = manifest_path(args.wheel_set)
    pins = read_manifest(path)
    join_pieces(STASH)
    repacked_json = STASH / "repacked.json"
    repacked = json.loads(repacked_json.read_text()) if repacked_json.exists() else {}
    rebuilt: dict[str, Path] = {}
    for name, expected in repacked.items():
        packed = STASH / (name + REPACKED)
        if packed.exists():
            rebuilt[expected["wheel_sha256"]] = rebuild(packed, expected)
        elif (STASH / name).exists():
            rebuilt[expected["wheel_sha256"]] = STASH / name
    wheels = wheels_for([p for p in pins if p.sha256 not in rebuilt], STASH)
    wheels.update({p.sha256: rebuilt[p.sha256] for p in pins if p.sha256 in rebuilt})
    dest = Path(args.dest)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(dest),
                    *map(str, wheels.values())], check=True)
    record = {"wheel_set": args.wheel_set, "manifest_sha256": sha256(path),
              "packages": {p.name: p.version for p in pins},
              # rebuilt from their files, each checked against the wheel's own RECORD
              "repacked": sorted(n for n, e in repacked.items() if e["wheel_sha256"] in
                                 {p.sha256 for p in pins})}
    (dest / "servediff-carry.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"{args.wheel_set}: {len(pins)} wheels installed into {dest}, every sha256 "
          "checked against the manifest")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    p = verbs.add_parser("lock", help="here: a manifest from a list of name==version pins")
    p.add_argument("wheel_set")
    p.add_argument("pins", type=Path)
    p.add_argument("--comment", action="append")
    p.set_defaults(run=lock)
    p = verbs.add_parser("fetch", help="here: download the wheels, hash-checked")
    p.add_argument("wheel_sets", nargs="+")
    p.set_defaults(run=fetch)
    p = verbs.add_parser("pack", help="here: carry folders, and the calls that send them")
    p.add_argument("wheel_sets", nargs="+")
    p.add_argument("--file", action="append", help="another file to carry (a model)")
    p.add_argument("--repack", action="append", help="a wheel (by name) to carry as xz")
    p.add_argument("--limit-mib", type=float, help="folder size (default: what a call "
                   "leaves beside the working tree, at most 60 MiB)")
    p.set_defaults(run=pack)
    p = verbs.add_parser("stash", help="device: keep one carried folder")
    p.add_argument("folder")
    p.set_defaults(run=stash)
    p = verbs.add_parser("install", help="device: join, check and install one wheel set")
    p.add_argument("wheel_set")
    p.add_argument("dest")
    p.set_defaults(run=install)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
