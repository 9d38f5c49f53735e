#!/usr/bin/python3
"""ParameterStatus through `hyperpool serve` (defaults, cache on) equals a
direct connection's for startup settings a driver sends in non-canonical
spelling (issue 28, item 9): client_encoding=utf-8 is reported as UTF8,
DateStyle=iso, dmy as "ISO, DMY", IntervalStyle in lowercase, as
PostgreSQL does; asyncpg (server_settings) and psycopg (libpq startup
options) both. SHOW agrees with the reported value.

Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
"""
import asyncio

import asyncpg
import psycopg

from pgtest_env import check, origin_url, start_serve, stop_serve  # beside this script

NAMES = ("client_encoding", "DateStyle", "IntervalStyle", "TimeZone", "application_name")
# In this order: a partial DateStyle ("SQL") after a session that left
# German, DMY on the pool's connections must still mean SQL, MDY.
CASES = [
    {"client_encoding": "utf-8", "DateStyle": "iso, dmy"},
    {"client_encoding": "unicode", "DateStyle": "german", "IntervalStyle": "ISO_8601"},
    {"DateStyle": "SQL", "application_name": "caf\u00e9 app"},
    {"DateStyle": "ymd"},
]


async def asyncpg_reported(url, settings):
    conn = await asyncpg.connect(url, server_settings=settings)
    try:
        s = conn.get_settings()
        reported = {n: getattr(s, n, None) for n in NAMES}
        shown = await conn.fetchval("SHOW DateStyle")
        return reported, shown
    finally:
        await conn.close()


def psycopg_params(url, settings):
    """Settings as startup parameters of their own (libpq only sends a few that
    way: client_encoding and application_name)."""
    kw = {}
    if "client_encoding" in settings:
        kw["client_encoding"] = settings["client_encoding"]
    if "application_name" in settings:
        kw["application_name"] = settings["application_name"]
    with psycopg.connect(url, autocommit=True, **kw) as conn:
        return {n: conn.info.parameter_status(n) for n in NAMES}


proc, url = start_serve(["--origin", origin_url(), "--pool-size", "2"])
try:
    for settings in CASES:
        direct, direct_show = asyncio.run(asyncpg_reported(origin_url(), settings))
        pooled, pooled_show = asyncio.run(asyncpg_reported(url, settings))
        check(pooled == direct, "asyncpg {}: reported {} (direct {})".format(settings, pooled, direct))
        check(pooled_show == direct_show, "asyncpg {}: SHOW DateStyle {!r}".format(settings, pooled_show))
        pgp = psycopg_params(url, settings)
        pgd = psycopg_params(origin_url(), settings)
        check(pgp == pgd, "psycopg parameters {}: reported {} (direct {})".format(settings, pgp, pgd))
    print("PASS")
finally:
    stop_serve(proc)
