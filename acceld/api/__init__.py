"""The REST API: a WSGI app in Placement's style (route table, flat handlers)."""
