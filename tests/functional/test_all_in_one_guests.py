"""The all-in-one service (``acceld serve``'s in-process stack with fake devices) has the
fake hypervisor's demo guests without any [hypervisor] setting; a hypervisor that cannot
be reached is a HypervisorError, tried again on the next call."""

from __future__ import annotations

import uuid

import pytest

from acceld import exception, rpc
from acceld.agent.manager import AgentManager
from acceld.hw import pci
from acceld.virt import devicexml
from tests import helpers
from tests.stack import Stack


def test_the_all_in_one_stack_serves_the_demo_guests(sqlite_db):
    with Stack.reported(sqlite_db, hosts=("host1",)) as stack:
        client = rpc.AgentClient(stack.transport, timeout=10)
        guests = client.guests("host1")
        assert [(g["name"], g["running"], g["aliases"]) for g in guests] == [
            ("demo-1", True, []), ("demo-2", True, []), ("demo-3", True, [])]
        arq = str(uuid.uuid4())
        after = client.attach_to_guest("host1", guests[0]["uuid"], arq, "PCI",
                                       pci.to_attach_info("0000:3b:00.0"), "h")
        assert after["aliases"] == [devicexml.alias(arq)]
        assert client.guests("host1")[0]["aliases"] == [devicexml.alias(arq)]


def test_an_unreachable_hypervisor_is_a_hypervisor_error(tmp_path):
    conf = helpers.make_conf(hypervisor={"driver": "libvirt",
                                         "connection_uri": "acceld-nothing:///here"})
    t = rpc.LocalTransport()
    agent = AgentManager(conf, rpc.ConductorClient(t), host="h1",
                         journal_dir=str(tmp_path / "journal"))
    server = t.serve(rpc.AGENT_TOPIC, "h1", agent)
    server.start()
    try:
        for _ in range(2):            # not remembered: each call tries again
            with pytest.raises(exception.HypervisorError):
                rpc.AgentClient(t, timeout=10).guests("h1")
    finally:
        server.stop()
        t.close()
