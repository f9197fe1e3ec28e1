"""Artifact images: materialized once per host, bound read-only, layered over the host's base."""

from pathlib import Path

import pytest

from shipyard.errors import InvalidInput
from shipyard.sandbox import Host, Outcome
from shipyard.workspace import Workspace

from .conftest import SMALL


def test_an_artifact_image_is_shared_read_only(
    host: Host, workspace: Workspace, tmp_path: Path
) -> None:
    tree = tmp_path / "image"
    (tree / "opt" / "task").mkdir(parents=True)
    (tree / "opt" / "task" / "solve.py").write_text("print('solved')\n")
    workspace.put(tree, "sandbox-image", name="task-image")
    image = host.images.resolve("task-image")
    assert host.images.resolve(image.id).mounts == image.mounts  # the id names the same tree
    cached = host.images.root / image.id
    assert (cached / "opt" / "task" / "solve.py").is_file()
    boxes = [host.start(image, SMALL) for _ in range(2)]
    try:
        for box in boxes:
            box.wait_ready()
            result = box.exec(
                ["python3", "/opt/task/solve.py"]
            )  # the host's Python, the layer's code
            assert result.outcome is Outcome.OK and result.stdout == b"solved\n", result
            denied = box.exec(["sh", "-c", "echo x > /opt/task/solve.py"])
            assert denied.outcome is Outcome.NONZERO_EXIT and b"Read-only" in denied.stderr
    finally:
        for box in boxes:
            box.close()
    assert (cached / "opt" / "task" / "solve.py").read_text() == "print('solved')\n"


def test_an_image_may_not_shadow_the_sandbox_s_own_paths(
    host: Host, workspace: Workspace, tmp_path: Path
) -> None:
    tree = tmp_path / "bad"
    (tree / "work").mkdir(parents=True)
    (tree / "work" / "x").write_text("x")
    workspace.put(tree, "sandbox-image", name="bad-image")
    with pytest.raises(InvalidInput, match="reserved"):
        host.images.resolve("bad-image")
