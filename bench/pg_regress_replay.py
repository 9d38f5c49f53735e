#!/usr/bin/python3
"""Replays the regression suite's one-line SELECTs, each twice in a row, on
one session through a target, after the suite has run (bench/pg_regress.sh,
REGRESS_REPLAY=1): with no DDL in between, the catalog settles and the cache
is in play, so the second of each pair may be a hit.

  pg_regress_replay.py run URL SQLDIR OUT.jsonl
      one line per statement: [text, first, second], each outcome the rows
      (as text) or the error's SQLSTATE
  pg_regress_replay.py compare OFF.jsonl ON.jsonl [EXCLUDE]
      exit 1 if, for a statement outside EXCLUDE (statement texts, one a
      line), the cache-on pair differs from the cache-off pair, or a pair
      that differs with the cache off (a volatile result) is equal with it on
"""
import json
import pathlib
import re
import sys

# Calls that wait, end or pin sessions, change settings or read statistics.
SESSION_WORDS = ("pg_sleep", "pg_terminate", "pg_cancel", "advisory", "set_config", "pg_stat", "lo_",
                 "pg_notify", "pg_reload", "pg_backend_pid", "dblink")
PSQL_VARIABLE = re.compile(r"(?<![:\w]):['\"A-Za-z_]")


def statements(sqldir):
    out = []
    for f in sorted(pathlib.Path(sqldir).glob("*.sql")):
        for line in f.read_text(errors="replace").splitlines():
            s = line.strip()
            if not s.lower().startswith("select ") or not s.endswith(";") or s.count(";") != 1:
                continue
            if "\\" in s or PSQL_VARIABLE.search(s) or "--" in s or "/*" in s:
                continue
            if any(w in s.lower() for w in SESSION_WORDS):
                continue
            out.append(s)
    return out


def outcome(cur, text):
    import psycopg
    try:
        cur.execute(text)
        rows = cur.fetchall() if cur.description else []
        return ["rows", [[None if v is None else str(v) for v in r] for r in rows]]
    except psycopg.Error as e:
        return ["error", e.sqlstate or "?"]


def run(url, sqldir, path):
    import psycopg
    with psycopg.connect(url, autocommit=True) as conn, \
            open(path, "w") as out:
        cur = psycopg.ClientCursor(conn)
        for text in statements(sqldir):
            first = outcome(cur, text)
            second = outcome(cur, text)
            out.write(json.dumps([text, first, second]) + "\n")


def compare(off_path, on_path, exclude_path=None):
    excluded = set()
    if exclude_path and pathlib.Path(exclude_path).exists():
        excluded = {l.rstrip("\n") for l in open(exclude_path) if l.strip() and not l.startswith("#")}
    off = [json.loads(l) for l in open(off_path)]
    on = [json.loads(l) for l in open(on_path)]
    bad = []
    if len(off) != len(on):
        bad.append(f"{len(off)} statements with the cache off, {len(on)} with it on")
    hits_possible = 0
    for (text, a1, a2), (text_b, b1, b2) in zip(off, on):
        if text != text_b:
            bad.append(f"statement lists differ at {text!r}")
            break
        if text in excluded:
            continue
        if a1 == a2:
            hits_possible += 1
            if (b1, b2) != (a1, a2):
                bad.append(f"differs with the cache on: {text}\n  off: {json.dumps(a1)[:300]}\n  on:  {json.dumps(b1)[:300]} / {json.dumps(b2)[:300]}")
        elif b1 == b2 and b1[0] == "rows":
            bad.append(f"a volatile result repeated with the cache on: {text}\n  off: {json.dumps(a1)[:200]} then {json.dumps(a2)[:200]}\n  on:  {json.dumps(b1)[:200]} twice")
    print(f"replay: {len(off)} statements, {hits_possible} stable pairs, {len(bad)} differences")
    for b in bad[:40]:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(compare(*sys.argv[2:5]))
