import os
import signal
import subprocess
import sys
from pathlib import Path

from shipyard.data.warcpack import Page

from .conftest import MakeWarc, english_text, html_page

SHIPYARD = [sys.executable, "-m", "shipyard.cli.main"]


def shipyard(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*SHIPYARD, *args], capture_output=True, text=True, timeout=300)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def write_config(path: Path, folder: Path, extra: str = "") -> Path:
    path.write_text(
        f'name = "cli"\ninputs = ["{folder}"]\n[tokenize]\nvocab_size = 400\n'
        f"[executor]\nworkers = 1\n{extra}"
    )
    return path


def pages(seed: int) -> list[Page]:
    return [
        Page(f"https://s{seed}.org/{i}", html_page(english_text(seed * 10 + i))) for i in range(4)
    ]


def test_run_then_report_flags_drift(
    make_warc: MakeWarc, shipyard_home: Path, tmp_path: Path
) -> None:
    folder = make_warc("a.warc.gz", pages(1)).parent
    make_warc(
        "b.warc.gz",
        [
            *pages(2),
            Page(
                "https://x.org/short",  # passes Gopher repetition, fails Gopher quality
                b"<p>The harbour crane lifted cargo from the vessel while the captain watched the "
                b"river and the old bridge at dawn. Later that morning a teacher walked with her "
                b"students to the market, where sailors sold rope, timber and fresh fish.</p>",
            ),
        ],
    )
    config = write_config(tmp_path / "p.toml", folder)
    out = shipyard("data", "run", str(config))
    assert "table" in out.stdout and "tokens" in out.stdout
    assert "documents 2/2 files" in out.stderr
    report = shipyard("data", "report", "latest")
    assert "gopher_quality" in report.stdout and "no earlier run" in report.stdout

    # relaxing a filter changes that stage's survival: the report flags it
    write_config(config, folder, "[filters]\ngopher_quality = false\n")
    shipyard("data", "run", str(config))
    flagged = shipyard("data", "report", "latest", "--threshold", "0.05", "--by", "language")
    assert "FLAG overall gopher_quality" in flagged.stdout
    assert "language=en" in flagged.stdout


def test_bad_config_exits_2_naming_the_field(tmp_path: Path, shipyard_home: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('name = "x"\ninputs = ["a"]\n[dedup]\nbands = -1\n')
    result = shipyard("data", "run", str(config), check=False)
    assert result.returncode == 2
    assert "dedup.bands" in result.stderr


def test_killed_run_resumes(make_warc: MakeWarc, shipyard_home: Path, tmp_path: Path) -> None:
    for seed in range(3):
        folder = make_warc(f"f{seed}.warc.gz", pages(seed)).parent
    config = write_config(tmp_path / "p.toml", folder, "")
    process = subprocess.Popen(
        [*SHIPYARD, "data", "run", str(config)], stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    first_done = None
    for line in process.stderr:
        if line.startswith("documents 1/3 files"):
            first_done = line.split()[3].rstrip(":")
            os.kill(process.pid, signal.SIGKILL)
            break
    process.wait()
    assert first_done is not None
    resumed = shipyard("data", "run", str(config))
    assert f"{first_done}: cached" in resumed.stderr

    # the resumed run's table equals an uninterrupted run's in a fresh home
    env = {**os.environ, "SHIPYARD_HOME": str(tmp_path / "fresh")}
    fresh = subprocess.run(
        [*SHIPYARD, "data", "run", str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    table = [line for line in resumed.stdout.splitlines() if line.startswith("table")]
    assert table and table[0] in fresh.stdout
