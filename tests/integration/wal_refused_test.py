#!/usr/bin/python3
"""--wal-invalidation against an origin that does not allow the feed (issue
29, item 5), on the shared test cluster (wal_level = replica):

- `auto`: one clear log line (wal_level), and the cache works by max age as
  without the feed (repeated reads are hits);
- `on`: one clear log line, and no cached rows are served (every read goes
  to the origin) — the data path is not stalled either way;
- a role without REPLICATION: the log names it;
- `hyperpool validate` says what the origin lacks.

Needs HYPERPOOL_TEST_PG_ENV (the postgres fixture) and HYPERPOOL_BINARY.
"""
import os
import re
import subprocess
import urllib.parse
import urllib.request

import psycopg

from pgtest_env import ERR, check, env_get, err_text, fail, fetch_metrics, origin_url, wait_for

BINARY = os.environ["HYPERPOOL_BINARY"]


def run(origin, mode, event_pattern):
    """Starts serve, waits for the feed's log line, reads one row 20 times; returns (hits, serving, bypassed)."""
    start = len(err_text())
    proc = subprocess.Popen([BINARY, "serve", "--origin", origin, "--wal-invalidation", mode, "--cache-max-age", "600",
                             "--metrics-listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=ERR, text=True)
    try:
        url = proc.stdout.readline().strip()
        if not url.startswith("postgresql://"):
            fail(f"no connection string from serve --wal-invalidation {mode}")
        # serve logs its metrics address after it started the Endpoint, so
        # the feed's line may come first: wait for both.
        wait_for(lambda: "event=wal_feed_unavailable" in err_text()[start:] and "metrics on http" in err_text()[start:],
                 "the feed's wal_feed_unavailable line and the metrics address", 20)
        if not re.search(event_pattern, err_text()[start:]):
            fail(f"the log line does not match /{event_pattern}/")
        murl = re.findall(r"metrics on (http://[0-9.:]+)/metrics", err_text()[start:])[0]
        wait_for(lambda: fetch_metrics(murl).get('hyperpool_wal_feed_state{state="unavailable"}') == 1,
                 "the feed reported unavailable", 10)
        def hits():
            m = fetch_metrics(murl)
            return (m.get('hyperpool_cache_hits_total{tier="client"}', 0) +
                    m.get('hyperpool_cache_hits_total{tier="endpoint"}', 0))
        with psycopg.connect(url, autocommit=True) as c:
            def read():
                value = c.execute("SELECT v FROM wal_refused WHERE id = %s", (1,)).fetchone()[0]
                if value != 7:
                    fail(f"read {value}, not 7")
            if mode == "auto":
                # The catalog is read at the first decision that needs it.
                wait_for(lambda: read() or hits() > 0, "a cache hit (auto works by max age)", 15)
            for _ in range(20):
                read()
            def bypassed():
                return fetch_metrics(murl).get('hyperpool_cache_bypassed_total{tier="endpoint"}', 0)
            if mode == "on":
                # While the session lives: the Endpoint publishes its
                # counters within 50 ms of a bypass, not only when some
                # tier operation or the session's end publishes them.
                wait_for(lambda: bypassed() >= 20, "20 bypasses on /metrics while the session is open", 10)
        m = fetch_metrics(murl)
        return hits(), m.get("hyperpool_wal_feed_serving"), bypassed()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    admin = origin_url()
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS wal_refused")
        c.execute("CREATE TABLE wal_refused (id int PRIMARY KEY, v int)")
        c.execute("INSERT INTO wal_refused VALUES (1, 7)")
        c.execute("GRANT SELECT ON wal_refused TO PUBLIC")
        level = c.execute("SHOW wal_level").fetchone()[0]
    check(level != "logical", f"the shared cluster's wal_level is {level}")

    hits, serving, _ = run(admin, "auto", r"event=wal_feed_unavailable .*wal_level >= logical.*auto: the cache works by max age")
    check(hits >= 15, f"auto without the origin's consent: the cache works by max age ({hits:.0f} hits of 20 reads)")
    check(serving == 1, "auto: the gate stays open")

    hits, serving, bypassed = run(admin, "on",
                                  r"event=wal_feed_unavailable .*wal_level >= logical.*on: no cached rows are served")
    check(hits == 0 and bypassed >= 20,
          f"on without the origin's consent: no cached rows served ({hits:.0f} hits, {bypassed:.0f} reads bypassed "
          "the tiers), reads still answered")
    check(serving == 0, "on: the gate is closed")

    scram = "postgresql://{}:{}@{}:{}/{}?sslmode=disable".format(
        env_get("SCRAM_USER"), urllib.parse.quote(env_get("SCRAM_PASSWORD"), safe=""), env_get("PGHOST"),
        env_get("PGPORT"), env_get("PGDATABASE"))
    hits, _, _ = run(scram, "auto", r"event=wal_feed_unavailable .*must be superuser or replication role")
    check(hits >= 15, "a role without REPLICATION: logged, and auto works by max age")

    out = subprocess.run([BINARY, "validate", scram], capture_output=True, text=True, timeout=30).stdout
    check("wal invalidation: unavailable: wal_level is replica" in out and "lacks REPLICATION" in out,
          f"validate reports what the origin lacks ({out.strip().splitlines()[-1]})")
    print("PASS")


main()
