"""The agent journal: atomic, versioned, survives restarts, dedups operations."""

from __future__ import annotations

import json
import os

import pytest

from acceld.agent import journal as jmod
from acceld.agent.journal import Journal


def _op(op_id: str = "op-1") -> dict:
    return {"op_id": op_id, "device_uuid": "d", "host": "h", "driver": "fake",
            "identity": "0000:3b:00.0", "operation": "install"}


def test_versions_are_guarded():
    assert jmod.JOURNAL_VERSIONS == (1, 2)
    for version in jmod.JOURNAL_VERSIONS:
        assert f"* {version}:" in jmod.__doc__


def test_new_journal_has_epoch_and_survives_reopen(tmp_path):
    j = Journal(str(tmp_path))
    assert j.next_seq() == 1 and j.next_seq() == 2
    j2 = Journal(str(tmp_path))
    assert (j2.epoch, j2.seq) == (j.epoch, 2)
    assert Journal(str(tmp_path / "other")).epoch != j.epoch


def test_operation_life_cycle_and_dedup(tmp_path):
    j = Journal(str(tmp_path))
    assert j.begin(_op())
    assert not j.begin(_op())                 # in flight: not run twice
    assert Journal(str(tmp_path)).inflight() == [_op()]   # a crash here is detected
    j.finish(_op(), ok=True, error=None)
    assert j.inflight() == []
    assert [r["op"]["op_id"] for r in Journal(str(tmp_path)).results()] == ["op-1"]
    assert not j.begin(_op())                 # finished, not yet delivered
    j.delivered("op-1")
    assert j.results() == []
    assert not j.begin(_op())                 # delivered: remembered


def test_done_list_is_bounded(tmp_path):
    j = Journal(str(tmp_path))
    for i in range(jmod._DONE_KEEP + 10):
        op = _op(f"op-{i}")
        j.begin(op)
        j.finish(op, True, None)
        j.delivered(op["op_id"])
    with open(j.path) as f:
        assert len(json.load(f)["done"]) == jmod._DONE_KEEP


def test_writes_are_atomic_files(tmp_path):
    j = Journal(str(tmp_path))
    j.set_driver("fake", "uninstalled")
    assert [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")] == []
    assert Journal(str(tmp_path)).driver_overrides() == {"fake": "uninstalled"}


def test_unknown_version_is_refused(tmp_path):
    (tmp_path / "journal.json").write_text(json.dumps({"version": 99}))
    with pytest.raises(RuntimeError, match="unknown version"):
        Journal(str(tmp_path))


def test_a_version_1_journal_is_upgraded_in_place(tmp_path):
    j = Journal(str(tmp_path))
    j.begin(_op("inflight"))
    j.begin(_op("finished"))
    j.finish(_op("finished"), ok=True, error=None)
    with open(j.path) as f:
        data = json.load(f)
    data["version"] = 1
    for op in data["inflight"].values():
        op.pop("kind", None)
    (tmp_path / "journal.json").write_text(json.dumps(data))
    upgraded = Journal(str(tmp_path))
    assert [jmod.kind_of(op) for op in upgraded.inflight()] == [jmod.KIND_TRANSITION]
    assert upgraded.results()[0]["op"]["kind"] == jmod.KIND_TRANSITION
    with open(j.path) as f:
        assert json.load(f)["version"] == jmod.JOURNAL_VERSION
    assert upgraded.epoch == j.epoch


def test_drop_forgets_an_operation_without_a_result(tmp_path):
    j = Journal(str(tmp_path))
    op = dict(_op("h1"), kind=jmod.KIND_PREPARE)
    j.begin(op)
    assert Journal(str(tmp_path)).inflight() == [op]
    j.drop("h1")
    assert Journal(str(tmp_path)).inflight() == [] and j.results() == []
    j.drop("h1")        # idempotent


def test_finish_if_inflight_lets_the_first_finisher_win(tmp_path):
    j = Journal(str(tmp_path))
    op = dict(_op("p1"), kind=jmod.KIND_PROGRAM)
    j.begin(op)
    assert j.finish_if_inflight(op, False, "watchdog")
    assert not j.finish_if_inflight(op, True, None)
    assert [(r["ok"], r["error"]) for r in j.results()] == [(False, "watchdog")]
