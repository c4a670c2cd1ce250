"""The conductor's host work through the agents refuses, rather than skips, a handle that
needs host work on a host it cannot name: such a bind must fail, not finish without it."""

from __future__ import annotations

import pytest

from acceld import exception
from acceld.conductor.binding import AgentHostWork


class _NoAgents:
    def prepare_handle(self, *args: object) -> dict[str, object]:
        raise AssertionError("no agent to call: the handle's host is unknown")


def test_an_mdev_handle_without_a_known_host_fails_its_prepare() -> None:
    work = AgentHostWork(db=None, agents=_NoAgents())   # the target is read with the handle
    handle = {"uuid": "h-1", "attach_type": "MDEV", "attach_info": {}, "target": None}
    with pytest.raises(exception.OperationFailed, match="needs host work"):
        work.prepare(handle)


def test_a_pci_handle_without_a_host_needs_no_host_work() -> None:
    work = AgentHostWork(db=None, agents=_NoAgents())
    work.prepare({"uuid": "h-2", "attach_type": "PCI", "attach_info": {}, "target": None})
