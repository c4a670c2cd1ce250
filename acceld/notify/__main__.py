"""``python -m acceld.notify > docs/notification-schemas.json``: the payload schemas."""

import sys

from acceld.notify import payloads

sys.stdout.write(payloads.render_schemas())
