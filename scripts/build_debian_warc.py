"""Pack the Debian documentation packages' HTML into WARC files (a real HTML corpus).

Usage: python scripts/build_debian_warc.py DEST [--per-file N]
Needs `python3.11-doc` and `debian-handbook` (scripts/apt-packages.txt).
"""

import argparse
import sys
from pathlib import Path

from shipyard.data.warcpack import pack_tree

SOURCES = (
    ("/usr/share/doc/python3.11/html", "https://docs.python.org/3.11", "python-doc"),
    ("/usr/share/doc/debian-handbook/html", "https://debian-handbook.info/browse", "handbook"),
)


def build(dest: Path, per_file: int = 500) -> list[Path]:
    files = []
    for root, base, prefix in SOURCES:
        if not Path(root).is_dir():
            raise SystemExit(f"{root} is missing: apt-get install python3.11-doc debian-handbook")
        files += pack_tree(Path(root), base, dest, prefix, per_file)
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument("--per-file", type=int, default=500)
    args = parser.parse_args()
    files = build(args.dest, args.per_file)
    print(f"{len(files)} WARC files in {args.dest}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
