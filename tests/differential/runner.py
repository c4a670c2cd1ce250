"""Send every case to upstream Cyborg and to acceld, compare the statuses, print a table.

    python -m tests.differential.runner [--cyborg-url URL] [--acceld-url URL] [-k TEXT]
                                        [--include-corrupting]

Exit status 1 when a case is a MISMATCH, acceld answered a 5xx, or a set-up or clean-up
failed; 2 when a server does not answer.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from tests.differential import cases as c
from tests.differential.sides import Answer, SetupError, Side

CYBORG_URL_ENV = "ACCELD_DIFF_CYBORG_URL"
ACCELD_URL_ENV = "ACCELD_DIFF_ACCELD_URL"
DEFAULT_CYBORG_URL = "http://127.0.0.1:6680/accelerator"
DEFAULT_ACCELD_URL = "http://127.0.0.1:6666/accelerator"

EQUAL = "equal"
UPSTREAM_500 = "upstream-500 deviation"
DELIBERATE = "deliberate deviation"
MISMATCH = "MISMATCH"
ACCELD_5XX = "ACCELD-5xx"
SETUP_FAILED = "SETUP-FAILED"
FAILING = (MISMATCH, ACCELD_5XX, SETUP_FAILED)


@dataclass(frozen=True)
class Result:
    """What both servers answered to one case, and the verdict."""

    case: c.Case
    cyborg: Answer
    acceld: Answer
    verdict: str


# The cases where acceld answers on purpose otherwise than Cyborg (each documented in
# docs/api-v2.md, "Differences from upstream, on purpose"): case id -> (acceld's status,
# why). Any other difference where Cyborg does not fail is a MISMATCH.
DELIBERATE_DEVIATIONS: dict[str, tuple[int, str]] = {
    "v2/unknown-version": (404, "an API version that does not exist (/v3/...) is a 404; "
                                "Cyborg answers it as a filtered, empty /v2 list"),
    "arq-create/device_profile_name-list": (400, "a list where a profile name belongs is "
                                                 "a 400; Cyborg's answer depends on its "
                                                 "database (500 on SQLite, 201 on MariaDB, "
                                                 "whose driver matches the list)"),
    "dp-create/group-key-too-long": (400, "a group key is at most 255 characters (a "
                                          "resource class or trait that long is one "
                                          "Placement and Nova refuse); Cyborg stores it"),
    # acceld pages its lists (acceld.api.listing): a limit is a page, where Cyborg has
    # no paging and refuses it as an unknown argument
    **{f"{route}/query-limit": (200, "every list takes limit and marker (paging); Cyborg's "
                                     "has no paging and refuses them")
       for route in ("dp-list", "arq-list", "devices-list", "deployables-list",
                     "attributes-list")},
}


def verdict(cyborg: int, acceld: int, case_id: str = "") -> str:
    """acceld must answer what Cyborg does, except that where Cyborg fails with a 5xx
    acceld answers anything but a 5xx, and the listed deliberate deviations; acceld never
    answers a 5xx."""
    if acceld >= 500:
        return ACCELD_5XX
    if cyborg == acceld:
        return EQUAL
    if cyborg >= 500:
        return UPSTREAM_500
    if DELIBERATE_DEVIATIONS.get(case_id, (None,))[0] == acceld:
        return DELIBERATE
    return MISMATCH


def run_on(side: Side, case: c.Case) -> Answer:
    """Set up what ``case`` needs on ``side``, send it, clean up. A failed set-up is an
    answer with status 0; a failed set-up or clean-up is the answer's ``trouble``."""
    values: dict[str, Any] = {}
    try:
        side.setup(case.setup, values)
        answer = side.send(case, values)
    except SetupError as exc:
        answer = Answer(0, "", f"set-up failed: {exc}")
    try:
        side.cleanup(values)
    except SetupError as exc:
        answer = replace(answer, trouble=f"{answer.trouble} clean-up failed: {exc}".strip())
    return answer


def run_case(cyborg: Side, acceld: Side, case: c.Case) -> Result:
    """One case on both sides."""
    up, ours = run_on(cyborg, case), run_on(acceld, case)
    if up.trouble or ours.trouble:
        return Result(case, up, ours, SETUP_FAILED)
    return Result(case, up, ours, verdict(up.status, ours.status, case.id))


def run_all(cyborg: Side, acceld: Side, selected: Iterable[c.Case]) -> list[Result]:
    """Discover both inventories, clean up, then run each case of ``selected``."""
    for side in (cyborg, acceld):
        try:
            side.discover()
            side.cleanup()
        except SetupError as exc:
            raise SetupError(f"{exc} (a server left in a state the API cannot clean up "
                             "needs a restart: for the peer, start.sh --fresh)") from exc
    return [run_case(cyborg, acceld, case) for case in selected]


# --------------------------------------------------------------------- reporting ----

def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def table(results: list[Result]) -> str:
    """One line per case: id, method, path, the two statuses and the verdict."""
    width = max((len(r.case.id) for r in results), default=10)
    head = f"{'case':<{width}}  {'method':<6}  {'path':<58}  cyborg  acceld  verdict"
    lines = [head, "-" * len(head)]
    for r in results:
        lines.append(f"{r.case.id:<{width}}  {r.case.method:<6}  "
                     f"{_short(r.case.path, 58):<58}  {r.cyborg.status:>6}  "
                     f"{r.acceld.status:>6}  {r.verdict}")
    return "\n".join(lines)


def describe(result: Result) -> str:
    """A case in full: the request and both answers with their messages."""
    case = result.case
    body = case.body.data.decode()[:120] if isinstance(case.body, c.Raw) else case.body
    request = [f"{case.method} {case.path}", f"as {case.identity}"]
    if case.microversion is not None:
        request.append(f"OpenStack-API-Version: {case.microversion!r}")
    if case.body is not None:
        request.append(f"Content-Type: {case.content_type} body: {_short(str(body), 160)}")
    if case.setup:
        request.append(f"after set-up {', '.join(case.setup)}")
    lines = [f"{case.id} [{result.verdict}]", "    request: " + "; ".join(request)]
    for name, answer in (("cyborg", result.cyborg), ("acceld", result.acceld)):
        lines.append(f"    {name} {answer.status}: {answer.message}")
        if answer.trouble:
            lines.append(f"    {name} trouble: {answer.trouble}")
    if case.note:
        lines.append(f"    note: {case.note}")
    if result.verdict == DELIBERATE:
        lines.append(f"    why: {DELIBERATE_DEVIATIONS[case.id][1]}")
    return "\n".join(lines)


def summary(results: list[Result]) -> str:
    """Counts per verdict, then every case that is not ``equal``, grouped by verdict."""
    counts = {v: sum(r.verdict == v for r in results)
              for v in (EQUAL, UPSTREAM_500, DELIBERATE, *FAILING)}
    lines = [f"{len(results)} cases: " + ", ".join(f"{n} {v}" for v, n in counts.items())]
    for kind in (*FAILING, UPSTREAM_500, DELIBERATE):
        chosen = [r for r in results if r.verdict == kind]
        if chosen:
            lines.append(f"\n== {kind} ({len(chosen)})")
            lines.extend(describe(r) for r in chosen)
    return "\n".join(lines)


def failures(results: list[Result]) -> list[Result]:
    """The results that fail the comparison."""
    return [r for r in results if r.verdict in FAILING]


def sides_from_env(cyborg_url: str | None = None,
                   acceld_url: str | None = None) -> tuple[Side, Side]:
    """The two sides, from the arguments, else the environment, else the defaults."""
    return (Side("cyborg", cyborg_url or os.environ.get(CYBORG_URL_ENV, DEFAULT_CYBORG_URL)),
            Side("acceld", acceld_url or os.environ.get(ACCELD_URL_ENV, DEFAULT_ACCELD_URL)))


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print the table and the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cyborg-url", help=f"default ${CYBORG_URL_ENV} or "
                        f"{DEFAULT_CYBORG_URL}")
    parser.add_argument("--acceld-url", help=f"default ${ACCELD_URL_ENV} or "
                        f"{DEFAULT_ACCELD_URL}")
    parser.add_argument("-k", dest="match", help="only the cases whose id contains this")
    parser.add_argument("--include-corrupting", action="store_true",
                        help="also run cases.corrupting_cases, last (they leave Cyborg's "
                             "profiles broken: restart it with start.sh --fresh afterwards)")
    args = parser.parse_args(argv)
    cyborg, acceld = sides_from_env(args.cyborg_url, args.acceld_url)
    for side in (cyborg, acceld):
        if not side.reachable():
            print(f"{side.name} is not reachable at {side.root}", file=sys.stderr)
            return 2
    generators = c.GENERATORS + (c.CORRUPTING if args.include_corrupting else ())
    selected = [case for case in c.all_cases(generators)
                if not args.match or args.match in case.id]
    results = run_all(cyborg, acceld, selected)
    print(table(results))
    print()
    print(summary(results))
    return 1 if failures(results) else 0


if __name__ == "__main__":
    sys.exit(main())
