"""acceld: accelerator management for OpenStack-style clouds."""

__version__ = "0.1.0"
