"""WSGI entry points for production servers (uWSGI, gunicorn)."""
