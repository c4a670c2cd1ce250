"""acceld: accelerator management for OpenStack-style clouds."""

__version__ = "0.1.0"

#: The services' binary names: their rows in the ``services`` table and the publisher ids
#: of their notifications (``<binary>:<host>``).
API_BINARY, CONDUCTOR_BINARY, AGENT_BINARY = "acceld-api", "acceld-conductor", "acceld-agent"
