"""[hypervisor] options: which hypervisor the agent attaches ARQ devices to live."""

from __future__ import annotations

from oslo_config import cfg, types

GROUP = "hypervisor"

NONE, FAKE, LIBVIRT = "none", "fake", "libvirt"

#: The demo guests of the fake hypervisor, ``UUID:NAME`` each.
DEMO_INSTANCES = [
    "de300001-0000-4000-8000-000000000001:demo-1",
    "de300002-0000-4000-8000-000000000002:demo-2",
    "de300003-0000-4000-8000-000000000003:demo-3",
]

OPTS = [
    cfg.StrOpt("driver", choices=[
        (NONE, "no live attach or detach on this host"),
        (FAKE, "in-memory guests (the [hypervisor] fake_instances): demos and tests"),
        (LIBVIRT, "the libvirtd of [hypervisor] connection_uri")],
        help="Hypervisor the agent attaches ARQ devices to running guests through. "
             "Unset: `fake` for the all-in-one `acceld serve` with only fake devices (no "
             "[DEFAULT] transport_url, [agent] enabled_drivers = fake), `none` otherwise."),
    cfg.StrOpt("connection_uri", default="qemu:///system",
               help="libvirt connection URI of the `libvirt` driver."),
    cfg.FloatOpt("detach_timeout", default=10.0, min=0,
                 help="Seconds a detach waits for the guest to release the device "
                      "(libvirt's device-removed event); past it the detach is reported "
                      "pending and the device stays in place. Keep it below the "
                      "conductor's [DEFAULT] rpc_timeout."),
    cfg.ListOpt("fake_instances", default=DEMO_INSTANCES,
                item_type=types.String(regex=r"^[0-9a-fA-F-]{32,36}:[^:]+$"),
                help="Guests of the `fake` driver, each `UUID:NAME`, all running."),
    cfg.ListOpt("fake_ignore_unplug", default=[],
                item_type=types.String(regex=r"^[0-9a-fA-F-]{32,36}$"),
                help="UUIDs of `fake` guests that never release a device: their detach "
                     "stays pending, as with a guest OS that ignores the unplug."),
]
