"""The checkpoint manifest and the commit rule: a checkpoint exists once its manifest does.

Layout: `<root>/step-<10 digits>/shard-<rank>-of-<world>.safetensors` and `manifest.json`. The
manifest is written (temp, fsync, rename, directory fsync) only after every shard is durable, so
a crash at any moment leaves either a committed checkpoint or a directory without a manifest, which
`committed` ignores. `committed` also checks that the manifest's step is its directory's, that
every listed shard has its recorded size, and skips a checkpoint marked corrupt (`corrupt.json`);
a committed checkpoint refused here is marked too (see `corrupt`). The full SHA-256 check is
`verify` (on load, or by `latest_committed`).

A manifest read back (from storage or a peer) is hostile until `from_json` has checked every
field: shard files relative and inside the checkpoint, dtypes from a fixed list, shapes of
non-negative integers, pieces that tile each tensor exactly and fit in their shard's size; and
damaged until its bytes are the canonical JSON whose SHA-256 it carries (`manifest_sha256`).
"""

import hashlib
import stat
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shipyard.checkpoint.corrupt import CORRUPT, CorruptCheckpoint, mark_corrupt, marked_problem
from shipyard.checkpoint.fields import MAX_INT, Fields, decode, kind_of
from shipyard.checkpoint.plan import Piece, TensorMeta
from shipyard.checkpoint.safetensors_io import DTYPE_NAMES, FileDigest
from shipyard.durable import write_atomic
from shipyard.errors import IntegrityError, InvalidInput, NotFound, StorageError
from shipyard.hashing import canonical_json

FORMAT = 2  # 1 + `manifest_sha256`
LEGACY_FORMAT = 1  # written before manifests carried a digest: read, with nothing to check it by
DIGEST = "manifest_sha256"
KIND = "shipyard-checkpoint"
MANIFEST = "manifest.json"
_PREFIX = "step-"

# Bounds on what a manifest may claim: generous for any real run, small enough that sizes stay
# exact integers and a hostile manifest cannot make the loader allocate or recurse without limit.
MAX_MANIFEST_BYTES = 1 << 30
MAX_WORLD_SIZE = 1 << 20
MAX_NDIM = 64
MAX_BYTES = MAX_INT  # of one tensor or one shard
MAX_SKELETON_DEPTH = 128
MAX_NAME_BYTES = 255  # of one component of a shard's path
SAFETENSORS_PREFIX = 8  # a shard starts with its header length, then the header, then the data


@dataclass(frozen=True)
class ShardRecord:
    file: str
    rank: int
    digest: FileDigest


@dataclass(frozen=True)
class CheckpointManifest:
    """Everything needed to load and audit one checkpoint (format version `FORMAT`)."""

    step: int
    world_size: int
    shards: list[ShardRecord]
    tensors: list[TensorMeta]
    pieces: list[Piece]
    skeleton: dict[str, Any]
    rng: list[dict[str, Any]]  # per saving rank
    loader: dict[str, Any] | None = None
    config_hash: str | None = None
    code_version: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return seal(
            {
                "format": FORMAT,
                "kind": KIND,
                "step": self.step,
                "world_size": self.world_size,
                "shards": [
                    {
                        "file": s.file,
                        "rank": s.rank,
                        "size": s.digest.size,
                        "sha256": s.digest.sha256,
                        **({"crc32": list(s.digest.crc32)} if s.digest.crc32 else {}),
                    }
                    for s in self.shards
                ],
                "tensors": [
                    {"path": t.path, "dtype": str(t.dtype).removeprefix("torch."), "shape": t.shape}
                    for t in self.tensors
                ],
                "pieces": [[p.path, p.start, p.stop, p.rank] for p in self.pieces],
                "skeleton": self.skeleton,
                "rng": self.rng,
                "loader": self.loader,
                "config_hash": self.config_hash,
                "code_version": self.code_version,
                "metadata": self.metadata,
            }
        )

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> "CheckpointManifest":
        """Parse and validate manifest bytes from storage or a peer; `where` names their source.

        Every field is checked here, once: anything else raises `InvalidInput` naming `where`
        and the field, so the loaders downstream can trust what they are given. Then bytes that
        are not what the manifest's own digest covers raise `ManifestDamaged` (format 2).
        """
        data, f = decode(raw, where), Fields(where)
        manifest = _parse(data, f)
        if data["format"] == FORMAT:  # fields first: a hostile manifest is named by its field
            _check_digest(raw, data, f)
        return manifest


class ManifestDamaged(IntegrityError):
    """Manifest bytes that are not the canonical JSON their own digest covers."""


def seal(body: dict[str, Any]) -> bytes:
    """The manifest's bytes: canonical JSON of `body` with the SHA-256 of that JSON without its
    digest field (any digest `body` holds is replaced)."""
    body = {k: v for k, v in body.items() if k != DIGEST}
    digest = hashlib.sha256(canonical_json(body)).hexdigest()
    return canonical_json({**body, DIGEST: digest})


def _check_digest(raw: bytes, data: dict[str, Any], f: Fields) -> None:
    """Any change to the bytes changes either the parsed value (and so its digest) or, where it
    parses the same (`1e5`/`1E5`, a duplicated key), the canonical form: both are refused."""
    claimed = f.text(f.get(data, DIGEST, ""), DIGEST)
    body = {k: v for k, v in data.items() if k != DIGEST}
    actual = hashlib.sha256(canonical_json(body)).hexdigest()
    if claimed != actual:
        raise ManifestDamaged(
            f"{f.where}: its SHA-256 is {actual}, its field {DIGEST} says {claimed[:80]!r}: "
            "the manifest was altered after it was written"
        )
    if canonical_json(data) != raw:
        raise ManifestDamaged(
            f"{f.where}: not the canonical JSON its {DIGEST} covers: its bytes were altered"
        )


@dataclass(frozen=True)
class Committed:
    """A committed checkpoint on storage."""

    path: Path
    manifest: CheckpointManifest

    @property
    def step(self) -> int:
        return self.manifest.step


def step_dir(root: Path, step: int) -> Path:
    return root / f"{_PREFIX}{step:010d}"


def shard_name(rank: int, world_size: int) -> str:
    return f"shard-{rank:05d}-of-{world_size:05d}.safetensors"


def commit(directory: Path, manifest: CheckpointManifest) -> Committed:
    write_atomic(directory / MANIFEST, manifest.to_json())
    return Committed(directory, manifest)


def read_committed(directory: Path) -> Committed:
    """The committed checkpoint in `directory`, or why there is none: NotFound (no manifest),
    StorageError (unreadable), or a refusal that marks it corrupt: InvalidInput (a manifest or
    shard path refused), IntegrityError (a damaged manifest, a step not its directory's, a
    shard missing or of the wrong size), or IntegrityError if it was marked corrupt before."""
    path = directory / MANIFEST
    raw = None
    try:
        info = path.stat()
        if (directory / CORRUPT).exists():
            raise IntegrityError(
                f"{directory} is marked corrupt, it is never loaded ({CORRUPT}: "
                f"{marked_problem(directory)})"
            )
        if not stat.S_ISREG(info.st_mode):
            raise InvalidInput(f"{path} is not a regular file")
        if info.st_size > MAX_MANIFEST_BYTES:
            raise InvalidInput(f"{path}: {info.st_size} bytes, more than {MAX_MANIFEST_BYTES}")
        raw = path.read_bytes()
        manifest = CheckpointManifest.from_json(raw, str(path))
        _check_placement(directory, manifest)
    except FileNotFoundError:
        raise NotFound(f"no committed checkpoint in {directory} ({MANIFEST} is missing)") from None
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc.strerror}") from None
    except CorruptCheckpoint as exc:
        _refuse(directory, raw, exc)
        raise
    except ManifestDamaged as exc:
        _refuse(directory, raw, _corrupt(directory, path, str(exc), "manifest-digest"))
        raise
    except InvalidInput as exc:
        _refuse(directory, raw, _corrupt(directory, path, str(exc), "manifest-invalid"))
        raise
    return Committed(directory, manifest)


def _check_placement(directory: Path, manifest: CheckpointManifest) -> None:
    """The manifest's step is its directory's, and every shard it lists is there, whole."""
    path = directory / MANIFEST
    named = _dir_step(directory)
    if named is not None and manifest.step != named:
        raise _corrupt(
            directory,
            path,
            f"says step {manifest.step}, in the directory of step {named}",
            "step-mismatch",
        )
    for shard in manifest.shards:
        file = shard_path(directory, shard.file)
        if not file.is_file() or file.stat().st_size != shard.digest.size:
            raise CorruptCheckpoint(
                manifest.step,
                str(file),
                None,
                f"the shard of rank {shard.rank} is missing or not the {shard.digest.size} bytes "
                f"{path} records",
                "shard-missing",
            )


def _dir_step(directory: Path) -> int | None:
    """The step a checkpoint directory's name says (None: not named `step-<digits>`)."""
    suffix = directory.name.removeprefix(_PREFIX)
    digits = directory.name.startswith(_PREFIX) and suffix.isascii() and suffix.isdigit()
    return int(suffix) if digits else None


def _corrupt(directory: Path, path: Path, problem: str, reason: str) -> CorruptCheckpoint:
    step = _dir_step(directory)
    return CorruptCheckpoint(-1 if step is None else step, str(path), None, problem, reason)


def _refuse(directory: Path, raw: bytes | None, error: CorruptCheckpoint) -> None:
    """Mark a refused checkpoint, unless its manifest changed meanwhile: a re-save of the step
    (which removes the manifest first) or retention deleting it are not damage."""
    try:
        unchanged = raw is None or (directory / MANIFEST).read_bytes() == raw
    except OSError:
        return
    if unchanged:
        mark_corrupt(directory, error)


def open_committed(directory: Path) -> Committed | None:
    """The checkpoint in `directory` if it is committed, whole and valid, else None."""
    try:
        return read_committed(directory)
    except (NotFound, InvalidInput, IntegrityError):
        return None


def shard_path(directory: Path, name: str) -> Path:
    """`directory / name` with symlinks resolved; InvalidInput unless it stays inside `directory`.

    `name` already passed `from_json` (relative, no `..`), so only a symlink can lead outside.
    """
    try:
        base = directory.resolve()
        path = (base / name).resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        raise InvalidInput(
            f"{directory / MANIFEST}: shard {name!r} does not resolve: {exc}"
        ) from None
    if base not in path.parents:
        raise InvalidInput(
            f"{directory / MANIFEST}: shard {name!r} resolves to {path}, outside the checkpoint"
        )
    return path


def step_dirs(root: Path) -> list[tuple[int, Path]]:
    """(step, directory) of every checkpoint directory under `root`, committed or not, by step."""
    found = []
    for path in root.glob(f"{_PREFIX}*") if root.is_dir() else []:
        step = _dir_step(path)
        if step is not None and path.is_dir():
            found.append((step, path))
    return sorted(found)


def committed(root: Path) -> list[Committed]:
    """Every committed, whole checkpoint under `root`, oldest first (sizes checked, not hashes)."""
    return [c for _, path in step_dirs(root) if (c := open_committed(path)) is not None]


# Parsing: every check of a manifest read back lives below, and raises InvalidInput naming the
# manifest and the field.


def _parse(data: Any, f: Fields) -> CheckpointManifest:
    top = f.obj(data, "(top level)")
    version = f.get(top, "format", "")
    if type(version) is not int or version not in (LEGACY_FORMAT, FORMAT):
        f.fail(
            "format",
            f"checkpoint format {version!r} is unknown (this reader knows {LEGACY_FORMAT} and "
            f"{FORMAT})",
        )
    if f.get(top, "kind", "") != KIND:
        f.fail("kind", f"expected {KIND!r}, got {top['kind']!r}")
    world = f.integer(f.get(top, "world_size", ""), "world_size", 1, MAX_WORLD_SIZE)
    shards = _shards(f, f.items(f.get(top, "shards", ""), "shards"), world)
    tensors = _tensors(f, f.items(f.get(top, "tensors", ""), "tensors"))
    pieces = _pieces(f, f.items(f.get(top, "pieces", ""), "pieces"), tensors, world)
    _check_fit(f, shards, tensors, pieces)
    paths = {t.path for t in tensors}
    skeleton = f.obj(f.get(top, "skeleton", ""), "skeleton")
    _skeleton(f, skeleton, paths, "skeleton", 0)
    rng = f.items(f.get(top, "rng", ""), "rng", world)
    for rank, state in enumerate(rng):
        f.obj(state, f"rng[{rank}]")
    loader = top.get("loader")
    return CheckpointManifest(
        step=f.integer(f.get(top, "step", ""), "step"),
        world_size=world,
        shards=shards,
        tensors=tensors,
        pieces=pieces,
        skeleton=skeleton,
        rng=rng,
        loader=None if loader is None else f.obj(loader, "loader"),
        config_hash=f.optional_text(top.get("config_hash"), "config_hash"),
        code_version=f.optional_text(top.get("code_version"), "code_version"),
        metadata=f.obj(top.get("metadata", {}), "metadata"),
    )


def _shards(f: Fields, items: list[Any], world: int) -> list[ShardRecord]:
    shards = []
    for i, item in enumerate(items):
        name = f"shards[{i}]"
        obj = f.obj(item, name)
        digest = f.text(f.get(obj, "sha256", name), f"{name}.sha256")
        if len(digest) != 64 or digest.strip("0123456789abcdef"):
            f.fail(f"{name}.sha256", f"expected 64 lowercase hex digits, got {digest[:80]!r}")
        crcs = f.items(obj.get("crc32", []), f"{name}.crc32")
        shards.append(
            ShardRecord(
                _relative_path(f, f.get(obj, "file", name), f"{name}.file"),
                f.integer(f.get(obj, "rank", name), f"{name}.rank", 0, world - 1),
                FileDigest(
                    f.integer(f.get(obj, "size", name), f"{name}.size"),
                    digest,
                    tuple(
                        f.integer(c, f"{name}.crc32[{j}]", 0, 0xFFFFFFFF)
                        for j, c in enumerate(crcs)
                    ),
                ),
            )
        )
    if sorted(s.rank for s in shards) != list(range(world)):
        f.fail("shards", f"expected one shard for each of the {world} ranks")
    if len({s.file for s in shards}) != len(shards):
        f.fail("shards", "two shards name the same file")
    return shards


def _relative_path(f: Fields, value: Any, name: str) -> str:
    """A path that cannot leave the checkpoint by its spelling (symlinks: `shard_path`)."""
    text = f.text(value, name)
    try:
        parts = text.encode().split(b"/")
    except UnicodeEncodeError:
        f.fail(name, f"{text!r} is not valid UTF-8")
    if not text or text.startswith("/") or "\0" in text:
        f.fail(name, f"{text[:300]!r} must be a relative path inside the checkpoint")
    for part in parts:
        if part in (b"", b".", b"..") or len(part) > MAX_NAME_BYTES:
            f.fail(name, f"{text[:300]!r} must be a relative path inside the checkpoint")
    return text


def _tensors(f: Fields, items: list[Any]) -> list[TensorMeta]:
    tensors = []
    for i, item in enumerate(items):
        name = f"tensors[{i}]"
        obj = f.obj(item, name)
        dtype_name = f.text(f.get(obj, "dtype", name), f"{name}.dtype")
        if dtype_name not in DTYPE_NAMES:
            f.fail(f"{name}.dtype", f"{dtype_name[:80]!r} is not one of {sorted(DTYPE_NAMES)}")
        shape = f.items(f.get(obj, "shape", name), f"{name}.shape")
        if len(shape) > MAX_NDIM:
            f.fail(f"{name}.shape", f"{len(shape)} dimensions, more than {MAX_NDIM}")
        meta = TensorMeta(
            f.text(f.get(obj, "path", name), f"{name}.path"),
            DTYPE_NAMES[dtype_name],
            tuple(f.integer(d, f"{name}.shape[{j}]") for j, d in enumerate(shape)),
        )
        if meta.nbytes > MAX_BYTES:
            f.fail(f"{name}.shape", f"{meta.nbytes} bytes, more than {MAX_BYTES}")
        tensors.append(meta)
    if len({t.path for t in tensors}) != len(tensors):
        f.fail("tensors", "two tensors have the same path")
    return tensors


def _pieces(f: Fields, items: list[Any], tensors: list[TensorMeta], world: int) -> list[Piece]:
    numel = {t.path: t.numel for t in tensors}
    pieces = []
    for i, item in enumerate(items):
        name = f"pieces[{i}]"
        path, start, stop, rank = f.items(item, name, 4)
        if not isinstance(path, str) or path not in numel:
            f.fail(name, f"names no tensor of the manifest: {_brief(path)}")
        size = numel[path]
        start = f.integer(start, f"{name}[1]", 0, size)
        pieces.append(
            Piece(
                path,
                start,
                f.integer(stop, f"{name}[2]", start + 1, size),
                f.integer(rank, f"{name}[3]", 0, world - 1),
            )
        )
    # Each tensor is loaded into uninitialized memory: its pieces must cover it exactly once.
    spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for piece in pieces:
        spans[piece.path].append((piece.start, piece.stop))
    for path, size in numel.items():
        ordered = sorted(spans[path])
        bounds = [0] + [stop for _, stop in ordered]  # each piece starts where the last stopped
        if [start for start, _ in ordered] != bounds[:-1] or bounds[-1] != size:
            f.fail("pieces", f"the pieces of tensor {path!r} do not cover its {size} elements once")
    return pieces


def _brief(value: Any) -> str:
    """A string shortened for a message, or just its kind (a deep list would not even repr)."""
    return repr(value[:300]) if isinstance(value, str) else kind_of(value)


def _check_fit(
    f: Fields, shards: list[ShardRecord], tensors: list[TensorMeta], pieces: list[Piece]
) -> None:
    """Each shard's recorded size must hold the bytes of the pieces its rank wrote."""
    itemsize = {t.path: t.dtype.itemsize for t in tensors}
    held: dict[int, int] = defaultdict(int)
    count: dict[int, int] = defaultdict(int)
    for piece in pieces:
        held[piece.rank] += (piece.stop - piece.start) * itemsize[piece.path]
        count[piece.rank] += 1
    for i, shard in enumerate(shards):
        if shard.digest.crc32 and len(shard.digest.crc32) != count[shard.rank]:
            f.fail(
                f"shards[{i}].crc32",
                f"{len(shard.digest.crc32)} checksums for the {count[shard.rank]} pieces of rank "
                f"{shard.rank}",
            )
        if shard.digest.size < SAFETENSORS_PREFIX + held[shard.rank]:
            f.fail(
                f"shards[{i}].size",
                f"{shard.digest.size} bytes cannot hold the {held[shard.rank]} bytes of rank "
                f"{shard.rank}'s pieces",
            )


_SKELETON_KINDS = ("T", "N", "D", "L", "U", "V")


def _skeleton(f: Fields, node: Any, paths: set[str], name: str, depth: int) -> None:
    """The state's structure, as `flatten` wrote it (see checkpoint/flatten.py)."""
    if depth > MAX_SKELETON_DEPTH:
        f.fail(name, f"nested deeper than {MAX_SKELETON_DEPTH} levels")
    node = f.obj(node, name)
    if len(node) != 1 or next(iter(node)) not in _SKELETON_KINDS:
        f.fail(name, f"expected one key of {list(_SKELETON_KINDS)}, got {list(node)[:8]}")
    ((kind, body),) = node.items()
    if kind in ("T", "N") and (not isinstance(body, str) or body not in paths):
        f.fail(name, f"names no tensor of the manifest: {_brief(body)}")
    elif kind == "D":
        for i, pair in enumerate(f.items(body, f"{name}.D")):
            key, child = f.items(pair, f"{name}.D[{i}]", 2)
            if not isinstance(key, str) and type(key) is not int:
                f.fail(
                    f"{name}.D[{i}]", f"a key must be a string or an integer, got {kind_of(key)}"
                )
            _skeleton(f, child, paths, f"{name}/{key}", depth + 1)
    elif kind in ("L", "U"):
        for i, child in enumerate(f.items(body, f"{name}.{kind}")):
            _skeleton(f, child, paths, f"{name}/{i}", depth + 1)
    elif kind == "V" and not (body is None or isinstance(body, bool | int | float | str)):
        f.fail(f"{name}.V", f"expected a JSON scalar, got {kind_of(body)}")
