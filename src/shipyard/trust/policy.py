"""The trust policy: which keys may sign which kinds and aliases, and whether unsigned is refused.

A TOML file, `$SHIPYARD_TRUST_POLICY` or else `$SHIPYARD_HOME/trust/policy.toml`:

    signatures = "require"            # or "warn": read it anyway, with a warning
    [[signer]]
    name = "release"                  # how messages and audit rows name it (default: the
                                      # key file's name without its extension)
    public_key = "release.pub"        # PEM; a relative path is relative to this file
    kinds = ["model", "checkpoint"]   # kinds it may sign; "*" for any
    aliases = ["prod-*"]              # aliases (fnmatch patterns) it may vouch for; default none

With no policy file every artifact is read as before, signed or not. The policy and its key files
decide what is trusted, so they are refused when someone other than their owner (or root) could
change them.
"""

import fnmatch
import os
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard.errors import InvalidInput, Untrusted
from shipyard.home import shipyard_home
from shipyard.trust.keys import PublicKey, fingerprint, parse_public_key
from shipyard.trust.signatures import parse_signatures

MAX_POLICY_BYTES = 1 << 20
MAX_SIGNERS = 256
_TOP = frozenset({"signatures", "signer"})
_SIGNER = frozenset({"name", "public_key", "kinds", "aliases"})


@dataclass(frozen=True)
class Signer:
    name: str
    key: PublicKey
    fingerprint: str
    kinds: tuple[str, ...]
    aliases: tuple[str, ...]

    def may_sign(self, kind: str, alias: str | None) -> bool:
        if "*" not in self.kinds and kind not in self.kinds:
            return False
        return alias is None or any(fnmatch.fnmatchcase(alias, p) for p in self.aliases)


@dataclass(frozen=True)
class Policy:
    source: Path
    require: bool
    signers: dict[str, Signer]  # by fingerprint


@dataclass(frozen=True)
class Verdict:
    """Who vouches for a read (None: nobody the policy allows), and why not when nobody does."""

    signer: str | None
    reason: str


def policy_path() -> Path:
    configured = os.environ.get("SHIPYARD_TRUST_POLICY")
    return Path(configured) if configured else shipyard_home() / "trust" / "policy.toml"


def load_policy(path: Path | None = None) -> Policy | None:
    """The policy at `path` (default `policy_path()`); None when the default one is absent."""
    explicit = path is not None or bool(os.environ.get("SHIPYARD_TRUST_POLICY"))
    path = path or policy_path()
    if not explicit and not path.exists() and not path.is_symlink():
        return None
    data = read_guarded(path, "trust policy", MAX_POLICY_BYTES)
    try:
        raw = tomllib.loads(data.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInput(f"trust policy {path}: not TOML ({exc})") from None
    try:
        return _policy(raw, path)
    except InvalidInput as exc:
        raise InvalidInput(f"trust policy {path}: {exc}") from None


def read_guarded(path: Path, what: str, max_bytes: int) -> bytes:
    """A file that decides what is trusted: a regular file, not a symlink, that only its owner
    (this user or root) can write, and no larger than `max_bytes`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise InvalidInput(f"{what} {path}: cannot open ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidInput(f"{what} {path}: not a regular file")
        if info.st_uid not in (os.geteuid(), 0) or info.st_mode & 0o022:
            raise InvalidInput(
                f"{what} {path}: others can change it (owner uid {info.st_uid}, mode "
                f"{stat.S_IMODE(info.st_mode):04o}); it must be yours and not group/other writable"
            )
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise InvalidInput(f"{what} {path}: larger than {max_bytes} bytes")
    return data


def _policy(raw: dict[str, Any], path: Path) -> Policy:
    if unknown := sorted(set(raw) - _TOP):
        raise InvalidInput(f"unknown key(s) {', '.join(map(repr, unknown))}")
    mode = raw.get("signatures", "require")
    if mode not in ("require", "warn"):
        raise InvalidInput(f"signatures = {str(mode)[:40]!r}: use 'require' or 'warn'")
    entries = raw.get("signer", [])
    if not isinstance(entries, list) or len(entries) > MAX_SIGNERS:
        raise InvalidInput(f"signer must be a list of at most {MAX_SIGNERS} [[signer]] tables")
    signers: dict[str, Signer] = {}
    for index, entry in enumerate(entries):
        signer = _signer(entry, f"signer[{index}]", path.parent)
        signers.setdefault(signer.fingerprint, signer)
    return Policy(path, mode == "require", signers)


def _signer(entry: Any, where: str, base: Path) -> Signer:
    if not isinstance(entry, dict):
        raise InvalidInput(f"{where}: not a table")
    if unknown := sorted(set(entry) - _SIGNER):
        raise InvalidInput(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}")
    key_file = entry.get("public_key")
    if not isinstance(key_file, str) or not key_file:
        raise InvalidInput(f"{where}: public_key must name a PEM file")
    key_path = base / key_file
    key = parse_public_key(read_guarded(key_path, "public key", 16 << 10), f"{where}: {key_path}")
    name = entry.get("name", key_path.stem)
    kinds = _strings(entry.get("kinds"), f"{where}.kinds")
    if not kinds:
        raise InvalidInput(f"{where}.kinds: name at least one kind, or '*'")
    aliases = _strings(entry.get("aliases", []), f"{where}.aliases")
    if not isinstance(name, str) or not 0 < len(name) <= 200:
        raise InvalidInput(f"{where}.name: a string of 1-200 characters")
    return Signer(name, key, fingerprint(key), kinds, aliases)


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise InvalidInput(f"{where}: must be a list of non-empty strings")
    return tuple(value)


def judge(
    policy: Policy, artifact: str, kind: str, alias: str | None, stored: bytes | None
) -> Verdict:
    """Whether some signer of `policy` vouches for `artifact` of `kind`, read through `alias`,
    by the signature file `stored` (None: there is none).

    A file that does not parse, and signatures by keys the policy does not list, count for
    nothing. A signature by a listed key that does not verify, or that claims another artifact
    or kind, raises `Untrusted`: that is tampering, whatever `signatures` says."""
    if stored is None:
        return Verdict(None, "it is not signed")
    try:
        signatures = parse_signatures(stored, "its signature file")
    except InvalidInput as exc:
        return Verdict(None, str(exc))
    refusals = []
    for signature in signatures:
        signer = policy.signers.get(signature.key)
        if signer is None:
            continue
        if not signature.verifies(signer.key):
            raise Untrusted(
                f"artifact {artifact}: the signature by {signer.name!r} does not verify"
            )
        if signature.artifact != artifact or signature.kind != kind:
            raise Untrusted(
                f"artifact {artifact}: the signature by {signer.name!r} is for "
                f"{signature.kind} {signature.artifact}, not this {kind}"
            )
        if not signer.may_sign(kind, None):
            refusals.append(f"{signer.name!r} may not sign kind {kind!r}")
        elif alias is not None and alias not in signature.names:
            refusals.append(f"{signer.name!r} did not sign alias {alias!r}")
        elif not signer.may_sign(kind, alias):
            refusals.append(f"{signer.name!r} may not sign alias {alias!r}")
        else:
            return Verdict(signer.name, "")
    return Verdict(None, "; ".join(refusals) or "no key the policy lists signed it")
