"""Flat handlers: policy check, parse with a schema, one domain call, serialize."""
