"""Agent drivers: the protocol, the registry (stevedore, entry points) and the drivers."""
