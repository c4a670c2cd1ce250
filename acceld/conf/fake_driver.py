"""[fake_driver] options: deterministic demo devices."""

from __future__ import annotations

from oslo_config import cfg

GROUP = "fake_driver"
KINDS = ("GPU", "FPGA", "QAT", "NIC")

OPTS = [
    cfg.StrOpt("profile", default="acceld", choices=[
        ("acceld", "device_count devices cycling through device_types (the default)"),
        ("cyborg", "upstream Cyborg's fake device, as Nova's functional tests, test clouds "
                   "and client test suites expect it: one FPGA device per host with one "
                   "deployable <host>_FakeDevice of 16 PCI attach handles, resource class "
                   "FPGA, trait CUSTOM_FAKE_DEVICE (device_count, device_types and handles "
                   "do not apply; traits and physical_networks do)")],
               help="The shape of the fake host."),
    cfg.IntOpt("device_count", default=4, min=0, max=256,
               help="How many fake devices each host has (types cycle GPU, FPGA, QAT, NIC)."),
    cfg.ListOpt("device_types", default=list(KINDS),
                item_type=cfg.types.String(choices=list(KINDS)),
                help="The kinds of fake devices, cycled in this order. A benchmark that "
                     "mirrors upstream Cyborg's fake driver uses FPGA alone."),
    cfg.IntOpt("handles", min=1, max=255,
               help="Attach handles per fake deployable, for every kind (default: 1 for "
                    "GPU and FPGA, 4 for QAT, 2 for NIC; the control file's vf_count "
                    "still wins)."),
    cfg.DictOpt("traits", default={},
                help="Traits per kind, replacing the kind's own (several separated by "
                     "spaces), e.g. 'FPGA:CUSTOM_FAKE_DEVICE CUSTOM_MY_FUNCTION'."),
    cfg.DictOpt("physical_networks", default={"NIC": "physnet1"},
                help="Physical network per kind: every attach handle of that kind carries "
                     "it in its attach_info (Nova puts it into the binding of an "
                     "accelerator port), e.g. 'NIC:physnet1,FPGA:physnet2'."),
    cfg.StrOpt("control_file",
               help="Optional JSON file read at every discovery: {\"device_count\": N, "
                    "\"fail\": bool, \"fail_install\": bool}. Lets demos and tests change "
                    "the fake host while the agent runs."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str | None, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]
