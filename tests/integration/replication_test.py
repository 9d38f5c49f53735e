#!/usr/bin/python3
"""Replication connections through `hyperpool serve` (docs/architecture.md,
"Replication connections"): a login with `replication=database` gets a
walsender of its own, its bytes carried unchanged both ways, outside the
pool. On a cluster of the test's own (wal_level = logical), `serve` with
its defaults (cache on) and a pool of one connection:

1. psql `IDENTIFY_SYSTEM` answers the origin's system identifier;
2. pg_recvlogical (libpq: CopyBoth, standby status updates) creates a slot,
   streams, and sees a row inserted through the same `serve` while it
   streams: the walsender holds no pooled connection, so the insert does
   not wait for it; the app's application_name reaches the origin; the
   walsender ends when the app does;
3. pg_receivewal (a physical walsender, replication=true) is refused with
   28000 by default (it streams every database of the cluster), and with
   `--replication all` streams WAL up to a segment switched after a write;
4. postgres.js 3.x `sql.subscribe` sees an insert and an update in order
   (tests/drivers/subscribe_postgresjs.mjs);
5. an origin role without REPLICATION: the app gets the origin's FATAL
   (42501), and ordinary sessions of that `serve` go on.

Before replication connections were tunnelled, each of these got 08P01
"replication connections are not supported by hyperpool" at login.

Needs HYPERPOOL_BINARY; starts and stops its own PostgreSQL 15.
"""
import os
import shutil
import signal
import subprocess
import tempfile
import urllib.parse

import psycopg

from pgtest_env import check, fail, start_cluster, start_serve, stop_cluster, stop_serve, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
MARK = "hello-through-a-walsender"


def with_param(url, name, value):
    return url + ("&" if "?" in url else "?") + f"{name}={value}"


def psql(pgbin, url, sql):
    return subprocess.run([os.path.join(pgbin, "psql"), "-X", "-At", "-d", url, "-c", sql], capture_output=True,
                          text=True, timeout=60)


def walsenders(direct, application_name):
    with psycopg.connect(direct, autocommit=True) as c:
        return c.execute("SELECT count(*) FROM pg_stat_replication WHERE application_name = %s",
                         [application_name]).fetchone()[0]


def main():
    base = tempfile.mkdtemp(prefix="hp-repl-")
    out_dir = tempfile.mkdtemp(prefix="hp-repl-out-")
    procs = []
    try:
        env, direct = start_cluster(base, "wal_level = logical\nmax_wal_senders = 10\nmax_replication_slots = 10")
        pgbin = env["PGBIN"]
        proc, url = start_serve(["--origin", direct, "--pool-size", "1"])
        procs.append(proc)
        repl = with_param(url, "replication", "database")

        # 1. IDENTIFY_SYSTEM: the origin's answer.
        with psycopg.connect(direct, autocommit=True) as c:
            sysid = str(c.execute("SELECT system_identifier FROM pg_control_system()").fetchone()[0])
        r = psql(pgbin, repl, "IDENTIFY_SYSTEM")
        check(r.returncode == 0 and r.stdout.split("|")[0] == sysid,
              f"IDENTIFY_SYSTEM through serve answers the origin's system id ({r.stdout.strip()} {r.stderr.strip()})")

        # 2. pg_recvlogical: a slot, a stream, a row inserted meanwhile.
        recv = os.path.join(pgbin, "pg_recvlogical")
        r = subprocess.run([recv, "-d", url, "--slot", "hp_repl", "--create-slot", "-P", "test_decoding"],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, f"pg_recvlogical --create-slot through serve ({r.stderr.strip()})")
        out = os.path.join(out_dir, "changes.txt")
        stream = subprocess.Popen([recv, "-d", with_param(url, "application_name", "hp_repl_test"), "--slot",
                                   "hp_repl", "--start", "-f", out, "-F", "0", "-s", "1"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        procs.append(stream)
        wait_for(lambda: walsenders(direct, "hp_repl_test") == 1, "the walsender, named by the app, at the origin", 20)
        with psycopg.connect(url, autocommit=True) as c:  # the pool's one connection: not the walsender's
            c.execute("CREATE TABLE repl_t (id int PRIMARY KEY, v text)")
            c.execute("INSERT INTO repl_t VALUES (1, %s)", [MARK])

        def streamed():
            return os.path.exists(out) and MARK in open(out).read()
        wait_for(streamed, "the insert in pg_recvlogical's output", 20)
        check(True, "pg_recvlogical streamed a row inserted through the same serve (pool of 1) while it streamed")
        stream.send_signal(signal.SIGINT)
        stream.wait(20)
        wait_for(lambda: walsenders(direct, "hp_repl_test") == 0, "the walsender gone after the app left", 20)
        check(True, "the walsender ends when the app does")
        r = subprocess.run([recv, "-d", url, "--slot", "hp_repl", "--drop-slot"], capture_output=True, text=True,
                           timeout=60)
        check(r.returncode == 0, f"pg_recvlogical --drop-slot through serve ({r.stderr.strip()})")

        # 3. A physical walsender (pg_receivewal: replication=true), with
        # the replication line in pg_hba.conf it needs directly too.
        with open(os.path.join(base, "data", "pg_hba.conf"), "a") as hba:
            hba.write("host replication all 127.0.0.1/32 scram-sha-256\n")
        with psycopg.connect(direct, autocommit=True) as c:
            c.execute("SELECT pg_reload_conf()")
        wal_dir = os.path.join(out_dir, "wal")
        os.mkdir(wal_dir)
        receivewal = os.path.join(pgbin, "pg_receivewal")
        # serve's default (--replication logical): a physical walsender,
        # which streams every database of the cluster, is refused as a
        # pg_hba.conf without a replication line refuses it.
        r = subprocess.run([receivewal, "-D", wal_dir, "-d", url, "--no-loop"], capture_output=True, text=True,
                           timeout=60)
        check(r.returncode != 0 and "no pg_hba.conf entry for replication connection" in r.stderr,
              f"a physical walsender refused by default with 28000 ({r.stderr.strip()})")
        stop_serve(proc)
        proc, url = start_serve(["--origin", direct, "--pool-size", "1", "--replication", "all"])
        procs.append(proc)
        receive = subprocess.Popen([receivewal, "-D", wal_dir, "-d", with_param(url, "application_name", "hp_wal_test"),
                                    "-s", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        procs.append(receive)
        wait_for(lambda: walsenders(direct, "hp_wal_test") == 1, "pg_receivewal's walsender at the origin", 20)
        with psycopg.connect(direct, autocommit=True) as c:
            c.execute("INSERT INTO repl_t VALUES (2, 'two')")
            segment = c.execute("SELECT pg_walfile_name(pg_current_wal_lsn())").fetchone()[0]
            c.execute("SELECT pg_switch_wal()")
        wait_for(lambda: os.path.exists(os.path.join(wal_dir, segment)),
                 f"pg_receivewal's complete segment {segment} (the switch ended it)", 30)
        check(True, "pg_receivewal streamed WAL through serve up to a switched segment")
        receive.send_signal(signal.SIGINT)
        receive.wait(20)
        wait_for(lambda: walsenders(direct, "hp_wal_test") == 0, "pg_receivewal's walsender gone", 20)

        # 4. postgres.js sql.subscribe.
        node = subprocess.run(["node", os.path.join(HERE, "..", "drivers", "subscribe_postgresjs.mjs"), url],
                              capture_output=True, text=True, timeout=90)
        check(node.returncode == 0, f"postgres.js subscribe through serve ({node.stdout.strip()} "
                                    f"{node.stderr.strip()[-500:]})")
        stop_serve(proc)

        # 5. A role without REPLICATION: the origin's refusal, as it gave it.
        parts = urllib.parse.urlsplit(direct)
        scram = urllib.parse.urlunsplit(parts._replace(netloc="{}:{}@{}:{}".format(
            env["SCRAM_USER"], urllib.parse.quote(env["SCRAM_PASSWORD"], safe=""), parts.hostname, parts.port)))
        direct_refusal = psql(pgbin, with_param(scram, "replication", "database"), "IDENTIFY_SYSTEM")
        proc, url = start_serve(["--origin", scram, "--pool-size", "1"])
        procs.append(proc)
        r = psql(pgbin, with_param(url, "replication", "database"), "IDENTIFY_SYSTEM")
        check(direct_refusal.returncode != 0 and "replication role" in direct_refusal.stderr,
              f"directly: refused ({direct_refusal.stderr.strip()})")
        check(r.returncode != 0 and "must be superuser or replication role" in r.stderr,
              f"through serve: the origin's FATAL ({r.stderr.strip()})")
        with psycopg.connect(url, autocommit=True) as c:
            check(c.execute("SELECT 41 + 1").fetchone()[0] == 42, "ordinary sessions of that serve go on")
    finally:
        for p in procs:
            if p.poll() is None:
                stop_serve(p)
        stop_cluster(base)
        shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
    print("PASS")
