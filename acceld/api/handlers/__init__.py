"""Flat handlers: given the request's validated query and body by the router, one domain
call, serialize."""
