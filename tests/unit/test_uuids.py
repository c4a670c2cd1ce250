"""``acceld.uuids``: the same strings as ``uuid.uuid4()`` and ``uuid.UUID`` give."""

from __future__ import annotations

import uuid

import pytest

from acceld import uuids


def test_random_uuids_are_version_4_in_canonical_form_and_distinct() -> None:
    made = [uuids.random_uuid() for _ in range(4000)]
    assert len(set(made)) == len(made)
    variants = set()
    for value in made:
        parsed = uuid.UUID(value)
        assert str(parsed) == value
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        variants.add(value[19])
    assert variants == set("89ab")          # every variant digit turns up


@pytest.mark.parametrize("value", [
    "5302349f-b205-4624-8d40-aa728d560618",       # canonical already
    "5302349F-B205-4624-8D40-AA728D560618",       # upper case
    "5302349fb20546248d40aa728d560618",           # no hyphens
    "{5302349f-b205-4624-8d40-aa728d560618}",     # braces
    "urn:uuid:5302349f-b205-4624-8d40-aa728d560618",
])
def test_canonical_is_what_uuid_uuid_writes(value: str) -> None:
    assert uuids.canonical(value) == str(uuid.UUID(value))


@pytest.mark.parametrize("value", [
    "", "dp1", "5302349f-b205-4624-8d40-aa728d56061", "5302349f-b205-4624-8d40-aa728d5606189",
    "5302349g-b205-4624-8d40-aa728d560618", "5302349f-b205-4624-8d40-aa728d560618\n",
    "5302349f-b205-4624-8d40-aa728d560618,dp2",
])
def test_canonical_is_none_for_what_uuid_uuid_refuses(value: str) -> None:
    with pytest.raises(ValueError):
        uuid.UUID(value)
    assert uuids.canonical(value) is None
