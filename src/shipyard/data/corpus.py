"""The Debian documentation corpus: real HTML pages packed into WARC files.

`python3.11-doc` (~530 pages) and `debian-handbook` (~3,300 pages in 26 languages, whose partial
translations are natural near-duplicates) are installed with apt when missing and we are root.
Used by `scripts/build_debian_warc.py` and the benchmarks.
"""

import os
import shutil
import subprocess
from pathlib import Path

from shipyard.data.batch import Quarantine
from shipyard.data.config import PipelineConfig
from shipyard.data.stages import get_stage
from shipyard.data.stages.read import read_warc
from shipyard.data.warcpack import pack_tree
from shipyard.errors import NotFound

PACKAGES = ("python3.11-doc", "debian-handbook")
SOURCES = (
    ("/usr/share/doc/python3.11/html", "https://docs.python.org/3.11", "python-doc"),
    ("/usr/share/doc/debian-handbook/html", "https://debian-handbook.info/browse", "handbook"),
)


def ensure_packages() -> None:
    """Install the documentation packages when they are missing (as root, with apt-get)."""
    if all(Path(root).is_dir() for root, _, _ in SOURCES):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise NotFound(f"Debian corpus missing: apt-get install {' '.join(PACKAGES)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", *PACKAGES], check=True, env=env)


def build_warcs(dest: Path, per_file: int = 500) -> list[Path]:
    """Pack both packages' HTML into `dest/*.warc.gz` (reusing files already there)."""
    existing = sorted(dest.glob("*.warc.gz"))
    if existing:
        return existing
    ensure_packages()
    files = []
    for root, base, prefix in SOURCES:
        files += pack_tree(Path(root), base, dest, prefix, per_file)
    return files


def texts(warcs: list[Path], limit: int | None = None, min_words: int = 0) -> list[str]:
    """Main text of the corpus pages (resiliparse), in file order."""
    config = PipelineConfig("corpus", ("-",))
    extract = get_stage("extract")(config)
    out: list[str] = []
    for path in warcs:
        quarantine = Quarantine(path.name)
        batch = extract.process(read_warc(path, config.read, quarantine), quarantine)
        out += [t for t in batch["text"] if len(t.split()) >= min_words]
        if limit is not None and len(out) >= limit:
            return out[:limit]
    return out
