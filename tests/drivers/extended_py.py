#!/usr/bin/env python3
"""asyncpg and psycopg 3 (prepare_threshold=0) and the extended-protocol work
the Client answers itself (docs/architecture.md, "Statement metadata at the
Client", "Query cache"). Prints one JSON line per step, so that a harness can
compare a run through hyperpool with a direct one.

usage: extended_py.py asyncpg|psycopg URL MODE [ARG...]
  setup              (re)creates the tables
  reads TAG N        5 distinct reads of ext_py, each repeated N times
  write              read, read, UPDATE through the same connection, read
  ddl ADMIN_URL      prepare; ALTER the table directly on the origin; run it
  search_path        the same text under two search_path settings
  role               the same text before, under and after SET ROLE (and
                     set_config('role', ...)): the role's own schema
                     ("$user" in search_path) holds a table of that name
                     with other columns and rows
"""
import asyncio
import json
import sys


def out(**kw):
    print(json.dumps(kw, default=str), flush=True)


SETUP = [
    "DROP TABLE IF EXISTS ext_py",
    "CREATE TABLE ext_py(k int primary key, v text)",
    "INSERT INTO ext_py SELECT g, 'v' || g FROM generate_series(1, 20) g",
    "DROP SCHEMA IF EXISTS ext_sp2 CASCADE",
    "CREATE SCHEMA ext_sp2",
    "DROP TABLE IF EXISTS public.ext_sp",
    "CREATE TABLE public.ext_sp(x int)",
    "INSERT INTO public.ext_sp VALUES (1)",
    # Same column types: the Endpoint's statement catalog keys by text alone,
    # so one text under two search_paths with different result types would
    # meet its 0A000 (docs/architecture.md, "Prepared statements").
    "CREATE TABLE ext_sp2.ext_sp(x int)",
    "INSERT INTO ext_sp2.ext_sp VALUES (2)",
    # A role whose "$user" schema shadows public.ext_sp with another shape.
    "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ext_r') THEN CREATE ROLE ext_r; END IF; END $$",
    "DROP SCHEMA IF EXISTS ext_r CASCADE",
    "CREATE SCHEMA ext_r AUTHORIZATION ext_r",
    "CREATE TABLE ext_r.ext_sp(y text, z int)",
    "INSERT INTO ext_r.ext_sp VALUES ('r', 3)",
    "GRANT SELECT ON ext_r.ext_sp TO ext_r",
]
ROLE_STEPS = (
    ("default", None),
    ("default again", None),
    ("SET ROLE", "SET ROLE ext_r"),
    ("SET ROLE again", None),
    ("RESET ROLE", "RESET ROLE"),
    ("set_config role", "SELECT set_config('role', 'ext_r', false)"),
)


def read_sql(tag, i, param):
    return f"SELECT v FROM ext_py WHERE k = {param} /* {tag} {i} */"


async def run_asyncpg(url, mode, args):
    import asyncpg
    if mode == "setup":
        c = await asyncpg.connect(url)
        for s in SETUP:
            await c.execute(s)
        await c.close()
        out(setup=True)
    elif mode == "reads":
        tag, n = args[0], int(args[1])
        c = await asyncpg.connect(url)
        got = []
        for _ in range(n):
            for i in range(1, 6):
                # fetch (Execute without a row limit): fetchval/fetchrow ask
                # for one row, a partial result the cache never stores.
                got.append((await c.fetch(read_sql(tag, i, "$1"), i))[0][0])
        await c.close()
        out(reads=got)
    elif mode == "write":
        c = await asyncpg.connect(url)
        q = "SELECT v FROM ext_py WHERE k = $1"
        before = (await c.fetch(q, 8))[0][0]
        again = (await c.fetch(q, 8))[0][0]
        await c.execute("UPDATE ext_py SET v = 'w8' WHERE k = $1", 8)
        after = (await c.fetch(q, 8))[0][0]
        await c.execute("UPDATE ext_py SET v = 'v8' WHERE k = $1", 8)
        await c.close()
        out(before=before, again=again, after=after)
    elif mode == "ddl":
        admin = await asyncpg.connect(args[0])
        await admin.execute("DROP TABLE IF EXISTS ext_ddl_py; CREATE TABLE ext_ddl_py(a int); "
                            "INSERT INTO ext_ddl_py VALUES (1)")
        q = "SELECT * FROM ext_ddl_py"
        first = await asyncpg.connect(url)
        out(step="first", rows=[dict(r) for r in await first.fetch(q)])
        await first.close()
        c = await asyncpg.connect(url)
        stmt = await c.prepare(q)  # answered at the Client through hyperpool
        out(step="prepared", columns=[a.name for a in stmt.get_attributes()])
        # Ends the prepare's implicit transaction on a direct connection (its
        # lock would hold the ALTER up).
        await c.execute("SELECT 1")
        await admin.execute("ALTER TABLE ext_ddl_py ADD COLUMN b int DEFAULT 2")
        try:
            out(step="after ddl", rows=[dict(r) for r in await stmt.fetch()])
        except Exception as e:  # noqa: BLE001 -- the transcript is the check
            out(step="after ddl", error=type(e).__name__, sqlstate=getattr(e, "sqlstate", None))
        # The statement cache path: asyncpg re-prepares and retries on 0A000.
        out(step="fetch", rows=[dict(r) for r in await c.fetch(q)])
        await admin.execute("ALTER TABLE ext_ddl_py ADD COLUMN c int DEFAULT 3")
        out(step="fetch after ddl", rows=[dict(r) for r in await c.fetch(q)])
        await c.close()
        await admin.close()
    elif mode == "search_path":
        q = "SELECT * FROM ext_sp"
        a = await asyncpg.connect(url)
        out(step="default", rows=[dict(r) for r in await a.fetch(q)])
        out(step="default again", rows=[dict(r) for r in await a.fetch(q)])
        await a.close()
        b = await asyncpg.connect(url)
        await b.execute("SET search_path = ext_sp2, public")
        out(step="SET search_path", rows=[dict(r) for r in await b.fetch(q)])
        await b.close()
        c = await asyncpg.connect(url, server_settings={"search_path": "ext_sp2, public"})
        out(step="startup search_path", rows=[dict(r) for r in await c.fetch(q)])
        await c.close()
        d = await asyncpg.connect(url)
        out(step="default after", rows=[dict(r) for r in await d.fetch(q)])
        await d.close()
    elif mode == "role":
        q = "SELECT * FROM ext_sp"
        # Another session fills the statement metadata and the caches first.
        a = await asyncpg.connect(url)
        out(step="other session", rows=[dict(r) for r in await a.fetch(q)])
        await a.close()
        b = await asyncpg.connect(url)
        for label, change in ROLE_STEPS:
            if change:
                await b.execute(change)
            out(step=label, rows=[dict(r) for r in await b.fetch(q)])
        await b.close()
        d = await asyncpg.connect(url)
        out(step="default after", rows=[dict(r) for r in await d.fetch(q)])
        await d.close()


def run_psycopg(url, mode, args):
    import psycopg
    if mode == "setup":
        with psycopg.connect(url, autocommit=True) as c:
            for s in SETUP:
                c.execute(s)
        out(setup=True)
    elif mode == "reads":
        tag, n = args[0], int(args[1])
        got = []
        with psycopg.connect(url, autocommit=True, prepare_threshold=0) as c:
            for _ in range(n):
                for i in range(1, 6):
                    got.append(c.execute(read_sql(tag, i, "%s"), (i,)).fetchone()[0])
            # Binary results too.
            with c.cursor(binary=True) as cur:
                for _ in range(n):
                    got.append(cur.execute(read_sql(tag, 9, "%s"), (9,)).fetchone()[0])
        out(reads=got)
    elif mode == "write":
        q = "SELECT v FROM ext_py WHERE k = %s"
        with psycopg.connect(url, autocommit=True, prepare_threshold=0) as c:
            before = c.execute(q, (9,)).fetchone()[0]
            again = c.execute(q, (9,)).fetchone()[0]
            c.execute("UPDATE ext_py SET v = 'w9' WHERE k = %s", (9,))
            after = c.execute(q, (9,)).fetchone()[0]
            c.execute("UPDATE ext_py SET v = 'v9' WHERE k = %s", (9,))
        out(before=before, again=again, after=after)
    elif mode == "search_path":
        q = "SELECT * FROM ext_sp"
        for label, opts in (("default", {}), ("SET search_path", None), ("startup search_path",
                            {"options": "-c search_path=ext_sp2,public"}), ("default after", {})):
            with psycopg.connect(url, autocommit=True, prepare_threshold=0, **(opts or {})) as c:
                if opts is None:
                    c.execute("SET search_path = ext_sp2, public")
                rows = [c.execute(q).fetchall() for _ in range(2)]
                out(step=label, rows=rows)
    elif mode == "role":
        q = "SELECT * FROM ext_sp"
        with psycopg.connect(url, autocommit=True, prepare_threshold=0) as a:
            out(step="other session", rows=a.execute(q).fetchall())
        # One connection per role: psycopg does not re-prepare, so a
        # statement it prepared under one role fails with 0A000 under a role
        # that resolves it to another relation, directly too. (Through
        # hyperpool it then also fails after RESET ROLE, where a direct
        # connection succeeds again: the Endpoint retires a server statement
        # on the origin's 0A000 -- known divergence, docs/architecture.md.)
        for label, changes in (("default", ()), ("SET ROLE", ("SET ROLE ext_r",)),
                               ("RESET ROLE", ("SET ROLE ext_r", "RESET ROLE")),
                               ("set_config role", ("SELECT set_config('role', 'ext_r', false)",))):
            with psycopg.connect(url, autocommit=True, prepare_threshold=0) as b:
                for change in changes:
                    b.execute(change)
                for _ in range(2):
                    cur = b.execute(q)
                    out(step=label, columns=[d.name for d in cur.description], rows=cur.fetchall())
        with psycopg.connect(url, autocommit=True, prepare_threshold=0) as d:
            out(step="default after", rows=d.execute(q).fetchall())


def main():
    driver, url, mode, *args = sys.argv[1:]
    try:
        if driver == "asyncpg":
            asyncio.run(run_asyncpg(url, mode, args))
        else:
            run_psycopg(url, mode, args)
    except Exception as e:  # noqa: BLE001
        out(error=type(e).__name__, message=str(e))
        sys.exit(1)


if __name__ == "__main__":
    main()
