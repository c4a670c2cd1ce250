"""[fpga_driver] options: FPGAs (Intel DFL, Xilinx XRT) and programming."""

from __future__ import annotations

from oslo_config import cfg

GROUP = "fpga_driver"

OPTS: list[cfg.Opt] = [
    cfg.StrOpt("fpgaconf_path", default="fpgaconf",
               help="The OPAE `fpgaconf` tool that loads green bitstreams (.gbs) into Intel "
                    "DFL cards: a bare name is looked up on PATH, or an absolute path."),
    cfg.StrOpt("xbutil_path", default="xbutil",
               help="The XRT `xbutil` tool that examines Xilinx/AMD Alveo cards and loads "
                    ".xclbin images: a bare name is looked up on PATH, or an absolute path."),
    cfg.FloatOpt("examine_timeout", default=60.0, min=1,
                 help="Seconds one `xbutil examine` of a card may take during discovery "
                      "before the card is skipped."),
    cfg.FloatOpt("program_timeout", default=600.0, min=1,
                 help="Seconds a programming (fpgaconf / xbutil program) may take before the "
                      "agent gives up and reports the bind as failed."),
    cfg.IntOpt("expected_devices", min=0,
               help="How many FPGAs this host should have. Only used to explain discovery "
                    "(`driver-list --long` shows expected versus found); unset means "
                    "unknown."),
    cfg.ListOpt("local_image_dirs", default=[],
                help="Absolute directories that image references may point into directly "
                     "(instead of a Glance image id). A path outside them, or one that "
                     "escapes them through `..` or symlinks, is refused."),
    cfg.IntOpt("max_image_bytes", default=1024 ** 3, min=1,
               help="Largest image (bytes) the agent downloads or copies before programming; "
                    "a bigger one is refused and its partial copy removed."),
    cfg.StrOpt("image_dir",
               help="Where fetched images are kept while a card is programmed (default: "
                    "<agent state dir>/fpga-images). Needs room for max_image_bytes."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str | None, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]
