"""Resolve a config's inputs to WARC files and record them as one `crawl` artifact."""

import shutil
import tempfile
from pathlib import Path

from shipyard.errors import InvalidInput
from shipyard.workspace import Workspace

WARC_SUFFIXES = (".warc", ".warc.gz", ".warc.lz4")


def _is_warc(path: Path) -> bool:
    return path.name.endswith(WARC_SUFFIXES)


def resolve_inputs(ws: Workspace, inputs: tuple[str, ...], cache: Path) -> list[Path]:
    """Every WARC file the inputs name, sorted by file name (which fixes document numbers)."""
    files: list[Path] = []
    for item in inputs:
        if item.startswith("artifact:"):
            artifact_id = ws.resolve(item.removeprefix("artifact:"))
            dest = cache / "inputs" / artifact_id
            if not dest.is_dir():  # materialize once, then rename into place
                dest.parent.mkdir(parents=True, exist_ok=True)
                tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".tmp-"))
                ws.get(artifact_id, tmp / "files")
                (tmp / "files").rename(dest)
                shutil.rmtree(tmp, ignore_errors=True)
            files += sorted(p for p in dest.rglob("*") if p.is_file() and _is_warc(p))
            continue
        path = Path(item)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and _is_warc(p))
            if not found:
                raise InvalidInput(
                    f"inputs: {path} holds no WARC files ({', '.join(WARC_SUFFIXES)})"
                )
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise InvalidInput(f"inputs: {path} does not exist")
    names = [f.name for f in files]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidInput(
            f"inputs: two WARC files are named {duplicates[0]}; names must be unique"
        )
    return sorted(files, key=lambda f: f.name)


def put_crawl(ws: Workspace, files: list[Path], name: str) -> str:
    """Store the input files as one `crawl` artifact (same files, same id); return its id."""
    with tempfile.TemporaryDirectory(prefix="shipyard-crawl-") as tmp:
        for path in files:
            shutil.copyfile(path, Path(tmp, path.name))
        record = ws.put(Path(tmp), "crawl", name=f"{name}-crawl", metadata={"files": len(files)})
    return record.id
