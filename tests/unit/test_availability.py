"""Explain's rules (``acceld.conductor.availability``) on hand-made rows: each check is
the first reason where it should be and only there, the order of the checks, the
packing (counts, ``group_policy``) and the dry run's choice of host."""

from __future__ import annotations

import dataclasses

import pytest

from acceld import states
from acceld.conductor import availability as fit
from acceld.objects.availability import Fleet, HostRow

GPU = [{"resources:PGPU": "1", "trait:CUSTOM_GPU_A": "required"}]


def _host(name: str = "h1", **kw) -> HostRow:
    return HostRow(**{"host": name, "agent_alive": True, "failed_drivers": frozenset(),
                      "placement_in_sync": True, **kw})


def _rp(name: str = "gpu0", host: str = "h1", rc: str = "PGPU", size: int = 1,
        traits: tuple[str, ...] = ("CUSTOM_GPU_A",), **kw) -> dict:
    """A provider's fields as ``objects.availability.read_fleet`` reads them."""
    attributes = (("rc", rc),) + tuple((f"trait{i}", t) for i, t in enumerate(traits))
    return {
        "host": host, "rp_uuid": f"rp-{host}-{name}", "name": name,
        "num_accelerators": size, "attributes": attributes, "vendor": "", "model": "",
        "device_uuid": f"dev-{host}-{name}", "driver": "nvidia", "state": states.READY,
        "status": states.DEVICE_STATUS_ENABLED, "health": states.HEALTH_OK,
        "lifecycle": states.LIFECYCLE_HEALTHY, "maintenance": False,
        "guest_handles": size, "free_guest_handles": size, "in_use": 0, **kw}


def _fit(host: HostRow, rows: list[dict], groups=GPU, policy: str = "none") -> dict:
    return fit.host_fit(host, [fit.provider_row(r) for r in rows], fit.parse_groups(groups),
                        policy)


def _reason(host: HostRow, rows: list[dict], groups=GPU) -> str:
    answer = _fit(host, rows, groups)
    assert answer["count"] == 0, answer
    return answer["reason"]["code"]


def test_a_healthy_provider_fits_as_often_as_it_has_free_units() -> None:
    answer = _fit(_host(), [_rp(size=3, in_use=1, free_guest_handles=2)])
    assert answer["count"] == 2 and [[r.name for r in p] for p in answer["placements"]] \
        == [["gpu0"], ["gpu0"]]


@pytest.mark.parametrize(("host", "row", "code"), [
    (dict(agent_alive=False), {}, "agent_down"),
    (dict(placement_in_sync=False), {}, "placement_not_synced"),
    ({}, dict(rc="FPGA"), "no_resource_class"),
    ({}, dict(traits=()), "missing_trait"),
    (dict(failed_drivers=frozenset({"fpga"})), {}, None),       # another driver failed
    (dict(failed_drivers=frozenset({"nvidia"})), {}, "driver_failed"),
    ({}, dict(state="installing"), "device_not_ready"),
    ({}, dict(status="maintenance"), "device_disabled"),
    ({}, dict(health=states.HEALTH_FAILED), "device_unhealthy"),
    ({}, dict(health=states.HEALTH_DEGRADED), None),          # degraded still serves
    ({}, dict(lifecycle=states.LIFECYCLE_QUARANTINED), "device_quarantined"),
    ({}, dict(lifecycle=states.LIFECYCLE_RESETTING), "device_quarantined"),
    ({}, dict(lifecycle=states.LIFECYCLE_FAILED), "device_quarantined"),
    ({}, dict(lifecycle=states.LIFECYCLE_SUSPECT), None),      # suspect still serves
    ({}, dict(maintenance=True), "device_drained"),
    ({}, dict(guest_handles=0, free_guest_handles=0), "no_guest_handles"),
    ({}, dict(in_use=1, free_guest_handles=0), "exhausted"),
])
def test_each_check_is_the_reason_of_its_fault(host: dict, row: dict, code: str | None
                                               ) -> None:
    answer = _fit(_host(**host), [_rp(**row)])
    if code is None:
        assert answer["count"] == 1
    else:
        assert (answer["count"], answer["reason"]["code"]) == (0, code), answer


def test_an_unknown_agent_or_sync_state_is_no_reason() -> None:
    """No agent row, or never synced (Placement off): acceld does not know it is down."""
    assert _fit(_host(agent_alive=None, placement_in_sync=None), [_rp()])["count"] == 1


def test_forbidden_trait() -> None:
    groups = [{"resources:PGPU": "1", "trait:CUSTOM_GPU_A": "forbidden"}]
    answer = _fit(_host(), [_rp()], groups)
    assert answer["reason"]["code"] == "forbidden_trait"
    assert "CUSTOM_GPU_A" in answer["reason"]["detail"]


def test_the_first_failing_check_in_the_list_is_the_reason() -> None:
    """A failed driver's device that is also not ready and unhealthy: driver_failed; a
    host whose agent is down and not synced: agent_down."""
    row = _rp(state="error", health=states.HEALTH_FAILED)
    assert _reason(_host(failed_drivers=frozenset({"nvidia"})), [row]) == "driver_failed"
    assert _reason(_host(agent_alive=False, placement_in_sync=False), [row]) == "agent_down"
    codes = [c.code for c in fit.CHECKS]
    assert codes.index("driver_failed") < codes.index("device_not_ready") \
        < codes.index("exhausted")


def test_the_reason_is_of_the_provider_that_got_furthest() -> None:
    """One provider lacks the class, another is only full: the host is exhausted, named
    by that provider."""
    fpga = _rp("fpga0", rc="FPGA")
    full = _rp("gpu1", in_use=1, free_guest_handles=0)
    answer = _fit(_host(), [fpga, full])
    assert answer["reason"]["code"] == "exhausted"
    assert answer["reason"]["provider"] == full["rp_uuid"]


def test_a_host_without_devices() -> None:
    answer = _fit(_host(), [])
    assert answer["reason"]["code"] == "no_resource_class"
    assert answer["reason"]["provider"] is None


def test_group_policy_isolate_needs_a_provider_per_group() -> None:
    """Two one-unit groups: one provider of two units serves both with "none", not with
    "isolate"; with a second provider, "isolate" fits once (one unit of each is left)."""
    two_groups = [{"resources:PGPU": "1"}, {"resources:PGPU": "1"}]
    big = _rp("gpu0", size=2)
    assert _fit(_host(), [big], two_groups, "none")["count"] == 1
    isolated = _fit(_host(), [big], two_groups, "isolate")
    assert isolated["count"] == 0 and isolated["reason"]["code"] == "exhausted"
    both = _fit(_host(), [big, _rp("gpu1")], two_groups, "isolate")
    assert both["count"] == 1
    assert {r.name for r in both["placements"][0]} == {"gpu0", "gpu1"}


def test_groups_that_fit_apart_but_not_together() -> None:
    groups = [{"resources:PGPU": "1"}, {"resources:PGPU": "1"}]
    answer = _fit(_host(), [_rp(size=1)], groups)
    assert answer["count"] == 0 and answer["reason"]["code"] == "exhausted"
    assert answer["reason"]["group"] is None


def test_parse_groups_leaves_out_groups_asking_for_nothing() -> None:
    groups = fit.parse_groups([{"resources:PGPU": "0"},
                               {"resources:FPGA": "2", "trait:CUSTOM_X": "forbidden",
                                "trait:CUSTOM_Y": "required"}])
    assert [(g.index, dict(g.resources), g.required, g.forbidden) for g in groups] == [
        (1, {"FPGA": 2}, frozenset({"CUSTOM_Y"}), frozenset({"CUSTOM_X"}))]
    nothing = _fit(_host(), [_rp()], [{"resources:PGPU": "0"}])
    assert nothing["reason"]["code"] == "nothing_requested"


def _fleet(*hosts: tuple[HostRow, list[dict]]) -> Fleet:
    return Fleet(hosts={h.host: h for h, _ in hosts},
                 providers=[row for _, rows in hosts for row in rows])


def test_availability_sums_hosts_and_lists_the_others_with_their_reason() -> None:
    fleet = _fleet((_host("h1"), [_rp(host="h1", size=2)]),
                   (_host("h2"), [_rp(host="h2", health=states.HEALTH_FAILED)]),
                   (_host("h3", agent_alive=False), [_rp(host="h3")]))
    answer = fit.availability({"name": "gpu", "uuid": "u", "groups": GPU}, fleet)
    assert answer["count"] == 2
    assert answer["hosts"] == [{"hostname": "h1", "count": 2,
                                "device_rp_uuids": ["rp-h1-gpu0"]}]
    assert [(h["hostname"], h["reason"]) for h in answer["not_fitting"]] == [
        ("h2", "device_unhealthy"), ("h3", "agent_down")]


def test_dry_run_picks_the_roomiest_host_or_says_why_not() -> None:
    profile = {"name": "gpu", "uuid": "u", "groups": GPU}
    fleet = _fleet((_host("h1"), [_rp(host="h1")]), (_host("h2"), [_rp(host="h2", size=2)]),
                   (_host("h3"), [_rp(host="h3", state="installing")]))
    best = fit.dry_run(profile, fleet)
    assert (best["would_bind"], best["hostname"]) == (True, "h2")
    assert best["arqs"] == [{"device_profile_group_id": 0, "hostname": "h2",
                             "device_rp_uuid": "rp-h2-gpu0", "device_uuid": "dev-h2-gpu0"}]
    on_h3 = fit.dry_run(profile, fleet, hostname="h3")
    assert (on_h3["would_bind"], on_h3["reason"]) == (False, "device_not_ready")
    nowhere = fit.dry_run(profile, fleet, hostname="h9")
    assert (nowhere["would_bind"], nowhere["reason"]) == (False, "no_host")
    full = dataclasses.replace(fleet, providers=[
        dict(r, free_guest_handles=0, in_use=r["num_accelerators"]) for r in fleet.providers])
    assert fit.dry_run(profile, full)["reason"] == "no_host"
