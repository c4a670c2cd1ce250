"""A CommandRunner for tests: records every argv and answers from a script.

    runner = RecordingRunner()
    runner.script(["xbutil", "examine"], Result(0, stdout=json_text))   # prefix match
    runner.script(["fpgaconf"], lambda argv: Result(1, stderr="bad image"))
    driver = FpgaDriver(ctx_with(runner=runner))
    assert runner.calls[0].argv[:2] == ["xbutil", "examine"]

Rules are matched most recent first on an argv prefix; a rule's answer is a Result, a
callable(argv) -> Result (to emulate side effects), or a list of those consumed in order
(the last one repeats). Unmatched commands return ``default`` (rc 127, "not scripted"),
so a test notices a command it did not expect.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from acceld.hw.runner import RC_NOT_FOUND, Result

Answer = Result | Callable[[list[str]], Result]


@dataclasses.dataclass(frozen=True)
class Call:
    argv: list[str]
    timeout: float
    privileged: bool | None


class RecordingRunner:
    def __init__(self, default: Result | None = None) -> None:
        self.default = default or Result(RC_NOT_FOUND, "", "not scripted")
        self.calls: list[Call] = []
        self._rules: list[tuple[list[str], list[Answer]]] = []

    def script(self, prefix: Sequence[str], answer: Answer | list[Answer]) -> RecordingRunner:
        """Answer commands starting with ``prefix``; later rules win."""
        answers = list(answer) if isinstance(answer, list) else [answer]
        if not answers:
            raise ValueError("a rule needs at least one answer")
        self._rules.insert(0, (list(prefix), answers))
        return self

    def run(self, argv: list[str], timeout: float, *,
            privileged: bool | None = None) -> Result:
        argv = [str(a) for a in argv]
        self.calls.append(Call(argv, timeout, privileged))
        for prefix, answers in self._rules:
            if argv[:len(prefix)] == prefix:
                answer = answers.pop(0) if len(answers) > 1 else answers[0]
                return answer(argv) if callable(answer) else answer
        return self.default

    def argvs(self) -> list[list[str]]:
        """Just the argv of every call, in order."""
        return [c.argv for c in self.calls]
