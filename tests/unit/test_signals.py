"""SIGTERM and SIGINT set the stop event of a server command or ``acceld-sim``."""

from __future__ import annotations

import os
import signal

import pytest

from acceld import signals


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_sets_the_event(signum):
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        stop = signals.stop_event()
        assert not stop.is_set()
        os.kill(os.getpid(), signum)
        assert stop.wait(5)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
