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
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        rep.check(False, "schema change", repr(e))
    for c in conns + [ddl]:
        await c.close()
    return rep.finish()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1])))
