"""Runs the gabbi YAML files in ``gabbits/`` against an in-process acceld.

Every YAML file is one suite with its own fresh stack (see ``gabbi_fixtures``). YAML file
names use hyphens, never underscores: gabbi's pytest plugin splits suite names on ``_``.
"""

from __future__ import annotations

import os

from gabbi import driver
from gabbi.driver import test_pytest  # noqa: F401 - the test function gabbi parametrizes

from tests.functional import gabbi_fixtures

TESTS_DIR = os.path.join(os.path.dirname(__file__), "gabbits")


def pytest_generate_tests(metafunc) -> None:  # noqa: ANN001 - pytest's Metafunc
    driver.py_test_generator(TESTS_DIR, intercept=gabbi_fixtures.setup_app,
                             fixture_module=gabbi_fixtures, test_loader_name=__name__,
                             metafunc=metafunc)
