"""The pure half of Placement sync: desired tree, plan, clamping to usage."""

from __future__ import annotations

from acceld.conductor import placement_plan as pp


def _row(uuid="rp-1", num=2, schedulable=True, **attrs) -> pp.DeployableRow:
    attributes = {"rc": "CUSTOM_QAT", "trait0": "CUSTOM_QAT_X"}
    attributes.update(attrs)
    return pp.DeployableRow(rp_uuid=uuid, name=f"dep-{uuid}", num_accelerators=num,
                            attributes=tuple(sorted(attributes.items())), vendor="8086",
                            model="4941", schedulable=schedulable)


def test_desired_provider_inventory_and_traits():
    p = pp.desired_provider(_row())
    assert p.inventories == {"CUSTOM_QAT": {"total": 2, "reserved": 0, "min_unit": 1,
                                            "max_unit": 2, "step_size": 1,
                                            "allocation_ratio": 1.0}}
    assert p.traits == {"OWNER_CYBORG", "CUSTOM_QAT_X", "CUSTOM_VENDOR_8086",
                        "CUSTOM_PRODUCT_8086_4941"}


def test_not_schedulable_reserves_everything():
    inv = pp.desired_provider(_row(schedulable=False)).inventories["CUSTOM_QAT"]
    assert inv["reserved"] == inv["total"] == 2


def test_names_are_normalised():
    p = pp.desired_provider(_row(rc="qat", trait0="fpga-blue", trait1="HW_GPU_API_VULKAN"))
    assert set(p.inventories) == {"CUSTOM_QAT"}
    assert {"CUSTOM_FPGA_BLUE", "HW_GPU_API_VULKAN"} <= p.traits
    assert set(pp.desired_provider(_row(rc="PGPU")).inventories) == {"PGPU"}


def test_no_rc_or_zero_count_means_no_inventory():
    assert pp.desired_provider(_row(num=0)).inventories == {}


def test_plan_for_a_new_provider_creates_and_writes_both():
    desired = pp.desired_tree([_row()])
    plan = pp.plan(desired, {})
    assert [p.uuid for p in plan.create] == ["rp-1"]
    assert [p.uuid for p in plan.set_inventories] == ["rp-1"]
    assert [p.uuid for p in plan.set_traits] == ["rp-1"]
    assert plan.custom_classes == {"CUSTOM_QAT"}
    assert "OWNER_CYBORG" not in plan.custom_traits


def test_plan_trusts_digests_when_placement_was_not_read():
    desired = pp.desired_tree([_row()])
    actual = {"rp-1": pp.ActualProvider("rp-1", 3)}
    assert pp.plan(desired, actual, {"rp-1": desired["rp-1"].digest()}).is_empty()
    assert not pp.plan(desired, actual, {"rp-1": "stale"}).is_empty()


def test_full_plan_compares_what_placement_has():
    want = pp.desired_provider(_row())
    same = pp.ActualProvider("rp-1", 1, dict(want.inventories), want.traits)
    assert pp.plan({"rp-1": want}, {"rp-1": same}).is_empty()
    drifted = pp.ActualProvider("rp-1", 1, dict(want.inventories), frozenset({"X"}))
    plan = pp.plan({"rp-1": want}, {"rp-1": drifted})
    assert plan.set_traits and not plan.set_inventories


def test_providers_no_longer_desired_are_deleted():
    plan = pp.plan({}, {"rp-9": pp.ActualProvider("rp-9", 0)})
    assert plan.delete == ["rp-9"]


def test_clamp_never_lowers_below_usage():
    want = pp.desired_provider(_row(num=2)).inventories
    kept, held = pp.clamp_to_usage(want, {"CUSTOM_QAT": 3})
    assert kept["CUSTOM_QAT"]["total"] == 3 and kept["CUSTOM_QAT"]["reserved"] == 3
    assert held and "3 allocated" in held[0]
    kept, held = pp.clamp_to_usage({}, {"CUSTOM_QAT": 1})
    assert kept["CUSTOM_QAT"]["total"] == 1 and held
    assert pp.clamp_to_usage(want, {"CUSTOM_QAT": 1}) == (want, [])
