"""[agent] options: drivers, reporting cadence and the local journal."""

from __future__ import annotations

from oslo_config import cfg

GROUP = "agent"

OPTS = [
    cfg.ListOpt("enabled_drivers", default=["fake"],
                help="Drivers (entry points in the `acceld.drivers` namespace) to load."),
    cfg.FloatOpt("report_interval", default=30.0, min=0.05,
                 help="Seconds between two inventory reports (and heartbeats)."),
    cfg.StrOpt("journal_dir",
               help="Directory of the agent journal (default: <state_path>/agent-<host>)."),
    cfg.StrOpt("resource_provider_name",
               help="Name of this host's compute node provider in Placement (what Nova "
                    "registered; often the FQDN). Default: [DEFAULT] host. Not used "
                    "while `nova_compute_id_file` names the node."),
    cfg.StrOpt("nova_compute_id_file", default="/var/lib/nova/compute_id",
               help="Nova's record of this host's compute node uuid (nova-compute writes "
                    "it as `<state_path>/compute_id` since 2023.1), which is the uuid of "
                    "its provider in Placement. When the file holds a uuid, the agent "
                    "reports it and the conductor finds the provider by it rather than by "
                    "name. Empty: never read."),
    cfg.StrOpt("sysfs_root", default="/",
               help="Root under which the hardware drivers find /sys (a real host: `/`; "
                    "a recorded or fake tree for tests and demos: its directory). Writes "
                    "under `/` go through the privileged helper."),
    cfg.FloatOpt("retry_interval", default=2.0, min=0.01,
                 help="Seconds between two attempts to deliver journaled results while the "
                      "conductor is unreachable."),
]
