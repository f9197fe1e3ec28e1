"""The `shipyard` command imports each command's machinery only when that command runs: a
restarted peer daemon rejoins sooner when it does not first load the data pipeline."""

import subprocess
import sys

HEAVY = ("rich", "pyarrow", "duckdb", "tokenizers", "torch", "shipyard.data", "shipyard.train")


def test_building_the_parser_imports_no_heavy_package() -> None:
    probe = (
        "import sys\n"
        "from shipyard.cli.main import build_parser\n"
        "build_parser()\n"
        "print('\\n'.join(sys.modules))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    heavy = [m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert heavy == []
