"""[fake_driver] options: deterministic demo devices."""

from __future__ import annotations

from oslo_config import cfg

GROUP = "fake_driver"

OPTS = [
    cfg.IntOpt("device_count", default=4, min=0, max=256,
               help="How many fake devices each host has (types cycle GPU, FPGA, QAT, NIC)."),
    cfg.ListOpt("device_types", default=["GPU", "FPGA", "QAT", "NIC"],
                item_type=cfg.types.String(choices=["GPU", "FPGA", "QAT", "NIC"]),
                help="The kinds of fake devices, cycled in this order. A benchmark that "
                     "mirrors upstream Cyborg's fake driver uses FPGA alone."),
    cfg.IntOpt("handles", min=1, max=256,
               help="Attach handles per fake deployable, for every kind (default: 1 for "
                    "GPU and FPGA, 4 for QAT, 2 for NIC; the control file's vf_count "
                    "still wins)."),
    cfg.StrOpt("control_file",
               help="Optional JSON file read at every discovery: {\"device_count\": N, "
                    "\"fail\": bool, \"fail_install\": bool}. Lets demos and tests change "
                    "the fake host while the agent runs."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str | None, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]
