"""[glance] options: keystoneauth options (service type ``image``) and download tuning
for the FPGA images the agent fetches; without ``auth_type`` only local image paths
(``[fpga_driver] local_image_dirs``) can be programmed."""

from __future__ import annotations

from oslo_config import cfg

from acceld.conf import service_client

GROUP = "glance"
SERVICE_TYPE = "image"

OPTS: list[cfg.Opt] = [
    cfg.IntOpt("download_chunk_bytes", default=1024 * 1024, min=4096,
               help="Bytes read from Glance per chunk while an image is streamed to disk "
                    "(and hashed)."),
    cfg.FloatOpt("download_timeout", default=300.0, min=1,
                 help="Seconds without any data from Glance after which a download is "
                      "abandoned (the socket read timeout, not the whole transfer)."),
]
CLIENT_DEFAULTS: dict[str, object] = {}


def enabled(conf: cfg.ConfigOpts) -> bool:
    return service_client.enabled(conf, GROUP)
