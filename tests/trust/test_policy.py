"""The trust policy file: what it accepts, what it refuses by name, and hostile bytes."""

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.trust.conftest import make_key, write_policy

from shipyard.errors import InvalidInput
from shipyard.trust.policy import load_policy


def test_a_policy_lists_signers_by_fingerprint(tmp_path: Path) -> None:
    _, public = make_key(tmp_path / "keys", "release")
    path = write_policy(
        tmp_path / "policy.toml",
        [{"name": "rel", "public_key": str(public), "kinds": ["model"], "aliases": ["prod-*"]}],
        "warn",
    )
    policy = load_policy(path)
    assert policy is not None and not policy.require
    [signer] = policy.signers.values()
    assert signer.name == "rel" and signer.fingerprint.startswith("sha256:")
    assert signer.may_sign("model", None) and signer.may_sign("model", "prod-llm")
    assert not signer.may_sign("model", "dev-llm") and not signer.may_sign("dataset", None)


def test_no_default_policy_means_none(shipyard_home: Path) -> None:
    assert load_policy() is None


def test_a_named_policy_that_is_missing_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHIPYARD_TRUST_POLICY", str(tmp_path / "nope.toml"))
    with pytest.raises(InvalidInput, match=r"nope\.toml: cannot open"):
        load_policy()


def test_a_policy_others_can_change_is_refused(tmp_path: Path) -> None:
    path = write_policy(tmp_path / "policy.toml", [])
    path.chmod(0o666)
    with pytest.raises(InvalidInput, match="others can change it"):
        load_policy(path)
    path.chmod(0o644)
    os.symlink(path, tmp_path / "link.toml")
    with pytest.raises(InvalidInput, match=r"link\.toml: cannot open"):
        load_policy(tmp_path / "link.toml")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('signatures = "maybe"', "use 'require' or 'warn'"),
        ("colour = 1", "unknown key"),
        ("[[signer]]\nkinds = ['model']", r"signer\[0\]: public_key"),
        ("[[signer]]\npublic_key = 'k.pub'", r"cannot open"),
        ("signatures = ", "not TOML"),
    ],
)
def test_a_bad_policy_is_refused_by_name(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    with pytest.raises(InvalidInput, match=named):
        load_policy(path)


def test_a_signer_needs_kinds(tmp_path: Path) -> None:
    _, public = make_key(tmp_path / "keys", "k")
    path = write_policy(tmp_path / "policy.toml", [{"public_key": str(public), "kinds": []}])
    with pytest.raises(InvalidInput, match=r"signer\[0\].kinds: name at least one kind"):
        load_policy(path)


@pytest.mark.fuzz
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=400))
def test_any_text_parses_or_is_refused_by_name(tmp_path: Path, text: str) -> None:
    path = tmp_path / "fuzz.toml"
    try:
        path.write_text(text, errors="surrogatepass")
    except UnicodeEncodeError:
        return
    try:
        load_policy(path)
    except InvalidInput as exc:
        assert "fuzz.toml" in str(exc)
