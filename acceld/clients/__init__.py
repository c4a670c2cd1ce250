"""Typed clients of the services acceld talks to, over injected keystoneauth adapters."""
