"""The microversion list and negotiation (acceld/api/microversion.py)."""

from __future__ import annotations

import pytest

from acceld.api import errors, microversion
from acceld.api.microversion import Version


def test_version_list_is_guarded() -> None:
    # Adding a version is a deliberate act: update this list, the gabbits and api-v2.md.
    assert microversion.VERSIONS == ["2.0", "2.1", "2.2", "2.3"]
    assert (microversion.MIN_VERSION, microversion.MAX_VERSION) == (Version(2, 0),
                                                                     Version(2, 3))


def test_versions_are_consecutive_minors() -> None:
    parsed = [microversion.parse(v) for v in microversion.VERSIONS]
    assert parsed == [Version(2, i) for i in range(len(parsed))]


@pytest.mark.parametrize(("header", "expected"), [
    (None, "2.0"),
    ("accelerator 2.1", "2.1"),
    ("Accelerator 2.3", "2.3"),
    ("accelerator latest", "2.3"),
    ("accelerator LATEST", "2.3"),
    ("2.2", "2.2"),                         # bare X.Y: deprecated, still accepted
    ("latest", "2.3"),
    ("compute 2.60", "2.0"),                # another service's version only
    ("compute 2.60, accelerator 2.2", "2.2"),
])
def test_negotiate(header: str | None, expected: str) -> None:
    assert str(microversion.negotiate(header)) == expected


@pytest.mark.parametrize(("header", "detail"), [
    ("accelerator 10", "Invalid value for OpenStack-API-Version header"),
    ("accelerator 2.x", "Invalid value for OpenStack-API-Version header"),
    ("accelerator +2.1", "Invalid value for OpenStack-API-Version header"),
    ("accelerator 2.1.0", "Invalid value for OpenStack-API-Version header"),
    ("accelerator 3.0", "Mutually exclusive versions requested. Version 3.0"),
    ("accelerator 1.0", "Mutually exclusive versions requested. Version 1.0"),
    ("accelerator 2.4", "Version 2.4 was requested but the minor version is not supported "
                        "by this service. The supported version range is: [2.0, 2.3]."),
])
def test_negotiate_not_acceptable(header: str, detail: str) -> None:
    with pytest.raises(errors.HTTPError) as info:
        microversion.negotiate(header)
    assert info.value.status == 406
    assert detail in info.value.detail
    assert info.value.headers["OpenStack-API-Minimum-Version"] == "2.0"
    assert info.value.headers["OpenStack-API-Maximum-Version"] == "2.3"


def test_headers() -> None:
    assert microversion.headers(Version(2, 1)) == {
        "OpenStack-API-Minimum-Version": "2.0", "OpenStack-API-Maximum-Version": "2.3",
        "OpenStack-API-Version": "accelerator 2.1", "Vary": "OpenStack-API-Version"}
    assert "OpenStack-API-Version" not in microversion.headers(None)
