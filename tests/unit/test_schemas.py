"""The request schemas (v1, and what every v1 and v2 schema must be), and the version
lists guarded by tests."""

from __future__ import annotations

import re

import pytest
import regress

from acceld import rpc, validation
from acceld.api import errors, schemas, util
from acceld.api.schemas import v1, v2

UUID = "8e45a2ea-5364-4b0d-a252-bf8becaa606e"


@pytest.mark.parametrize("schema,body", [
    (v1.CREATE, {"name": "IPSec Card"}),
    (v1.CREATE, {"name": "IPSec Card", "uuid": UUID}),
    (v1.UPDATE_SPECS, {"acc_specs": {"num": 1}, "revision": 3}),
    (v1.SET_STATE, {"state": "ready"}),
    (v1.ATTACH, {"instance_uuid": UUID}),
    (v1.ATTACH, {"host": "compute-1"}),
    (v1.DRIVER_ACTION, {"action": "install", "host": "h"}),
])
def test_valid_bodies(schema, body):
    util.validate(body, schema, "body")


@pytest.mark.parametrize("schema,body,mentions", [
    (v1.CREATE, {}, "name"),
    (v1.CREATE, {"name": ""}, "name"),
    (v1.CREATE, {"name": "x", "uuid": "nope"}, "uuid"),
    (v1.CREATE, {"name": "x", "extra": 1}, "extra"),
    (v1.UPDATE_SPECS, {"acc_specs": []}, "acc_specs"),
    (v1.UPDATE_SPECS, {"acc_specs": {}, "revision": 0}, "revision"),
    (v1.SET_STATE, {"state": "installing"}, "state"),
    (v1.ATTACH, {}, "body"),
    (v1.ATTACH, {"instance_uuid": UUID, "host": "h"}, "body"),
    (v1.DRIVER_ACTION, {"action": "reboot"}, "action"),
])
def test_invalid_bodies_name_the_problem(schema, body, mentions):
    with pytest.raises(errors.HTTPError) as info:
        util.validate(body, schema, "body")
    assert info.value.status == 400
    assert mentions in info.value.detail


def test_list_query_rejects_unknown_and_bad_limit():
    util.validate({"limit": "10", "host": "h"}, v1.LIST_QUERY, "query")
    for bad in ({"colour": "red"}, {"limit": "0"}, {"limit": "abc"}, {"state": "nope"}):
        with pytest.raises(errors.HTTPError):
            util.validate(bad, v1.LIST_QUERY, "query")


def test_rpc_versions_are_guarded():
    assert rpc.RPC_API_VERSIONS == ("1.0", "1.1", "1.2", "1.3", "1.4")
    for version in rpc.RPC_API_VERSIONS:
        assert f"* {version}:" in rpc.__doc__


# -- every schema: portable patterns, bounded numbers, the character rules --------------------

def _schemas() -> list[tuple[str, dict]]:
    return [(f"{module.__name__}.{name}", value)
            for module in (v1, v2) for name, value in vars(module).items()
            if name.isupper() and isinstance(value, dict)]


def _walk(schema, path=""):
    """Every (path, subschema) of ``schema``."""
    if isinstance(schema, dict):
        yield path, schema
        for key, value in schema.items():
            yield from _walk(value, f"{path}/{key}")
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            yield from _walk(value, f"{path}/{index}")


def _patterns() -> dict[str, str]:
    return {f"{name}{path}": sub["pattern"] for name, schema in _schemas()
            for path, sub in _walk(schema) if isinstance(sub.get("pattern"), str)}


SAMPLES = ["", "a", "abc", "abc\n", "\nabc", "a b", " ", "ok-name_1", "a\x00b", "a\tb",
           "line\r\n", "a\x7fb", "a\x85b", "a\u202eb", "a\u2067b", "\u00e9t\u00e9",
           "\U0001F680", "/images/a.bin", "images/a", "/a\x1bb", UUID, UUID.upper(),
           UUID.replace("-", ""), UUID + "\n", "0" * 64, "0" * 64 + "\n", "12", "12\n",
           "0", "1" * 19]


@pytest.mark.parametrize("where,pattern", sorted(_patterns().items()))
def test_patterns_mean_the_same_in_python_and_ecma(where, pattern):
    """JSON Schema patterns are ECMA-262 (what an OpenAPI client reads); acceld checks
    them with Python's re: both must accept exactly the same strings."""
    ecma = regress.Regex(pattern, flags="u")
    python = re.compile(pattern)
    for sample in SAMPLES:
        assert (python.search(sample) is not None) == (ecma.find(sample) is not None), \
            (where, sample)


def test_no_pattern_lets_a_final_line_feed_through():
    """Python's "$" also matches before a final line feed; no pattern ends with it (free
    text, which may hold line feeds, aside)."""
    for where, pattern in _patterns().items():
        if re.search(pattern, "a\nb"):
            continue
        if re.search(pattern, "abc") or re.search(pattern, UUID) or \
                re.search(pattern, "0" * 64):
            for sample in ("abc\n", UUID + "\n", "0" * 64 + "\n"):
                assert not re.search(pattern, sample), (where, sample)


def test_every_number_is_bounded():
    """No integer or number reaches a database (or a string column as text) unbounded."""
    for name, schema in _schemas():
        for path, sub in _walk(schema):
            types = sub.get("type")
            types = types if isinstance(types, list) else [types]
            if {"integer", "number"} & {t for t in types if isinstance(t, str)}:
                assert "minimum" in sub and "maximum" in sub, f"{name}{path}"


@pytest.mark.parametrize("value,ok", [
    ("GPU card 1", True), ("caf\u00e9 \U0001F680", True), ("a\tb", False),
    ("a\nb", False), ("ab\n", False), ("a\x7fb", False), ("a\x9fb", False),
    ("a\u202eb", False), ("a\u2066b\u2069", False), ("a\u200fb", True),
])
def test_name_characters(value, ok):
    schema = {"type": "object", "properties": {"n": schemas.name()}}
    assert validation.conforms({"n": value}, schema) is ok
    if not ok:
        with pytest.raises(errors.HTTPError) as info:
            util.validate({"n": value}, schema, "body")
        assert "'n'" in info.value.detail and "does not take" in info.value.detail


@pytest.mark.parametrize("value,ok", [
    ("two\nlines\ttab\r\n", True), ("\u202bRTL\u202c", True), ("a\x07", False),
    ("a\x1b[0m", False), ("a\x85", False),
])
def test_free_text_characters(value, ok):
    schema = {"type": "object", "properties": {"t": {"type": "string",
                                                     "pattern": schemas.TEXT_CHARS}}}
    assert validation.conforms({"t": value}, schema) is ok


def test_an_error_repeats_only_a_prefix_of_the_value():
    long = "x" * 10_000
    with pytest.raises(errors.HTTPError) as info:
        util.validate({"name": long}, v1.CREATE, "body")
    assert "too long" in info.value.detail and len(info.value.detail) < 200
