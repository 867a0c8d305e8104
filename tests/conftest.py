"""Fixtures shared by every test module."""

from __future__ import annotations

import os
import secrets

import pytest
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.exc import OperationalError

#: The local PostgreSQL server's maintenance database, used to create and drop test databases.
PG_ADMIN_URL = os.environ.get("GANGWAY_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


@pytest.fixture(scope="session")
def pg_url():
    """A fresh PostgreSQL database ``gangway_test_<random>`` for this run, dropped afterwards
    (skips, with the reason, when the server is unreachable)."""
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"gangway_test_{secrets.token_hex(6)}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as exc:
        admin.dispose()
        pytest.skip(f"PostgreSQL unreachable at {PG_ADMIN_URL}: {exc.orig}")
    try:
        yield make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
