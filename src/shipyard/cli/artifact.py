"""`shipyard artifact put|get|ls|show|verify` and `shipyard gc`."""

import argparse
import base64
import datetime
import json
import sys
from pathlib import Path

from shipyard.cli.argtypes import count
from shipyard.cli.progress import byte_progress, stderr
from shipyard.errors import IntegrityError, InvalidInput
from shipyard.secretfile import write_private_file
from shipyard.store.put import scan_source
from shipyard.store.sealed import KEY_ENV, KEY_FILE_ENV, key_id, load_keyring, new_key
from shipyard.workspace import Workspace


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    artifact = subparsers.add_parser("artifact", help="store, fetch and inspect artifacts")
    commands = artifact.add_subparsers(dest="artifact_command", required=True, metavar="COMMAND")

    put = commands.add_parser("put", help="store a file or directory; prints the artifact id last")
    put.add_argument("path", type=Path, help="the file or directory to store")
    put.add_argument("--kind", required=True, help="dataset, model, checkpoint, tokenizer, ...")
    put.add_argument("--name", help="alias to point at the new artifact")
    put.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="REF",
        help="an artifact this one was derived from (repeatable)",
    )
    put.add_argument("--piece-size-mib", type=count, default=16, help="piece size (default 16)")
    put.add_argument("--metadata", type=json.loads, default={}, help="a JSON object")
    put.add_argument(
        "--confidential",
        action="store_true",
        help="encrypt every piece (AES-256-GCM) under the first key of --key-file, "
        f"${KEY_FILE_ENV} or ${KEY_ENV}; names, sizes and metadata stay readable",
    )
    _key_file_option(put)
    put.set_defaults(func=_put)

    get = commands.add_parser("get", help="materialize and verify an artifact into DEST")
    get.add_argument("ref", help="artifact id, unique id prefix or alias")
    get.add_argument("dest", type=Path, help="absent or empty directory to write into")
    _key_file_option(get)
    get.set_defaults(func=_get)

    keygen = commands.add_parser(
        "keygen", help="write a new encryption key file (0600), or add a key to the top of one"
    )
    keygen.add_argument("key_file", type=Path, metavar="FILE", help="the key file")
    keygen.set_defaults(func=_keygen)

    ls = commands.add_parser("ls", help="list artifacts")
    ls.add_argument("--kind", help="only artifacts of this kind")
    ls.set_defaults(func=_ls)

    show = commands.add_parser("show", help="print an artifact's record and manifest")
    show.add_argument("ref", help="artifact id, unique id prefix or alias")
    show.set_defaults(func=_show)

    check = commands.add_parser("verify", help="re-hash every stored piece of an artifact")
    check.add_argument("ref", help="artifact id, unique id prefix or alias")
    check.set_defaults(func=_verify)

    gc = subparsers.add_parser("gc", help="delete pieces that no manifest references")
    gc.add_argument("--dry-run", action="store_true", help="only report what would go")
    gc.set_defaults(func=_gc)


def _key_file_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--key-file",
        type=Path,
        metavar="FILE",
        help=f"encryption keys, one base64 line each, the first sealing (default ${KEY_FILE_ENV})",
    )


def _put(args: argparse.Namespace) -> int:
    if not isinstance(args.metadata, dict):
        raise InvalidInput("--metadata must be a JSON object")
    if args.key_file and not args.confidential:
        raise InvalidInput("--key-file is for --confidential puts")
    keys = load_keyring(args.key_file) if args.confidential else None
    if keys is not None:
        keys.sealer()  # no key: refused before the files are read
    source = scan_source(args.path)
    if source.empty_dirs:
        shown = ", ".join(source.empty_dirs[:5]) + (", ..." if len(source.empty_dirs) > 5 else "")
        print(
            f"note: empty directories are not stored ({len(source.empty_dirs)}: {shown}); "
            "an artifact holds files, so put a file in a directory to keep it",
            file=sys.stderr,
        )
    ws = Workspace.open()
    with byte_progress(f"put {args.path.name}", source.size) as advance:
        record = ws.put(
            args.path,
            args.kind,
            name=args.name,
            inputs=args.input,
            metadata=args.metadata,
            piece_size=args.piece_size_mib << 20,
            progress=advance,
            confidential=args.confidential,
            keys=keys,
        )
    stderr().print(f"stored {record.kind} {record.file_count} files, {record.size:,} bytes")
    print(record.id)
    return 0


def _get(args: argparse.Namespace) -> int:
    from shipyard.trust.gate import Read, admit

    ws = Workspace.open()
    artifact_id = ws.resolve(args.ref)
    manifest = admit(ws, Read(artifact_id, args.ref, "get"))
    with byte_progress(f"get {args.ref}", manifest.size) as advance:
        ws.get(
            artifact_id,
            args.dest,
            progress=advance,
            keys=load_keyring(args.key_file) if args.key_file else None,
        )
    print(f"{manifest.id} → {args.dest} ({len(manifest.files)} files, {manifest.size:,} bytes)")
    return 0


def _ls(args: argparse.Namespace) -> int:
    ws = Workspace.open()
    names: dict[str, list[str]] = {}
    for alias, target in ws.catalog.list_aliases().items():
        names.setdefault(target, []).append(alias)
    for record in ws.catalog.list_artifacts(args.kind):
        when = datetime.datetime.fromtimestamp(record.created_at).strftime("%Y-%m-%d %H:%M")
        aliases = ",".join(names.get(record.id, []))
        print(f"{record.id[:16]}  {record.kind:<12} {record.size:>14,}  {when}  {aliases}")
    return 0


def _show(args: argparse.Namespace) -> int:
    ws = Workspace.open()
    artifact_id = ws.resolve(args.ref)
    manifest = ws.pieces.get_manifest(artifact_id)
    record = ws.catalog.get_artifact(artifact_id)
    aliases = sorted(n for n, t in ws.catalog.list_aliases().items() if t == artifact_id)
    print(f"id:         {artifact_id}")
    print(f"kind:       {manifest.kind}")
    print(f"size:       {manifest.size:,} bytes in {len(manifest.files)} files")
    print(f"piece size: {manifest.piece_size:,}")
    print(f"aliases:    {', '.join(aliases) or '-'}")
    print(f"run:        {manifest.run or (record.run_id if record else None) or '-'}")
    if manifest.encryption:
        print(f"encrypted:  {manifest.encryption.algorithm}, key {manifest.encryption.key_id}")
    if manifest.metadata:
        print(f"metadata:   {json.dumps(manifest.metadata, sort_keys=True)}")
    for entry in manifest.files:
        print(f"  {entry.mode:04o} {entry.size:>14,}  {len(entry.pieces):>4} pieces  {entry.path}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    ws = Workspace.open()
    manifest = ws.manifest(args.ref)
    with byte_progress(f"verify {args.ref}", manifest.size) as advance:
        problems = ws.verify(args.ref, progress=advance)
    for problem in problems:
        print(problem)
    if problems:
        raise IntegrityError(f"{manifest.id}: {len(problems)} piece(s) missing or corrupt")
    print(f"{manifest.id}: ok ({manifest.size:,} bytes verified)")
    return 0


def _keygen(args: argparse.Namespace) -> int:
    """A new key first (it seals from now on), the file's old keys after it (they still open
    what they sealed)."""
    old = load_keyring(args.key_file).keys if args.key_file.exists() else ()
    line = new_key()
    kept = [base64.b64encode(key).decode() for key in old]
    write_private_file(args.key_file, "\n".join([line, *kept]).encode() + b"\n")
    print(key_id(base64.b64decode(line)))
    return 0


def _gc(args: argparse.Namespace) -> int:
    report = Workspace.open().gc(dry_run=args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    print(
        f"{report.manifests} manifests, {report.pieces_kept} pieces kept; "
        f"{verb} {report.pieces_deleted} pieces ({report.bytes_freed:,} bytes), "
        f"{report.stale_leases_removed} stale leases, {report.temp_files_removed} temp files"
    )
    return 0
