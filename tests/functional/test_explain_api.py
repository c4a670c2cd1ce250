"""The explain routes on an in-process acceld (fake driver) on each database backend:
reasons as devices move through their life cycle and a failed Placement sync, the dry
run, 404 for an unknown profile and 400 for an unknown field (policy:
tests/functional/test_policy_sweep.py)."""

from __future__ import annotations

from acceld.objects import placement as po
from tests.stack import Stack

FPGA = [{"resources:FPGA": "1"}]


def _availability(stack: Stack, name: str) -> dict:
    got = stack.call("GET", f"/v2/device_profiles/{name}/availability")
    assert got.status_int == 200, got.text
    return got.json


def test_reasons_fit_and_dry_run(db):
    with Stack.reported(db, hosts=("h1", "h2")) as stack:
        for name, groups in (("fpga", FPGA),
                             ("odd", [{"resources:FPGA": "1",
                                       "trait:CUSTOM_NO_SUCH": "required"}]),
                             ("many", [{"resources:FPGA": "2"}])):
            assert stack.call("POST", "/v2/device_profiles",
                              [{"name": name, "groups": groups}]).status_int == 201
        before = _availability(stack, "fpga")
        assert (before["count"], before["hosts"]) == (0, [])
        assert {h["reason"] for h in before["not_fitting"]} == {"device_not_ready"}
        stack.ready_all()
        after = _availability(stack, "fpga")
        assert [(h["hostname"], h["count"]) for h in after["hosts"]] == [("h1", 1), ("h2", 1)]
        assert after["count"] == 2 and after["not_fitting"] == []
        assert {h["reason"] for h in _availability(stack, "odd")["not_fitting"]} == \
            {"missing_trait"}
        assert {h["reason"] for h in _availability(stack, "many")["not_fitting"]} == \
            {"exhausted"}
        dry = stack.call("POST", "/v2/accelerator_requests/dry_run",
                         {"device_profile_name": "fpga", "hostname": "h2"})
        assert dry.status_int == 200 and dry.json["would_bind"] is True
        assert [a["hostname"] for a in dry.json["arqs"]] == ["h2"]
        assert stack.call("GET", "/v2/accelerator_requests").json["arqs"] == []  # none made
        missing = stack.call("GET", "/v2/device_profiles/nope/availability")
        assert missing.status_int == 404
        bad = stack.call("POST", "/v2/accelerator_requests/dry_run",
                         {"device_profile_name": "fpga", "host": "h2"})
        assert bad.status_int == 400 and "host" in bad.text
        po.save_state(db, "h1", compute_rp_uuid=None, provider_digests={},
                      provider_generations={}, in_sync=False, error="Placement said 503",
                      conflicts=[], synced=False)
        synced = _availability(stack, "fpga")
        assert [(h["hostname"], h["reason"]) for h in synced["not_fitting"]] == [
            ("h1", "placement_not_synced")]
        assert [h["hostname"] for h in synced["hosts"]] == ["h2"]
