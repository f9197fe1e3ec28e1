"""The README's artifact examples run as written.

Every ```bash block in the README's "The artifact spine" section must be marked runnable by an
HTML comment on the line before it, `<!-- runnable -->` (invisible on the rendered page). The
marked blocks run in order in one bash process (`set -euo pipefail`, so later blocks see earlier
ones' variables) in an empty directory, with a fresh `SHIPYARD_HOME` and the interpreter's
`bin/` (the project's `.venv/bin`) first on PATH. A new example that cannot run that way fails
here until it is fixed or moved out of the section. The top of the README (`scripts/demo.sh`,
`scripts/test.sh`) is another section and is not run here.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## The artifact spine"
MARKER = "<!-- runnable -->"


def section(text: str, heading: str) -> str:
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end != -1 else len(text)]


def runnable_blocks(text: str) -> list[str]:
    """The bash blocks of the section, each of which must carry the marker."""
    blocks: list[str] = []
    body: list[str] | None = None
    marked, previous = False, ""
    for line in section(text, SECTION).splitlines():
        if body is None and line == "```bash":
            body, marked = [], previous.strip() == MARKER
        elif body is not None and line == "```":
            assert marked, f"unmarked bash block in {SECTION!r}:\n" + "\n".join(body)
            blocks.append("".join(f"{row}\n" for row in body))
            body = None
        elif body is not None:
            body.append(line)
        previous = line
    return blocks


def test_the_marker_rule_finds_the_blocks_and_refuses_an_unmarked_one() -> None:
    text = f"{SECTION}\n\n{MARKER}\n```bash\necho a\n```\n\n```bash\necho b\n```\n## Next\n"
    with pytest.raises(AssertionError, match="unmarked bash block"):
        runnable_blocks(text)
    assert runnable_blocks(text.replace("\n\n```bash\necho b", f"\n{MARKER}\n```bash\necho b")) == [
        "echo a\n",
        "echo b\n",
    ]


def test_the_artifact_examples_run_in_order_on_a_fresh_home(tmp_path: Path) -> None:
    blocks = runnable_blocks(README.read_text())
    assert len(blocks) >= 2
    script = "set -euo pipefail\n" + "\n".join(blocks)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIPYARD_")}
    env["SHIPYARD_HOME"] = str(tmp_path / "home")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    work = tmp_path / "work"
    work.mkdir()
    result = subprocess.run(
        ["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "Traceback" not in result.stderr
    assert (work / "model-copy" / "config.json").read_text() == '{"d_model": 64}\n'
    assert "prod-model" in result.stdout  # ls and show name the alias
