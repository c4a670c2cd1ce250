"""acceld-sim: a fleet of simulated agents speaking the real agent -> conductor RPC.

One process runs thousands of hosts whose agents report inventories, heartbeat and
(for a few) serve the agent RPC topic, over the transport the conductor uses, so that
a real ``acceld conductor`` with its database and Placement sees a fleet without
hardware; a scenario file plays faults on it. See ``docs/simulator.md``.

:mod:`~acceld.sim.devices` (what each host has), :mod:`~acceld.sim.host` (one host's
state and report), :mod:`~acceld.sim.agent` (the agent RPC of a served host),
:mod:`~acceld.sim.scenario` (fault files), :mod:`~acceld.sim.fleet` (the scheduler),
:mod:`~acceld.sim.stats` (the results) and :mod:`~acceld.sim.cli` (the ``acceld-sim``
command).
"""
