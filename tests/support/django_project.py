"""Django set up once per test process, the way a service's settings.py would: the ``default``
database is the stack's PostgreSQL as the app role (Django's psycopg 3 backend), ``lite`` an
in-memory SQLite (a database postbox must refuse).

Django's settings are process-wide and can be configured only once, so every test that needs
Django goes through :func:`django_connections`; nothing connects until a test uses a connection.
"""

from __future__ import annotations

from typing import Any

from psycopg.conninfo import conninfo_to_dict

from postbox.settings import Settings


def django_connections() -> Any:
    """``django.db.connections``, with the settings configured (once) and Django set up."""
    import django
    from django.conf import settings

    if not settings.configured:
        params = conninfo_to_dict(Settings.load().database_url)
        settings.configure(
            DATABASES={
                "default": {
                    "ENGINE": "django.db.backends.postgresql",
                    "NAME": params.get("dbname", ""),
                    "USER": params.get("user", ""),
                    "PASSWORD": params.get("password", ""),
                    "HOST": params.get("host", ""),
                    "PORT": params.get("port", ""),
                },
                "lite": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
            },
            USE_TZ=True,
        )
        django.setup()
    from django.db import connections

    return connections
