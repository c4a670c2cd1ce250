"""Agent drivers: the protocol, the registry (entry points) and the drivers."""
