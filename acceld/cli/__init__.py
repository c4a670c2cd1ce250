"""Operator command-line client for acceld.

The CLI talks to the acceld REST API (see ``docs/api-v1.md``) only; it never imports
server modules, so it can be installed and run on any operator workstation.
Entry point: :func:`acceld.cli.shell.main`.
"""
