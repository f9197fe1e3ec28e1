"""`shipyard checkpoint ls|verify` and `shipyard tokens inspect`.

The checkpoint and loader packages import torch and numpy, so they are imported in the handlers,
not at start-up: other commands stay fast.
"""

import argparse
import sys
from pathlib import Path

from shipyard.cli.argtypes import integer


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    checkpoint = subparsers.add_parser("checkpoint", help="list and verify training checkpoints")
    commands = checkpoint.add_subparsers(dest="checkpoint_command", required=True, metavar="CMD")
    ls = commands.add_parser("ls", help="committed checkpoints under ROOT, oldest first")
    ls.add_argument("root", type=Path, help="the run's checkpoint directory")
    ls.set_defaults(func=_ls)
    verify = commands.add_parser(
        "verify", help="re-hash every shard of a checkpoint; mark it corrupt if one differs"
    )
    verify.add_argument("root", type=Path, help="the run's checkpoint directory")
    verify.add_argument("--step", type=integer(0), help="default: the latest committed one")
    verify.set_defaults(func=_verify)

    tokens = subparsers.add_parser("tokens", help="inspect token-shard datasets")
    token_commands = tokens.add_subparsers(dest="tokens_command", required=True, metavar="CMD")
    inspect = token_commands.add_parser("inspect", help="shards, documents, tokens of DIR")
    inspect.add_argument("directory", type=Path, help="a token-shard dataset directory")
    inspect.add_argument("--verify", action="store_true", help="re-hash every shard")
    inspect.set_defaults(func=_inspect)


def _ls(args: argparse.Namespace) -> int:
    from shipyard.checkpoint.manifest import read_committed
    from shipyard.errors import IntegrityError, InvalidInput, NotFound

    listed = 0
    for step, directory in _step_dirs(args.root):
        try:
            manifest = read_committed(directory).manifest
        except NotFound:
            continue  # no manifest: a save that never committed
        except (InvalidInput, IntegrityError) as exc:
            print(f"step {step}: refused: {exc}", file=sys.stderr)
            continue
        size = sum(s.digest.size for s in manifest.shards)
        print(f"step {manifest.step:>10}  ranks {manifest.world_size:>3}  {size / 1e6:10.1f} MB")
        listed += 1
    if not listed:
        print(f"no committed checkpoint under {args.root}", file=sys.stderr)
    return 0


def _verify(args: argparse.Namespace) -> int:
    from shipyard.checkpoint import load_committed
    from shipyard.checkpoint.manifest import read_committed, step_dir
    from shipyard.errors import NotFound

    if args.step is not None:
        found = read_committed(step_dir(args.root, args.step))
    else:  # the newest directory with a manifest: a refused one is reported, not skipped over
        for _, directory in reversed(_step_dirs(args.root)):
            try:
                found = read_committed(directory)
                break
            except NotFound:
                continue
        else:
            raise NotFound(f"no committed checkpoint under {args.root}")
    load_committed(found)  # raises CorruptCheckpoint naming the shard and piece, and marks it
    print(f"step {found.step}: {len(found.manifest.shards)} shards match their SHA-256")
    return 0


def _step_dirs(root: Path) -> list[tuple[int, Path]]:
    from shipyard.checkpoint.manifest import step_dirs
    from shipyard.errors import InvalidInput, NotFound

    if not root.exists():
        raise NotFound(f"checkpoint directory {root} does not exist")
    if not root.is_dir():
        raise InvalidInput(f"{root} is not a directory of checkpoints")
    return step_dirs(root)


def _inspect(args: argparse.Namespace) -> int:
    from shipyard.loader import TokenDataset

    dataset = TokenDataset(args.directory)
    for shard in dataset.shards:
        print(f"{shard.stem.name}  {shard.num_docs:>10} docs  {shard.num_tokens:>14} tokens")
    print(
        f"{len(dataset.shards)} shards, {dataset.num_docs} documents, {dataset.num_tokens} "
        f"tokens, vocab {dataset.vocab_size}, fingerprint {dataset.fingerprint[:16]}"
    )
    if args.verify:
        dataset.verify()
        print("every shard matches its SHA-256")
    return 0
