"""Select oslo.service's threading backend before anything imports oslo.messaging.

acceld runs on native threads, never eventlet. Import this module first in every module
that pulls in oslo.messaging or oslo.service (``conf`` and ``rpc`` do)."""

import contextlib
import warnings

# Libraries below us (futurist, oslo.messaging's server module) import eventlet or
# oslo_utils.eventletutils when they are installed, even on the threading backend; the
# import-time deprecation notices they trigger are about code acceld never runs.
warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")
warnings.filterwarnings("ignore", message="eventletutils module is deprecated")

from oslo_service import backend  # noqa: E402

with contextlib.suppress(backend.exceptions.BackendAlreadySelected):  # an embedding app's
    backend.init_backend(backend.BackendType.THREADING)
