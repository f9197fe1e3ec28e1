"""Database URLs: the accepted forms, everything else refused by name, and no message that ever
shows a password, however the URL is spelled."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from shipyard.db import Database, DatabaseUnavailable, parse_url
from shipyard.db.url import redact
from shipyard.errors import InvalidInput

# What a password may hold in a URL's userinfo or query without percent-encoding, '%' aside.
PASSWORD = st.text(st.sampled_from("abcXYZ019-._~!$'()*+,;=:"), min_size=8, max_size=24)
WORD = st.text(st.sampled_from("abcdefghijklmnop0123"), min_size=1, max_size=8)
SCHEME = st.sampled_from(
    ["postgresql", "postgres", "postgresq", "postgresl", "psql", "sqlite", "sqlit", "mysql", ""]
)
FORMS = [
    "{scheme}://{user}:{password}@{host}/{db}",
    "{scheme}://{user}:{password}@{host}:5432/{db}?sslmode=disable",
    "{scheme}://{user}@{host}/{db}?password={password}",
    "{scheme}://{host}/{db}?sslmode=require&password={password}&application_name=x",
    "{scheme}://{host}/{db}?sslpassword={password}",
    "{scheme}:/{user}:{password}@{host}/{db}",
    "{scheme}:{user}:{password}@{host}/{db}",
    "{user}:{password}@{host}/{db}",
    "{scheme}://{user}:{password}@/{db}",
    "host={host} password={password} dbname={db}",
]


def said(text: str) -> str:
    """Everything Shipyard says about `text` short of connecting: the error parsing it, or the
    URL it shows."""
    try:
        return parse_url(text).shown
    except InvalidInput as exc:
        return str(exc)


@pytest.mark.fuzz
@given(
    st.sampled_from(FORMS), SCHEME, WORD, PASSWORD, WORD, WORD,
)  # fmt: skip
def test_no_message_shows_a_password(
    form: str, scheme: str, user: str, password: str, host: str, db: str
) -> None:
    fields = {"scheme": scheme, "user": user, "host": host, "db": db}
    assume(password not in form.format(password="", **fields))  # not spelled by the rest
    text = form.format(password=password, **fields)
    assert password not in said(text)
    assert password not in redact(text)


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("sqlite:///srv/shipyard/state.db", "/srv/shipyard/state.db"),
        ("sqlite:////srv/shipyard/state.db", "/srv/shipyard/state.db"),
        ("/srv/shipyard/state.db", "/srv/shipyard/state.db"),  # SHIPYARD_CATALOG's old form
        ("postgresql://alice:pw@db.example:5432/shipyard", None),
        ("postgres://db.example/shipyard?sslmode=require", None),
        ("postgresql://alice:p%2Fw%40rd@db.example/shipyard?options=a@b", None),
    ],
)
def test_the_documented_forms_are_accepted(text: str, target: str | None) -> None:
    url = parse_url(text)
    assert url.target == (target or text)
    assert url.dialect == ("sqlite" if target else "postgresql")


def test_shown_keeps_the_user_and_hides_the_password() -> None:
    shown = parse_url("postgresql://alice:s3cret@db:5432/x?sslmode=require&password=s3cret").shown
    assert shown == "postgresql://alice:***@db:5432/x?sslmode=require&password=***"


BAD = {
    "postgresq://alice:s3cretpw@db/x": "unknown scheme 'postgresq'",
    "postgresql:/alice:s3cretpw@db/x": "postgresql://",
    "postgresql://alice:s3cretpw/more@db/x": "percent-encode",
    "sqlite://alice:s3cretpw@db/x.db": "three slashes",
    "sqlite:/alice:s3cretpw@db/x.db": "three slashes",
    "sqlite:///srv/x.db?password=s3cretpw": r"takes no \?query",
    "state.db": "not an absolute path",
    "./state.db": "not an absolute path",
    "alice:s3cretpw@db/x": "unknown scheme 'alice'",
    "mysql://db/x": "unknown scheme 'mysql'",
}


@pytest.mark.parametrize(("text", "why"), list(BAD.items()))
def test_other_forms_are_refused_by_name_without_the_password(text: str, why: str) -> None:
    with pytest.raises(InvalidInput, match=why) as refused:
        parse_url(text)
    assert "s3cretpw" not in str(refused.value)


@pytest.mark.parametrize("text", list(BAD))
def test_db_status_refuses_each_and_makes_no_database(text: str, tmp_path: Path) -> None:
    env = {**os.environ, "SHIPYARD_DB": text, "SHIPYARD_HOME": str(tmp_path / "home")}
    work = tmp_path / "cwd"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "shipyard.cli.main", "db", "status"],
        cwd=work, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "s3cretpw" not in done.stderr + done.stdout
    assert list(work.iterdir()) == []  # no SQLite file made where the command ran
    assert not (tmp_path / "home").exists()


@pytest.mark.parametrize(
    "text",
    [
        "postgresql://nobody:s3cretpw@127.0.0.1:1/none",
        "postgresql://nobody@127.0.0.1:1/none?password=s3cretpw",
        "postgresql://nobody@127.0.0.1:1/none?password=s3cretpw&no_such_option=1",
        "postgresql://nobody:s3cretpw@127.0.0.1:notaport/none",
    ],
)
def test_driver_errors_do_not_show_the_password(text: str) -> None:
    with pytest.raises(DatabaseUnavailable) as failed:
        Database(text)
    assert "s3cretpw" not in str(failed.value)
    assert "127.0.0.1" in str(failed.value)


def test_a_driver_message_loses_the_password_as_written_and_decoded() -> None:
    url = parse_url("postgresql://alice:p%40ss%2Fw0rd@db/x?sslpassword=k3y-pass")
    said = url.scrub('password "p@ss/w0rd" and key "k3y-pass" refused for p%40ss%2Fw0rd')
    assert said == 'password "***" and key "***" refused for ***'
