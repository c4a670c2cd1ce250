"""A consumer of acceld's notifications (docs/notifications.md): prints every
notification on the ``notifications`` topic of the broker at the URL given, the usage
broadcast as one line per device, until Ctrl-C.

    PYTHONPATH=$PWD .venv/bin/python bench/notification_listener.py \\
        rabbit://guest:guest@127.0.0.1:5672/ [--topic notifications]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import oslo_messaging
from oslo_config import cfg


class Endpoint:
    def info(self, ctxt: dict[str, Any], publisher_id: str, event_type: str,
             payload: dict[str, Any], metadata: dict[str, Any]) -> None:
        data = payload["acceld_object.data"]
        if event_type == "acceld.device.usage":
            for dev in data["devices"]:
                print(data["sampled_at"], data["host"], dev["type"], dev["identity"],
                      json.dumps(dev["metrics"], sort_keys=True), flush=True)
        else:
            print(metadata["timestamp"], event_type, publisher_id,
                  json.dumps(data, sort_keys=True), flush=True)

    error = info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the broker, e.g. rabbit://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--topic", default="notifications")
    args = parser.parse_args()
    conf = cfg.ConfigOpts()
    conf([], project="acceld-listener")
    transport = oslo_messaging.get_notification_transport(conf, url=args.url)
    listener = oslo_messaging.get_notification_listener(
        transport, [oslo_messaging.Target(topic=args.topic)], [Endpoint()],
        executor="threading")
    listener.start()
    try:
        listener.wait()
    except KeyboardInterrupt:
        listener.stop()
        listener.wait()
    finally:
        transport.cleanup()


if __name__ == "__main__":
    main()
