"""`shipyard trust keygen|sign|verify|policy|sign-dir|verify-dir` and `shipyard audit ls|show`."""

import argparse
import datetime
import json
import re
import time
from pathlib import Path

from shipyard.cli.argtypes import count, row_id
from shipyard.errors import InvalidInput, NotFound, Untrusted
from shipyard.workspace import Workspace


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    trust = subparsers.add_parser("trust", help="signing keys, artifact signatures, trust policy")
    commands = trust.add_subparsers(dest="trust_command", required=True, metavar="COMMAND")

    keygen = commands.add_parser("keygen", help="make a key pair: FILE (private) and FILE.pub")
    keygen.add_argument("file", type=Path, help="where to write the private key (0600)")
    keygen.add_argument(
        "--algorithm",
        choices=("ed25519", "ecdsa-p256"),
        default="ed25519",
        help="ed25519 (default) or ecdsa-p256 (what OpenSSF model-signing keys are)",
    )
    keygen.set_defaults(func=_keygen)

    sign = commands.add_parser("sign", help="sign an artifact's manifest, kind and aliases")
    sign.add_argument("ref", help="artifact id, unique id prefix or alias (an alias is signed too)")
    sign.add_argument("--key", type=Path, required=True, help="the private key file")
    sign.add_argument(
        "--name",
        action="append",
        default=[],
        metavar="ALIAS",
        help="also vouch that ALIAS may point at it (repeatable)",
    )
    sign.set_defaults(func=_sign)

    verify = commands.add_parser("verify", help="list an artifact's signatures and the verdict")
    verify.add_argument("ref", help="artifact id, unique id prefix or alias")
    verify.set_defaults(func=_verify)

    policy = commands.add_parser("policy", help="show the trust policy in force")
    policy.set_defaults(func=_policy)

    sign_dir = commands.add_parser(
        "sign-dir", help="sign a model directory in the OpenSSF model-signing format"
    )
    sign_dir.add_argument("directory", type=Path, help="the model directory to sign")
    sign_dir.add_argument("--key", type=Path, required=True, help="an ECDSA P-256 private key")
    sign_dir.add_argument("--signature", type=Path, help="default: DIRECTORY/model.sig")
    sign_dir.set_defaults(func=_sign_dir)

    verify_dir = commands.add_parser(
        "verify-dir", help="verify an OpenSSF model-signing signature of a model directory"
    )
    verify_dir.add_argument("directory", type=Path, help="the model directory to check")
    verify_dir.add_argument(
        "--key",
        type=Path,
        help="the signer's public key (default: each ECDSA P-256 signer of models in the policy)",
    )
    verify_dir.add_argument("--signature", type=Path, help="default: DIRECTORY/model.sig")
    verify_dir.set_defaults(func=_verify_dir)

    audit = subparsers.add_parser("audit", help="who read which artifact, when, from where")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True, metavar="COMMAND")
    ls = audit_commands.add_parser("ls", help="the latest read events, oldest first")
    ls.add_argument("--user", help="only reads by this user name")
    ls.add_argument(
        "--artifact", metavar="REF", help="only reads of this artifact (id, prefix, alias)"
    )
    ls.add_argument("--action", help="only get, pull, load or serve")
    ls.add_argument(
        "--outcome", choices=("allowed", "warned", "refused"), help="only reads with this verdict"
    )
    ls.add_argument("--since", metavar="WHEN", help="30m, 2h, 7d, or an ISO date/time (UTC)")
    ls.add_argument("--limit", type=count, default=100, help="at most this many (default 100)")
    ls.add_argument("--json", action="store_true", help="one JSON object per line")
    ls.set_defaults(func=_audit_ls)
    show = audit_commands.add_parser("show", help="every field of one event")
    show.add_argument("id", type=row_id, help="the event's number, as `audit ls` prints it")
    show.set_defaults(func=_audit_show)


def _keygen(args: argparse.Namespace) -> int:
    from shipyard.trust.keys import generate, write_key_pair

    key = generate(args.algorithm)
    public = write_key_pair(key, args.file)
    print(f"{key.fingerprint}  {args.file} (private), {public} (public)")
    return 0


def _sign(args: argparse.Namespace) -> int:
    from shipyard.trust.keys import load_signing_key
    from shipyard.trust.signatures import add_signature, sign

    key = load_signing_key(args.key)
    ws = Workspace.open()
    try:
        artifact_id = ws.resolve(args.ref)
        names = list(args.name)
        if ws.catalog.get_alias(args.ref) == artifact_id:
            names.append(args.ref)
        for name in args.name:
            if ws.catalog.get_alias(name) != artifact_id:
                raise InvalidInput(f"--name {name!r} does not point at {artifact_id[:16]}")
        signature = sign(ws.pieces.get_manifest(artifact_id), names, key)
        add_signature(ws.pieces.backend, signature)
    finally:
        ws.close()
    shown = ", ".join(signature.names) or "no aliases"
    print(f"signed {signature.kind} {artifact_id} ({shown}) with {key.fingerprint}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from shipyard.trust.policy import judge, load_policy
    from shipyard.trust.signatures import parse_signatures, read_signatures

    ws = Workspace.open()
    try:
        artifact_id = ws.resolve(args.ref)
        manifest = ws.pieces.get_manifest(artifact_id)
        stored = read_signatures(ws.pieces.backend, artifact_id)
        alias = args.ref if ws.catalog.get_alias(args.ref) == artifact_id else None
    finally:
        ws.close()
    signatures = [] if stored is None else parse_signatures(stored, f"signatures of {artifact_id}")
    policy = load_policy()
    for signature in signatures:
        signer = policy.signers.get(signature.key) if policy else None
        who = f"{signer.name!r}" if signer else "a key the policy does not list"
        when = datetime.datetime.fromtimestamp(signature.signed_at, datetime.UTC)
        ok = (
            "not checked"
            if signer is None
            else "verifies"
            if signature.verifies(signer.key)
            else "DOES NOT VERIFY"
        )
        names = ", ".join(signature.names) or "-"
        stamp = f"{when:%Y-%m-%d %H:%M}"
        print(f"{signature.key}  {signature.algorithm:<10}  {stamp}  {names}  {who}, {ok}")
    if policy is None:
        print(f"{artifact_id}: {len(signatures)} signature(s); no trust policy, so reads accept it")
        return 0
    verdict = judge(policy, artifact_id, manifest.kind, alias, stored)
    if verdict.signer is None:
        raise Untrusted(f"{artifact_id}: {verdict.reason}")
    print(f"{artifact_id}: trusted, signed by {verdict.signer!r}")
    return 0


def _policy(args: argparse.Namespace) -> int:
    from shipyard.trust.policy import load_policy, policy_path

    policy = load_policy()
    if policy is None:
        print(f"no trust policy at {policy_path()}: every artifact is read, signed or not")
        return 0
    mode = "require" if policy.require else "warn"
    print(f"{policy.source}: signatures = {mode}")
    for signer in policy.signers.values():
        aliases = ", ".join(signer.aliases) or "no aliases"
        print(f"  {signer.name}: {signer.fingerprint}  kinds {', '.join(signer.kinds)}; {aliases}")
    return 0


def _sign_dir(args: argparse.Namespace) -> int:
    from shipyard.trust.openssf import sign_directory

    signature = sign_directory(args.directory, args.key, args.signature)
    print(f"signed {args.directory} → {signature}")
    return 0


def _verify_dir(args: argparse.Namespace) -> int:
    from shipyard.trust.openssf import verify_directory

    signer = verify_directory(args.directory, args.key, args.signature)
    print(f"{args.directory}: verified, signed by {signer}")
    return 0


_AGO = re.compile(r"^(\d+)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str) -> float:
    """`30m`, `2h`, `7d` ago, or an ISO date/time (UTC unless it says otherwise)."""
    if match := _AGO.match(text):
        return time.time() - int(match[1]) * _UNIT[match[2]]
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"--since {text[:40]!r}: use 30m, 2h, 7d or an ISO date/time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()


def _audit_ls(args: argparse.Namespace) -> int:
    from shipyard.trust.audit import query
    from shipyard.trust.gate import audit_db

    since = parse_since(args.since) if args.since else None
    ws = Workspace.open()
    try:
        artifact = None
        if args.artifact:
            try:
                artifact = ws.resolve(args.artifact)
            except NotFound:
                artifact = args.artifact.lower()  # an artifact read once but gone since
        events = query(
            audit_db(ws),
            user=args.user,
            artifact=artifact,
            action=args.action,
            outcome=args.outcome,
            since=since,
            limit=args.limit,
        )
    finally:
        ws.close()
    for event in events:
        if args.json:
            print(json.dumps(event.__dict__, sort_keys=True))
            continue
        when = datetime.datetime.fromtimestamp(event.at, datetime.UTC)
        who = event.user_name + (f"/{event.service}" if event.service else "")
        where = event.host + (f" {event.client}" if event.client else "")
        print(
            f"{event.id:>6}  {when:%Y-%m-%d %H:%M:%S}  {event.action:<6} {event.outcome:<8} "
            f"{event.artifact_id[:16]}  {event.kind:<10} {who:<16} {where}"
        )
    return 0


def _audit_show(args: argparse.Namespace) -> int:
    from shipyard.trust.audit import get_event
    from shipyard.trust.gate import audit_db

    ws = Workspace.open()
    try:
        event = get_event(audit_db(ws), args.id)
    finally:
        ws.close()
    if event is None:
        raise NotFound(f"no audit event {args.id}")
    for name, value in event.__dict__.items():
        if name == "at":
            value = f"{datetime.datetime.fromtimestamp(value, datetime.UTC).isoformat()}"
        print(f"{name + ':':<13}{'-' if value is None else value}")
    return 0
