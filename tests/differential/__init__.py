"""Differential test: the same bad requests to upstream Cyborg and to acceld.

``cases`` generates the requests (per route of the v2 endpoint table and per field),
``sides`` talks to one server (discovery, set-up, clean-up), ``runner`` sends every case
to both and compares the statuses; ``test_differential`` runs it under pytest. See
``README.md`` in this directory.
"""
