"""The README's two commands are the ones a new user runs, and .ci/run runs the second."""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _commands() -> list[str]:
    lines = (ROOT / "README.md").read_text().splitlines()[:12]
    return [line.strip() for line in lines if line.startswith("    ")]


def test_readme_starts_with_serve_and_test_commands():
    serve, tests = _commands()[:2]
    assert serve.endswith("acceld serve")
    assert "pytest" in tests and ".[test]" in tests


def test_ci_runs_exactly_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert _commands()[1] in [line.strip() for line in ci]
    assert "export CI=true" in ci
