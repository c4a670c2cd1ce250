"""Which conductor owns each agent's host, on every database backend.

With several conductors sharing the hosts, the conductor that records an agent's
heartbeats owns its host: ``record_heartbeats`` writes its name into the agent's row in
the statements it already sent (no statement more per flush), and ``GET /v1/services``
shows, per agent, that conductor and, per conductor, how many alive agents it owns.
"""

from __future__ import annotations

import datetime

import webob
from sqlalchemy import select

from acceld import rpc
from acceld.api import deploy
from acceld.db import models as m
from acceld.objects import services
from tests.functional.test_statement_count import StatementCounter
from tests.helpers import make_conf

AGENT = "acceld-agent"
CONDUCTOR = "acceld-conductor"
DOWN_TIME = 60


def _now() -> datetime.datetime:
    return m.utcnow().replace(microsecond=0)


def _owners(db) -> dict[tuple[str, str], str | None]:
    with db.reader() as s:
        return {(r.host, r.binary): r.conductor for r in s.execute(
            select(m.Service.host, m.Service.binary, m.Service.conductor))}


def test_agents_name_the_conductor_that_records_them_and_conductors_none(db):
    t = _now()
    services.record_heartbeats(db, [("cond1", CONDUCTOR, "1", t), ("host1", AGENT, "1", t),
                                    ("host2", AGENT, "1", t)], conductor="cond1")
    services.record_heartbeats(db, [("cond2", CONDUCTOR, "1", t)], conductor="cond2")
    assert _owners(db) == {("cond1", CONDUCTOR): None, ("cond2", CONDUCTOR): None,
                           ("host1", AGENT): "cond1", ("host2", AGENT): "cond1"}

    # host2's next heartbeat reaches cond2: cond2 owns it from then on
    later = t + datetime.timedelta(seconds=5)
    services.record_heartbeats(db, [("cond2", CONDUCTOR, "1", later),
                                    ("host2", AGENT, "1", later)], conductor="cond2")
    assert _owners(db) == {("cond1", CONDUCTOR): None, ("cond2", CONDUCTOR): None,
                           ("host1", AGENT): "cond1", ("host2", AGENT): "cond2"}


def test_a_beat_older_than_the_recorded_one_changes_no_owner(db):
    """A conductor that flushes a beat it held while another recorded a newer one does
    not take the host back."""
    t = _now()
    services.record_heartbeats(db, [("host1", AGENT, "1", t)], conductor="cond2")
    services.record_heartbeats(db, [("host1", AGENT, "1", t - datetime.timedelta(seconds=3))],
                               conductor="cond1")
    assert _owners(db) == {("host1", AGENT): "cond2"}
    with db.reader() as s:
        assert s.execute(select(m.Service.last_seen_at)).scalar() == t


def test_a_flush_sends_the_same_statements_with_the_owner_in_them(db):
    """One SELECT, one UPDATE executed once for all known rows that changed (their time,
    version or owner: the driver batches them), one INSERT for all new rows; a beat that
    changes nothing writes nothing."""
    t = _now()
    services.record_heartbeats(db, [("host1", AGENT, "1", t), ("host2", AGENT, "1", t)],
                               conductor="cond1")
    later = t + datetime.timedelta(seconds=5)
    with StatementCounter(db) as counter:
        services.record_heartbeats(db, [("host1", AGENT, "1", later),   # newer
                                        ("host2", AGENT, "1", t),       # owner only
                                        ("host3", AGENT, "1", later),   # new
                                        ("cond2", CONDUCTOR, "1", later)],
                                   conductor="cond2")
    assert counter.writes() == {("UPDATE", "services"): 1, ("INSERT", "services"): 1}
    assert counter.touching("services") == 3
    assert set(_owners(db).values()) == {"cond2", None}

    with StatementCounter(db) as counter:
        services.record_heartbeats(db, [("host1", AGENT, "1", later)], conductor="cond2")
    assert counter.writes() == {}
    assert counter.touching("services") == 1


def test_no_conductor_named_leaves_an_agent_unowned(db):
    t = _now()
    services.record_heartbeats(db, [("host1", AGENT, "1", t)], conductor="cond1")
    services.record_heartbeats(db, [("host1", AGENT, "1", t + datetime.timedelta(seconds=1))])
    assert _owners(db) == {("host1", AGENT): None}


def test_list_services_counts_the_alive_agents_each_conductor_owns(db):
    t = _now()
    dead = t - datetime.timedelta(seconds=DOWN_TIME + 30)
    services.record_heartbeats(db, [("cond1", CONDUCTOR, "1", t), ("host1", AGENT, "1", t),
                                    ("host2", AGENT, "1", t), ("host3", AGENT, "1", dead)],
                               conductor="cond1")
    services.record_heartbeats(db, [("cond2", CONDUCTOR, "1", dead), ("host4", AGENT, "1", t)],
                               conductor="cond2")
    services.record_heartbeats(db, [("cond3", CONDUCTOR, "1", t)], conductor="cond3")
    listed = {(r["host"], r["binary"]): (r["alive"], r["conductor"], r["hosts"])
              for r in services.list_services(db, DOWN_TIME)}
    assert listed == {
        ("cond1", CONDUCTOR): (True, None, 2),      # host3 is down: not counted
        ("cond2", CONDUCTOR): (False, None, 1),     # down, yet host4 still names it
        ("cond3", CONDUCTOR): (True, None, 0),
        ("host1", AGENT): (True, "cond1", None),
        ("host2", AGENT): (True, "cond1", None),
        ("host3", AGENT): (False, "cond1", None),
        ("host4", AGENT): (True, "cond2", None),
    }


def _services_app(db):
    """The real API pipeline (noauth, policy, router) over ``db``; GET /v1/services asks
    no conductor, so none serves the transport."""
    return deploy.make_app(make_conf(), db, rpc.ConductorClient(rpc.LocalTransport()))


def _get(app, token: str) -> webob.Response:
    return webob.Request.blank("/v1/services", headers={"X-Auth-Token": token}) \
        .get_response(app)


def test_the_api_shows_each_agents_conductor_and_each_conductors_hosts(db):
    t = _now()
    services.record_heartbeats(db, [("cond1", CONDUCTOR, "9.1", t), ("host1", AGENT, "9.1", t)],
                               conductor="cond1")
    resp = _get(_services_app(db), "admin")
    assert resp.status_int == 200, resp.text
    seen = t.replace(tzinfo=datetime.UTC).isoformat()
    assert resp.json["services"] == [
        {"host": "cond1", "binary": CONDUCTOR, "version": "9.1", "last_seen_at": seen,
         "alive": True, "conductor": None, "hosts": 1},
        {"host": "host1", "binary": AGENT, "version": "9.1", "last_seen_at": seen,
         "alive": True, "conductor": "cond1", "hosts": None},
    ]


def test_the_api_refuses_a_non_admin_before_reading(db):
    resp = _get(_services_app(db), "user1:project1")
    assert resp.status_int == 403, resp.text
    assert resp.json["errors"][0]["code"] == "acceld.forbidden"


def test_a_first_report_and_a_first_heartbeat_of_a_host_both_land(db):
    """The report's insert of a new host's row and a heartbeat flush's insert of the same
    row race; the loser is run again whole and finds the row (neither fails)."""
    import threading

    from acceld import reports
    from acceld.objects import inventory

    failures = []
    for round_ in range(12):
        host = f"racer-{round_}"
        report = reports.InventoryReport(host=host, epoch="e", seq=1, drivers=())
        start = threading.Barrier(2)

        def run(write, failures=failures, start=start):
            start.wait()
            try:
                write()
            except Exception as exc:  # noqa: BLE001 - the assertion below reports it
                failures.append(repr(exc))

        threads = [threading.Thread(target=run, args=(lambda r=report: inventory.apply_report(
                       db, r),)),
                   threading.Thread(target=run, args=(lambda h=host: services.record_heartbeats(
                       db, [(h, AGENT, "1", _now())], conductor="cond1"),))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert _owners(db)[(host, AGENT)] in ("cond1", None)
    assert failures == []


def test_a_report_stamps_its_service_row_with_the_agent_version(db):
    """Liveness is the heartbeats', but the row a changed report writes shows the agent's
    version already (before its first heartbeat is recorded)."""
    from acceld import reports
    from acceld.objects import inventory

    inventory.apply_report(db, reports.InventoryReport(host="fresh", epoch="e", seq=1,
                                                       drivers=(), agent_version="9.9"))
    (row,) = [r for r in services.list_services(db, DOWN_TIME) if r["host"] == "fresh"]
    assert (row["binary"], row["version"], row["alive"]) == (AGENT, "9.9", True)
