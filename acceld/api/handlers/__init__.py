"""Flat handlers: the query and body the router validated in, one domain call, JSON out."""
