"""Limits and results as parsed from hostile JSON; the seccomp program; degraded confinement."""

import contextlib
import resource
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shipyard.errors import InvalidInput, StorageError
from shipyard.sandbox import Host, Limits, Outcome, Result, seccomp
from shipyard.sandbox.cgroups import Confinement

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)


@pytest.mark.fuzz
@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from([*Limits().to_json(), "x"]), json_values) | json_values)
def test_limits_from_hostile_json_is_valid_or_refused(raw: Any) -> None:
    try:
        limits = Limits.from_json(raw)
    except InvalidInput:
        return
    assert Limits.from_json(limits.to_json()) == limits
    assert limits.memory_mib >= 16 and limits.pids >= 1 and limits.network is False


@pytest.mark.fuzz
@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["outcome", "exit_code", "signal", "stdout", "stderr", "seconds"]),
        json_values,
    )
)
def test_result_from_hostile_json_is_valid_or_refused(raw: dict[str, Any]) -> None:
    with contextlib.suppress(InvalidInput):
        Result.from_json(raw)


def test_result_round_trip() -> None:
    result = Result(Outcome.TIMEOUT, None, 9, b"\x00out", b"err", 1.5, "slow", 2)
    assert Result.from_json(result.to_json()) == result


@pytest.mark.parametrize(
    "bad", [{"memory_mib": True}, {"cpus": float("nan")}, {"network": True}, {"pids": 0}]
)
def test_bad_limits_are_refused_by_name(bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput, match=f"limits.{next(iter(bad))}"):
        Limits.from_json(bad)


def test_seccomp_program_shape() -> None:
    program = seccomp.program("x86_64")
    assert len(program) % 8 == 0 and len(program) // 8 < 4096  # the kernel's BPF_MAXINSNS
    code, _, _, k = struct.unpack("=HBBI", program[:8])
    assert (code, k) == (0x20, 4)  # first: load the architecture
    assert len(seccomp.program("aarch64")) < len(program)  # no x32 check, no iopl family
    with pytest.raises(InvalidInput, match="riscv64"):
        seccomp.program("riscv64")


def test_seccomp_numbers_match_this_host_s_headers() -> None:
    header = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
    if not header.exists():
        pytest.skip("no x86-64 syscall header here")
    defined = {}
    for line in header.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "#define" and parts[1].startswith("__NR_"):
            defined[parts[1][5:]] = int(parts[2])
    for name, number in seccomp._NUMBERS["x86_64"].items():
        assert defined[name] == number, name


def test_missing_cgroups_are_named_and_rlimits_take_over(tmp_path: Path) -> None:
    confinement = Confinement.detect("shipyard-test", root=tmp_path / "no-cgroups")
    assert set(confinement.missing) == {"memory", "pids", "cpu"}
    lines = confinement.describe()
    assert lines[0].startswith("memory: RLIMIT_AS (fallback: ") and "no-cgroups" in lines[0]
    rlimits = confinement.rlimits(Limits(memory_mib=64, pids=10), timeout=2)
    assert rlimits[resource.RLIMIT_AS] == 64 << 20
    assert rlimits[resource.RLIMIT_NPROC] == 10 + 2  # bubblewrap and the agent run as that uid too


def test_require_cgroups_refuses_a_host_without_them(shipyard_home: Path, tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="refusing to start without cgroup caps"):
        Host(shipyard_home, require_cgroups=True, cgroup_root=tmp_path / "none")


def test_rlimit_fallback_still_caps_memory(shipyard_home: Path, tmp_path: Path) -> None:
    host = Host(shipyard_home, cgroup_root=tmp_path / "none")
    try:
        with host.start(host.images.resolve("host"), Limits(memory_mib=64)) as box:
            box.wait_ready()
            result = box.exec(["python3", "-c", "x = bytearray(200 << 20)"])
            assert result.outcome is Outcome.NONZERO_EXIT and b"MemoryError" in result.stderr
    finally:
        host.close()
