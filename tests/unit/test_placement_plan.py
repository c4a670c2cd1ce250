"""The pure half of Placement sync: desired tree, plan, clamping to usage."""

from __future__ import annotations

from acceld.conductor import placement_sync as ps


def _row(uuid="rp-1", num=2, schedulable=True, **attrs) -> ps.DeployableRow:
    attributes = {"rc": "CUSTOM_QAT", "trait0": "CUSTOM_QAT_X"}
    attributes.update(attrs)
    return ps.DeployableRow(rp_uuid=uuid, name=f"dep-{uuid}", num_accelerators=num,
                            attributes=tuple(sorted(attributes.items())), vendor="8086",
                            model="4941", schedulable=schedulable)


def test_desired_provider_inventory_and_traits():
    p = ps.desired_provider(_row())
    assert p.inventories == {"CUSTOM_QAT": {"total": 2, "reserved": 0, "min_unit": 1,
                                            "max_unit": 2, "step_size": 1,
                                            "allocation_ratio": 1.0}}
    assert p.traits == {"OWNER_CYBORG", "CUSTOM_QAT_X", "CUSTOM_VENDOR_8086",
                        "CUSTOM_PRODUCT_8086_4941"}


def test_not_schedulable_reserves_everything():
    inv = ps.desired_provider(_row(schedulable=False)).inventories["CUSTOM_QAT"]
    assert inv["reserved"] == inv["total"] == 2


def test_names_are_normalised():
    p = ps.desired_provider(_row(rc="qat", trait0="fpga-blue", trait1="HW_GPU_API_VULKAN"))
    assert set(p.inventories) == {"CUSTOM_QAT"}
    assert {"CUSTOM_FPGA_BLUE", "HW_GPU_API_VULKAN"} <= p.traits
    assert set(ps.desired_provider(_row(rc="PGPU")).inventories) == {"PGPU"}


def test_no_rc_or_zero_count_means_no_inventory():
    assert ps.desired_provider(_row(num=0)).inventories == {}


def test_plan_for_a_new_provider_creates_and_writes_both():
    desired = ps.desired_tree([_row()])
    plan = ps.plan(desired, {})
    assert [p.uuid for p in plan.create] == ["rp-1"]
    assert [p.uuid for p in plan.set_inventories] == ["rp-1"]
    assert [p.uuid for p in plan.set_traits] == ["rp-1"]
    assert plan.custom_classes == {"CUSTOM_QAT"}
    assert "OWNER_CYBORG" not in plan.custom_traits


def test_plan_trusts_digests_when_placement_was_not_read():
    desired = ps.desired_tree([_row()])
    actual = {"rp-1": ps.ActualProvider("rp-1", 3)}
    assert ps.plan(desired, actual, {"rp-1": desired["rp-1"].digest()}).is_empty()
    assert not ps.plan(desired, actual, {"rp-1": "stale"}).is_empty()


def test_full_plan_compares_what_placement_has():
    want = ps.desired_provider(_row())
    same = ps.ActualProvider("rp-1", 1, dict(want.inventories), want.traits)
    assert ps.plan({"rp-1": want}, {"rp-1": same}).is_empty()
    drifted = ps.ActualProvider("rp-1", 1, dict(want.inventories), frozenset({"X"}))
    plan = ps.plan({"rp-1": want}, {"rp-1": drifted})
    assert plan.set_traits and not plan.set_inventories


def test_providers_no_longer_desired_are_deleted():
    plan = ps.plan({}, {"rp-9": ps.ActualProvider("rp-9", 0)})
    assert plan.delete == ["rp-9"]


def test_clamp_never_lowers_below_usage():
    want = ps.desired_provider(_row(num=2)).inventories
    kept, held = ps.clamp_to_usage(want, {"CUSTOM_QAT": 3})
    assert kept["CUSTOM_QAT"]["total"] == 3 and kept["CUSTOM_QAT"]["reserved"] == 3
    assert held and "3 allocated" in held[0]
    kept, held = ps.clamp_to_usage({}, {"CUSTOM_QAT": 1})
    assert kept["CUSTOM_QAT"]["total"] == 1 and held
    assert ps.clamp_to_usage(want, {"CUSTOM_QAT": 1}) == (want, [])
