"""acceld.validation: the compiled check decides as jsonschema does; the first problem is stable."""

from __future__ import annotations

import copy

import jsonschema
import pytest

from acceld import reports, validation
from tests.unit.test_reports import _v3_report


def _report() -> dict:
    return _v3_report().to_dict()


@pytest.mark.parametrize("mutate", [
    lambda d: None,
    lambda d: d.update(seq=True),                     # a bool is not an integer
    lambda d: d.update(seq=1.0),                      # 1.0 is one (draft 2020-12)
    lambda d: d.update(seq=-1),
    lambda d: d.update(host=""),
    lambda d: d.update(epoch="e" * 65),
    lambda d: d["drivers"][0].update(capabilities=["host_work", "host_work"]),
    lambda d: d["drivers"][0]["devices"][0].update(type="TOASTER"),
    lambda d: d["drivers"][0]["devices"][0]["health"].update(reasons=[1]),
    lambda d: d["drivers"][0].update(explanation=None),
    lambda d: d["drivers"][0]["explanation"].update(expected=None),
    lambda d: d["drivers"][0]["explanation"].update(found="4"),
])
def test_the_compiled_check_decides_as_jsonschema_does(mutate):
    data = copy.deepcopy(_report())
    mutate(data)
    expected = jsonschema.Draft202012Validator(reports.REPORT_SCHEMA).is_valid(data)
    assert validation.conforms(data, reports.REPORT_SCHEMA) is expected
    assert (validation.first_problem(data, reports.REPORT_SCHEMA) is None) is expected


def test_the_first_problem_is_the_one_at_the_smallest_path():
    data = _report()
    data["seq"] = -1
    data["drivers"][0]["state"] = "sleepy"
    data["host"] = ""
    # drivers/0/state < host < seq as paths, whatever order jsonschema finds them in
    assert validation.first_problem(data, reports.REPORT_SCHEMA).startswith("drivers/0/state")
    del data["drivers"]
    assert validation.first_problem(data, reports.REPORT_SCHEMA).startswith("<root>: ")


def test_nothing_is_worded_for_a_valid_document():
    assert list(validation.problems(_report(), reports.REPORT_SCHEMA)) == []
