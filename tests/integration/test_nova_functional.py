"""Nova 34's own 56 accelerator functional tests, run against the real acceld.

``tests/nova_functional/run.sh`` (its README says how) builds Nova's own environment
once (Nova 34.0.0 from its sdist, stestr, SQLAlchemy below 2.1: it cannot share this
one) and runs Nova's test classes with ``AcceldCyborgFixture`` in place of Nova's
``CyborgFixture``: Nova's real Cyborg client, conductor, compute and libvirt-less virt
driver against acceld's API, conductor and agents, publishing into Nova's own Placement.
It exits 0 only when exactly Nova's 56 tests ran and all passed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parents[1] / "nova_functional" / "run.sh"


@pytest.mark.timeout(1500)
def test_novas_accelerator_functional_tests_pass_against_acceld() -> None:
    done = subprocess.run(["bash", str(RUN)], capture_output=True, text=True, timeout=1450,
                          check=False)
    tail = (done.stdout[-4000:] + done.stderr[-2000:])
    assert done.returncode == 0, f"Nova's functional tests failed:\n{tail}"
    assert "ran 56, passed 56, expected 56" in done.stdout, tail
    assert "RESULT: OK" in done.stdout, tail
