"""[notifications] options: versioned notifications and the agents' usage broadcast."""

from __future__ import annotations

from oslo_config import cfg

GROUP = "notifications"

OPTS = [
    cfg.BoolOpt("enabled", default=True,
                help="Send versioned notifications (device discovered/removed, state "
                     "changes, ARQ life cycle, FPGA programming, driver failures) and the "
                     "agents' usage notifications. They go to the notification transport: "
                     "[oslo_messaging_notifications] transport_url, else [DEFAULT] "
                     "transport_url. With neither (the all-in-one `acceld serve` on its "
                     "in-process bus) nothing is sent anywhere (oslo.messaging's noop "
                     "driver) unless [oslo_messaging_notifications] driver names one, "
                     "e.g. `log`."),
    cfg.ListOpt("topics", default=["notifications"],
                help="Topics the notifications are sent to (consumers listen on "
                     "`<topic>.info`, `<topic>.error`, ...)."),
    cfg.FloatOpt("usage_period", default=10.0, min=0.0,
                 help="Seconds between two usage notifications (acceld.device.usage) of "
                      "an agent: one per host with the figures of every device whose "
                      "driver has them. Never written to the database. 0 turns them off."),
    cfg.IntOpt("max_queued", default=1000, min=1,
               help="Notifications waiting for the broker in each process; while it is "
                    "away or slow, newer ones beyond this are dropped (and counted in the "
                    "log) rather than slowing the operation that emits them."),
]
