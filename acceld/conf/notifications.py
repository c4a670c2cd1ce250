"""[notifications] options: versioned notifications and the agents' usage broadcast.

Whether they are sent, where and on which topics is oslo.messaging's own
``[oslo_messaging_notifications]`` group (``driver``, ``transport_url``, ``topics``), as
in every OpenStack service: nothing is sent until ``driver`` names one."""

from __future__ import annotations

from oslo_config import cfg

GROUP = "notifications"

OPTS = [
    cfg.FloatOpt("usage_period", default=10.0, min=0.0,
                 help="Seconds between two usage notifications (acceld.device.usage) of "
                      "an agent: one per host with the figures of every device whose "
                      "driver has them, when notifications are sent at all "
                      "([oslo_messaging_notifications] driver). Never written to the "
                      "database. 0 turns them off."),
    cfg.IntOpt("max_queued", default=1000, min=1,
               help="Notifications waiting for the broker in each process; while it is "
                    "away or slow, newer ones beyond this are dropped (and counted in the "
                    "log) rather than slowing the operation that emits them."),
]
