"""First reports: what the conductor spends taking a host's first inventory report.

N simulated hosts (acceld-sim's default mix, 8 devices) each send their first report
straight into a ``ConductorManager`` (no RPC, no Placement) on a fresh PostgreSQL
database: the conductor's CPU per report (``time.process_time``, median and mean) and
the SQL statements it sends per report (SQLAlchemy's ``before_cursor_execute``).

Usage: python bench/first_report.py --hosts 300
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sqlalchemy import event  # noqa: E402

from acceld.conductor.manager import ConductorManager  # noqa: E402
from acceld.db import migration  # noqa: E402
from acceld.db.api import Database  # noqa: E402
from acceld.sim import devices as devmod  # noqa: E402
from acceld.sim.host import SimHost  # noqa: E402
from tests import databases, helpers  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=300)
    args = parser.parse_args()
    url, drop = databases.create_postgresql()
    db = Database(url)
    try:
        migration.upgrade(db)
        manager = ConductorManager(helpers.make_conf(), db, agents=None, placement=None)
        firsts = []
        for i in range(args.hosts):
            host = SimHost(f"first-{i:05d}", devmod.host_devices(f"first-{i:05d}",
                                                                 devmod.DEFAULT_MIX))
            host.start_agent()
            firsts.append(host.build_report()[0])
        statements = 0

        def count(*_args: object) -> None:
            nonlocal statements
            statements += 1
        event.listen(db.engine, "before_cursor_execute", count)
        cpu = []
        for report in firsts:
            started = time.process_time()
            manager.report_inventory(report)
            cpu.append(time.process_time() - started)
        print(f"{args.hosts} first reports: conductor CPU median "
              f"{1000 * statistics.median(cpu):.2f} ms, mean {1000 * statistics.mean(cpu):.2f}"
              f" ms; {statements / args.hosts:.1f} statements per report")
    finally:
        db.dispose()
        drop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
