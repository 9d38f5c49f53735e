#!/usr/bin/env python3
"""asyncpg and a table whose columns change under a prepared statement
(issue 15 item 0); see schema_change_test.mjs for the scenario. asyncpg
re-prepares once on InvalidCachedStatementError (0A000 with routine
RevalidateCachedQuery) outside a transaction, so every execution after the
change must return rows of the new shape, never rows decoded with the old
description.

usage: schema_change_test.py URL
"""
import asyncio
import os
import sys

import asyncpg

DRIVER = "asyncpg_schema"
TABLE = "drv_asyncpg_schema_t"
CONNECTIONS = 4
ROUNDS = 3


class Report:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, ok, name, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        print(f"{'ok  ' if ok else 'FAIL'} {DRIVER}: {name}{' - ' + detail if detail else ''}", flush=True)

    def finish(self):
        ok = self.failed == 0 and self.passed > 0
        print(f"SUMMARY {DRIVER}: {'PASS' if ok else 'FAIL'} ({self.passed} checks passed, {self.failed} failed)")
        return 0 if ok else 1


def shape(rows):
    return " ".join(str(dict(r)) for r in rows)


async def lands_elsewhere(url, ddl, rep, label):
    """Through a pool of 2 the next execution must land on the origin
    connection that LACKS the statement: two holders keep both connections
    in a transaction while the execution waits for one; the holder whose
    backend is not the one the statement was prepared on commits first.
    Directly the same steps run on separate backends."""
    holders = [await asyncpg.connect(url, statement_cache_size=0) for _ in range(2)]
    client = await asyncpg.connect(url)
    query = f"SELECT *, pg_backend_pid() AS p FROM {TABLE} ORDER BY 1"

    def strip(rows):
        return " ".join(str({k: v for k, v in dict(r).items() if k != "p"}) for r in rows)

    try:
        await ddl.execute(f"CREATE TABLE {TABLE} (a int, b text)")
        await ddl.execute(f"INSERT INTO {TABLE} VALUES (1, 'one')")
        first = await client.fetch(query)
        prepared_on = first[0]["p"]
        before = strip(first)
        await ddl.execute(f"DROP TABLE {TABLE}")
        await ddl.execute(f"CREATE TABLE {TABLE} (x int, y int, z text)")
        await ddl.execute(f"INSERT INTO {TABLE} VALUES (10, 20, 'new')")
        held = []
        for h in holders:
            await h.execute("BEGIN")
            held.append(await h.fetchval("SELECT pg_backend_pid()"))
        pending = asyncio.ensure_future(client.fetch(query))
        await asyncio.sleep(0)  # let it send (it then waits for a connection)
        other = 1 if held[0] == prepared_on else 0
        await holders[other].execute("COMMIT")
        try:
            after = strip(await pending)
        except Exception as e:  # noqa: BLE001 - reported in the check
            after = repr(e)
        await holders[1 - other].execute("COMMIT")
        rep.check(before == "{'a': 1, 'b': 'one'}" and after == "{'x': 10, 'y': 20, 'z': 'new'}",
                  f"new shape where the re-prepare lands on a connection that lacks the statement ({label})",
                  f"{before} -> {after}")
        await ddl.execute(f"DROP TABLE {TABLE}")
    finally:
        for c in holders + [client]:
            await c.close()


async def main(url):
    rep = Report()
    conns = [await asyncpg.connect(url) for _ in range(CONNECTIONS)]
    ddl = await asyncpg.connect(url, statement_cache_size=0)
    query = f"SELECT * FROM {TABLE} ORDER BY 1"

    async def everywhere():
        return await asyncio.gather(*(c.fetch(query) for c in conns), return_exceptions=True)

    try:
        await ddl.execute(f"DROP TABLE IF EXISTS {TABLE}")
        await ddl.execute(f"CREATE TABLE {TABLE} (a int, b text)")
        await ddl.execute(f"INSERT INTO {TABLE} VALUES (1, 'one'), (2, 'two')")
        want1 = "{'a': 1, 'b': 'one'} {'a': 2, 'b': 'two'}"
        got = [shape(r) if not isinstance(r, Exception) else repr(r) for r in await everywhere()]
        rep.check(all(g == want1 for g in got), "old shape on every connection", " | ".join(got))

        await ddl.execute(f"DROP TABLE {TABLE}")
        await ddl.execute(f"CREATE TABLE {TABLE} (x int, y int, z text)")
        await ddl.execute(f"INSERT INTO {TABLE} VALUES (10, 20, 'new')")
        want2 = "{'x': 10, 'y': 20, 'z': 'new'}"
        for round_ in range(ROUNDS):
            got = [shape(r) if not isinstance(r, Exception) else repr(r) for r in await everywhere()]
            rep.check(all(g == want2 for g in got), f"round {round_}: new shape after DROP/CREATE", " | ".join(got))

        await ddl.execute(f"ALTER TABLE {TABLE} ALTER COLUMN y TYPE text USING y::text")
        want3 = "{'x': 10, 'y': '20', 'z': 'new'}"
        got = [shape(r) if not isinstance(r, Exception) else repr(r) for r in await everywhere()]
        rep.check(all(g == want3 for g in got), "new column type after ALTER", " | ".join(got))
        await ddl.execute(f"DROP TABLE {TABLE}")
        await lands_elsewhere(url, ddl, rep, "DDL through the same URL")
        # DDL that bypasses the pooler (drivers_test.sh passes the origin's URL).
        direct = await asyncpg.connect(os.environ.get("DRV_DIRECT_URL", url), statement_cache_size=0)
        await lands_elsewhere(url, direct, rep, "DDL on the origin directly")
        await direct.close()
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        rep.check(False, "schema change", repr(e))
    for c in conns + [ddl]:
        await c.close()
    return rep.finish()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1])))
