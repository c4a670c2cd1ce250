"""[nvidia_driver] options: NVIDIA GPUs (whole GPUs, MIG, vGPU)."""

from __future__ import annotations

from oslo_config import cfg, types

GROUP = "nvidia_driver"

# XIDs NVIDIA documents as caused by the application (illegal address, MMU fault from a
# user kernel, ECC page retirement notices, ...), not by the GPU; the Kubernetes device
# plugin ignores the same set by default.
_APPLICATION_XIDS = [13, 31, 43, 45, 68, 109]

OPTS: list[cfg.Opt] = [
    cfg.ListOpt("address", default=[],
                help="PCI address globs of the GPUs this driver manages, e.g. "
                     "'0000:3b:00.0, 0000:86:*.*' or '3b:00.*'. Empty means every NVIDIA "
                     "GPU that NVML sees. Excluded GPUs are listed, with the reason, by "
                     "`driver-list --long`."),
    cfg.ListOpt("vgpu_types", default=[],
                help="vGPU types to offer, by NVIDIA type id: 'nvidia-471' (the mdev "
                     "directory name) or '471' (the id in nvidia/creatable_vgpu_types); "
                     "both spellings mean the same type. A GPU that can create an enabled "
                     "type is reported as VGPU inventory (one deployable per type) instead "
                     "of a whole GPU. Empty: no vGPUs."),
    cfg.IntOpt("expected_devices", min=0,
               help="How many GPUs this host should have. Only used to explain discovery "
                    "(expected versus found); unset means unknown."),
    cfg.StrOpt("min_driver_version",
               help="Lowest NVIDIA driver version (e.g. '535.104') this host should run. "
                    "An older driver is flagged in the explanation; nothing is refused."),
    cfg.StrOpt("ecc_uncorrected_status", default="failed",
               choices=[("failed", "the GPU is failed and taken out of scheduling"),
                        ("degraded", "the GPU stays schedulable but is flagged")],
               help="Health of a GPU with uncorrected (double-bit) ECC errors since the "
                    "driver was loaded (the volatile counter)."),
    cfg.ListOpt("ignored_xids", item_type=types.Integer(min=0),
                default=list(_APPLICATION_XIDS),
                help="XID error codes that do not affect a GPU's health because the "
                     "application, not the GPU, caused them. Every other critical XID "
                     "marks the GPU failed."),
    cfg.IntOpt("xid_hold_seconds", default=3600, min=0,
               help="How long a GPU stays failed after a critical XID or double-bit ECC "
                    "event (0: until the agent restarts)."),
    cfg.IntOpt("event_wait_ms", default=100, min=0, max=5000,
               help="How long one health check waits for the first NVML event (XID, ECC). "
                    "Events queue in NVML between checks, so 0 also loses none."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str | None, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]
