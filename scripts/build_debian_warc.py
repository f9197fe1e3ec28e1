"""Pack the Debian documentation packages' HTML into WARC files (a real HTML corpus).

Usage: .venv/bin/python scripts/build_debian_warc.py DEST [--per-file N]
Installs `python3.11-doc` and `debian-handbook` with apt-get when missing (as root).
"""

import argparse
import sys
from pathlib import Path

from shipyard.data.corpus import build_warcs


def main() -> int:
    parser = argparse.ArgumentParser(description="Pack Debian documentation into WARC files.")
    parser.add_argument("dest", type=Path)
    parser.add_argument("--per-file", type=int, default=500)
    args = parser.parse_args()
    files = build_warcs(args.dest, args.per_file)
    print(f"{len(files)} WARC files in {args.dest}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
