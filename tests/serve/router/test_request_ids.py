"""The request-id parser takes any header value: a well-formed id is kept, anything else is
replaced by a fresh id, and nothing raises."""

import string

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from shipyard.errors import InvalidInput
from shipyard.serve.request_id import MAX_LENGTH, check_request_id, request_id, well_formed

SAFE = string.ascii_letters + string.digits + "._-"
IDS = st.text(SAFE, min_size=1, max_size=MAX_LENGTH).filter(lambda s: s[0] not in "._-")


@pytest.mark.fuzz
@given(st.one_of(st.text(), st.binary().map(lambda b: b.decode("latin-1")), IDS))
@example("")
@example("a" * (MAX_LENGTH + 1))
@example("ok\n")
@example("١٢٣")  # digits outside ASCII
@example("-rf")
def test_any_header_value_gives_a_well_formed_id(value: str) -> None:
    rid = request_id({"x-request-id": value})
    assert well_formed(rid)
    assert (rid == value) == well_formed(value)
    if well_formed(value):
        assert check_request_id(value) == value
        assert len(value) <= MAX_LENGTH and set(value) <= set(SAFE)
    else:
        with pytest.raises(InvalidInput) as refused:
            check_request_id(value)
        assert "\n" not in str(refused.value)


@pytest.mark.fuzz
@given(IDS)
def test_every_well_formed_id_is_kept(value: str) -> None:
    assert request_id({"x-request-id": value}) == value


def test_a_missing_id_is_made_fresh() -> None:
    first, second = request_id({}), request_id({})
    assert well_formed(first) and well_formed(second) and first != second
