#!/usr/bin/env python3
"""Prepared statements across DROP / re-CREATE of their table (issue 28
item 2), psycopg 3 and asyncpg: prints a transcript of every execution
(rows, or the error's SQLSTATE and message) that must be the same through
hyperpool as directly against PostgreSQL (tests/integration/
driver_transcripts_test.sh runs both and compares).

Several connections hold statements on a table (named and unnamed, in and
out of transaction blocks); another connection (DDL_URL: the same target,
or the origin itself) drops and re-creates the table with the SAME columns
(PostgreSQL re-plans: no error), then with other columns, renames a column
and changes a column's type (a named statement re-executed gets 0A000
"cached plan must not change result type"; an unnamed one is parsed afresh
and never does). Each step runs the statements again.

When DDL_URL differs from URL (DDL that bypasses the pooler) the reads
carry /* hyperpool:nocache */: the query cache cannot see such DDL before
max_age (docs/architecture.md, "What cannot be seen"), a direct connection
needs no cache hint, and the shapes are what is compared.

usage: shape_transcript.py URL DDL_URL [psycopg|asyncpg]
"""
import asyncio
import sys

import asyncpg
import psycopg

TABLE = "drv_shape_t"
URL, DDL_URL = sys.argv[1], sys.argv[2]
PARTS = sys.argv[3:] or ["psycopg", "asyncpg"]
HINT = "" if URL == DDL_URL else " /* hyperpool:nocache */"

DDL_STEPS = [
    ("same columns", [f"DROP TABLE {TABLE}", f"CREATE TABLE {TABLE} (a int, b text)",
                      f"INSERT INTO {TABLE} VALUES (3, 'three')"]),
    ("same columns again", [f"DROP TABLE {TABLE}", f"CREATE TABLE {TABLE} (a int, b text)",
                            f"INSERT INTO {TABLE} VALUES (4, 'four')"]),
    ("other columns", [f"DROP TABLE {TABLE}", f"CREATE TABLE {TABLE} (a int, b text, c int)",
                       f"INSERT INTO {TABLE} VALUES (5, 'five', 50)"]),
    ("renamed column", [f"ALTER TABLE {TABLE} RENAME COLUMN c TO d"]),
    ("other type", [f"ALTER TABLE {TABLE} ALTER COLUMN d TYPE bigint"]),
    ("back to two columns", [f"DROP TABLE {TABLE}", f"CREATE TABLE {TABLE} (a int, b text)",
                             f"INSERT INTO {TABLE} VALUES (6, 'six')"]),
]


def out(line):
    print(line, flush=True)


def fmt_error(e):
    state = getattr(e, "sqlstate", None) or getattr(e, "pgcode", None) or ""
    return f"error {state} {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def ddl(statements):
    with psycopg.connect(DDL_URL, autocommit=True, prepare_threshold=None) as c:
        for s in statements:
            c.execute(s)


# ---- psycopg 3


def psycopg_run(name, conn, query, params, in_txn):
    try:
        cur = conn.execute(query, params)
        rows = cur.fetchall()
        cols = [d.name for d in cur.description]
        if in_txn:
            conn.commit()
        return f"{cols} {rows}"
    except psycopg.Error as e:
        if in_txn or not conn.autocommit:
            conn.rollback()
        return fmt_error(e)


def psycopg_part():
    holders = [
        # (label, connection, query, params, in a transaction block)
        ("named autocommit", psycopg.connect(URL, autocommit=True, prepare_threshold=0),
         f"SELECT * FROM {TABLE} ORDER BY 1{HINT}", None, False),
        ("named in transaction", psycopg.connect(URL, autocommit=False, prepare_threshold=0),
         f"SELECT * FROM {TABLE} WHERE a >= %s ORDER BY 1{HINT}", (0,), True),
        ("unnamed autocommit", psycopg.connect(URL, autocommit=True, prepare_threshold=None),
         f"SELECT * FROM {TABLE} ORDER BY 1{HINT}", None, False),
        ("unnamed in transaction", psycopg.connect(URL, autocommit=False, prepare_threshold=None),
         f"SELECT * FROM {TABLE} WHERE a > %s ORDER BY 1{HINT}", (-1,), True),
        ("threshold 2", psycopg.connect(URL, autocommit=True, prepare_threshold=2),
         f"SELECT a, b FROM {TABLE} ORDER BY 1{HINT}", None, False),
    ]
    try:
        for label, conn, query, params, in_txn in holders:
            for i in range(3):
                out(f"psycopg {label} start#{i}: {psycopg_run(label, conn, query, params, in_txn)}")
        for step, statements in DDL_STEPS:
            ddl(statements)
            for label, conn, query, params, in_txn in holders:
                for i in range(2):
                    out(f"psycopg {label} {step}#{i}: {psycopg_run(label, conn, query, params, in_txn)}")
    finally:
        for h in holders:
            h[1].close()


# ---- asyncpg


async def asyncpg_part():
    auto = await asyncpg.connect(URL)                         # statement cache: re-prepares on 0A000
    txn = await asyncpg.connect(URL)                          # the same inside transactions
    explicit = await asyncpg.connect(URL, statement_cache_size=0)
    query = f"SELECT * FROM {TABLE} ORDER BY 1{HINT}"
    # The query's result is in the cache when the app prepares it itself:
    # prepare() sends Parse + Describe + Flush, and the Bind + Execute + Sync
    # after it must still reach the origin (its Sync ends the implicit
    # transaction the Parse began; answered from the Client tier instead, the
    # origin connection stayed in it, holding a lock the next DROP waited on).
    held = None  # a statement the app holds itself, prepared after the others ran

    async def run(label):
        nonlocal held
        try:
            if label == "cached":
                rows = await auto.fetch(query)
            elif label == "cached in transaction":
                async with txn.transaction():
                    rows = await txn.fetch(query)
            else:
                if held is None:
                    held = await explicit.prepare(query)
                rows = await held.fetch()
            return " ".join(str(dict(r)) for r in rows) or "(no rows)"
        except asyncpg.PostgresError as e:
            return fmt_error(e)
        except asyncpg.InterfaceError as e:
            return f"interface error: {str(e).splitlines()[0]}"

    labels = ["cached", "cached in transaction", "explicit"]
    try:
        for label in labels:
            for i in range(2):
                out(f"asyncpg {label} start#{i}: {await run(label)}")
        for step, statements in DDL_STEPS:
            ddl(statements)
            for label in labels:
                for i in range(2):
                    out(f"asyncpg {label} {step}#{i}: {await run(label)}")
    finally:
        for c in (auto, txn, explicit):
            await c.close()


def main():
    for part in PARTS:
        ddl([f"DROP TABLE IF EXISTS {TABLE}", f"CREATE TABLE {TABLE} (a int, b text)",
             f"INSERT INTO {TABLE} VALUES (1, 'one'), (2, 'two')"])
        if part == "psycopg":
            psycopg_part()
        else:
            asyncio.run(asyncpg_part())
    ddl([f"DROP TABLE IF EXISTS {TABLE}"])
    out("END")


if __name__ == "__main__":
    main()
