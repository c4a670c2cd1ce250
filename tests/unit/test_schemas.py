"""The v1 request schemas, and the version lists guarded by tests."""

from __future__ import annotations

import pytest

from acceld import rpc
from acceld.api import errors, util
from acceld.api.schemas import v1

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
    assert rpc.RPC_API_VERSIONS == ("1.0", "1.1", "1.2")
    for version in rpc.RPC_API_VERSIONS:
        assert f"* {version}:" in rpc.__doc__
