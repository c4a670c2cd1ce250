"""Check a stestr run of ``nova_accelerator_tests`` (run.sh): exactly Nova 34's 56
accelerator functional tests ran, each under its Nova class and method name, and all
passed. Prints a summary per class; exit status 0 only then.

Usage: python check_results.py RESULTS.subunit   (in Nova's environment)
"""

# isort: off
import nova.tests.functional  # noqa: F401  (eventlet monkey patching first, as Nova needs)
# isort: on

import collections
import sys
import unittest

import subunit
import testtools
from nova.tests.functional import test_servers
from nova.tests.functional.regressions import test_bug_2140631

EXPECTED_COUNT = 56
MODULE = "tests.nova_functional.nova_accelerator_tests."
CLASSES = (
    test_servers.AcceleratorServerTest,
    test_servers.AcceleratorServerReschedTest,
    test_servers.AcceleratorServerOpsTest,
    test_servers.TwoPortsAcceleratorServerOpsTest,
    test_servers.PortAcceleratorServerOpsTest,
    test_servers.PortAcceleratorServerCreateRejectTest,
    test_servers.PortAndFlavorAccelsServerCreateTest,
    test_bug_2140631.TestBug2140631Cyborg,
)


def expected_tests() -> set[str]:
    loader = unittest.TestLoader()
    return {f"{cls.__name__}.{name}" for cls in CLASSES
            for name in loader.getTestCaseNames(cls)}


def read_results(path: str) -> dict[str, str]:
    statuses: dict[str, str] = {}

    def on_test(test: dict) -> None:
        statuses[test["id"]] = test["status"]

    with open(path, "rb") as stream:
        case = subunit.ByteStreamToStreamResult(stream, non_subunit_name="stdout")
        result = testtools.StreamToDict(on_test)
        result.startTestRun()
        try:
            case.run(result)
        finally:
            result.stopTestRun()
    return statuses


def main(path: str) -> int:
    expected = expected_tests()
    statuses = read_results(path)
    ran = {tid.removeprefix(MODULE).split("(")[0]: status
           for tid, status in statuses.items()}
    per_class: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for name, status in ran.items():
        per_class[name.split(".")[0]][status] += 1
    print("\nNova 34 accelerator functional tests against acceld:")
    for cls in CLASSES:
        counts = per_class.get(cls.__name__, collections.Counter())
        total = sum(1 for name in expected if name.startswith(cls.__name__ + "."))
        print(f"  {cls.__name__:42} {counts['success']:2}/{total:2} passed"
              + "".join(f", {n} {s}" for s, n in sorted(counts.items()) if s != "success"))
    problems = []
    if len(expected) != EXPECTED_COUNT:
        problems.append(f"Nova's classes hold {len(expected)} tests, not {EXPECTED_COUNT}")
    if missing := sorted(expected - set(ran)):
        problems.append(f"{len(missing)} did not run: {', '.join(missing)}")
    if unknown := sorted(set(ran) - expected):
        problems.append(f"{len(unknown)} not Nova's: {', '.join(unknown)}")
    if failed := sorted(n for n, s in ran.items() if s != "success"):
        problems.append(f"{len(failed)} did not pass: "
                        + ", ".join(f"{n} ({ran[n]})" for n in failed))
    passed = sum(1 for s in ran.values() if s == "success")
    print(f"  ran {len(ran)}, passed {passed}, expected {EXPECTED_COUNT}")
    for line in problems:
        print(f"  FAIL: {line}")
    print("  RESULT:", "OK" if not problems else "FAILED")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
