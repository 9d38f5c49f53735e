#!/usr/bin/python3
"""Quiet sessions (issue 26: an idle client holds nothing but its bytes): a
Client session idle past the idle sweep gives up its own readability wait
and its socket is watched by its worker's QuietWatch (docs/architecture.md,
"What an idle session holds"). Through `hyperpool serve` with its defaults
(cache on), a pool of 2:

- 30 clients (asyncpg), some answered by the Client's tier, some by the
  origin, one holding a SET, one a prepared statement, one LISTENing, go
  quiet (hyperpool_client_quiet_parks_total counts every one: before this,
  no session ever did, so this fails there);
- a NOTIFY reaches the quiet listener; every quiet session answers its next
  query (woken: hyperpool_client_quiet_wakes_total), the SET and the
  prepared statement kept, and each goes quiet again;
- 8 quiet clients that vanish (their sockets closed, no Terminate) end
  their sessions (hyperpool_client_connections drops by 8);
- a quiet session whose origin pid was shown ends at pg_terminate_backend
  of that pid, as directly;
- with --client-idle-timeout 1, a quiet session gets FATAL 57P05 and is
  closed;
- serve stops at SIGTERM with quiet sessions held, and logs no error.

Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
"""
import asyncio
import os
import socket
import subprocess

import asyncpg
import psycopg

from pgtest_env import check, err_text, fail, metric, metrics_url_since, origin_url, start_serve, wait_for

N = 30


def parks(murl):
    return metric(murl, "hyperpool_client_quiet_parks_total")


def wakes(murl):
    return metric(murl, "hyperpool_client_quiet_wakes_total")


def quiet(murl):
    return metric(murl, "hyperpool_client_quiet_sessions")


def connections(murl):
    return metric(murl, "hyperpool_client_connections")


async def connect(url, **kw):
    kw.setdefault("statement_cache_size", 0)
    return await asyncpg.connect(dsn=url, ssl=False, timeout=30, **kw)


async def wait(cond, what, deadline_s=20):
    await asyncio.to_thread(wait_for, cond, what, deadline_s)


async def main(url, murl):
    base = parks(murl)
    check(base >= 0 and quiet(murl) >= 0, f"the quiet-session counters are exported (parks {base})")
    conns = [await connect(url) for _ in range(N)]
    for i, c in enumerate(conns):
        # Half answered by the origin, half by the Client's tier after the first.
        await c.execute("SELECT now()" if i % 2 else "SELECT 1")
    setter = await connect(url)
    await setter.execute("SET work_mem = '7MB'")
    prepared = await connect(url, statement_cache_size=100)
    await prepared.fetchval("SELECT $1::int + 1", 1)
    listener = await connect(url)
    heard = asyncio.Queue()
    await listener.add_listener("quiet_ch", lambda *args: heard.put_nowait(args[3]))
    pid_shown = await connect(url)
    victim_pid = await pid_shown.fetchval("SELECT pg_backend_pid()")
    caller = await connect(url)
    await caller.execute("SELECT now()")
    everyone = conns + [setter, prepared, listener, pid_shown, caller]
    await wait(lambda: quiet(murl) == len(everyone), f"all {len(everyone)} sessions quiet")
    check(True, f"{len(everyone)} idle sessions went quiet (parks {parks(murl) - base})")

    # A notification for a quiet listener: the link writes to its app.
    other = await asyncpg.connect(dsn=origin_url(), ssl=False)
    await other.execute("NOTIFY quiet_ch, 'while quiet'")
    got = await asyncio.wait_for(heard.get(), 10)
    check(got == "while quiet", f"a quiet listener hears a NOTIFY ({got!r})")

    woke_before = wakes(murl)
    for i, c in enumerate(conns):
        if await c.fetchval("SELECT $1::int", i) != i:
            fail(f"client {i}: a wrong answer after going quiet")
    check(True, f"{N} quiet sessions answer their next query")
    check(await setter.fetchval("SHOW work_mem") == "7MB", "a quiet session keeps its SET")
    check(await prepared.fetchval("SELECT $1::int + 1", 41) == 42, "a quiet session keeps its prepared statement")
    check(await listener.fetchval("SELECT 5") == 5, "the listener answers after the notification")
    check(wakes(murl) >= woke_before + N + 3, f"the sessions woke from quiet (wakes {wakes(murl) - woke_before})")

    # Quiet again, then 8 apps vanish without a Terminate.
    await wait(lambda: quiet(murl) == len(everyone), "all sessions quiet again")
    before = connections(murl)
    for c in conns[:8]:
        c.terminate()  # (closes the socket, no Terminate message)
    await wait(lambda: connections(murl) <= before - 8, "8 vanished quiet clients' sessions ended")
    check(quiet(murl) == len(everyone) - 8, f"and are no longer watched (quiet {quiet(murl):.0f})")
    check(True, f"8 quiet clients that vanished ended their sessions ({before:.0f} -> {connections(murl):.0f})")

    # A signal aimed at a quiet session's shown pid ends it, as directly.
    ended = await caller.fetchval(f"SELECT pg_terminate_backend({victim_pid}, 5000)")
    check(ended is True, "pg_terminate_backend of the quiet session's shown pid answers t")
    try:
        await asyncio.wait_for(pid_shown.fetchval("SELECT 1"), 10)
        fail("the terminated quiet session still answers")
    except (asyncpg.exceptions.AdminShutdownError, asyncpg.exceptions.ConnectionDoesNotExistError,
            asyncpg.exceptions.InterfaceError, ConnectionError) as e:
        check(True, f"the terminated quiet session ended ({type(e).__name__})")
    await other.close()
    survivors = conns[8:] + [setter, prepared, listener, caller]
    for c in survivors:
        if await c.fetchval("SELECT 3") != 3:
            fail("a session after the others ended")
    check(True, "the other sessions still answer")
    # Quiet again: they are held when serve stops (the caller's SIGTERM).
    await wait(lambda: quiet(murl) == len(survivors), f"the {len(survivors)} survivors quiet again")
    return survivors


def serve(args):
    start = len(err_text())
    proc, url = start_serve(list(args) + ["--metrics-listen", "127.0.0.1:0"])
    return proc, url, metrics_url_since(start), start


def stopped_cleanly(proc, what):
    proc.terminate()
    try:
        code = proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        fail(f"{what}: serve did not stop at SIGTERM within 15 s")
    check(code == 0, f"{what}: serve stopped at SIGTERM (exit {code})")


def idle_timeout_case():
    proc, url, murl, start = serve(["--origin", origin_url(), "--pool-size", "2", "--client-idle-timeout", "1"])
    try:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("SELECT now()")
            wait_for(lambda: parks(murl) >= 1, "the idle session quiet", 20)
            s = socket.socket(fileno=os.dup(c.pgconn.socket))
            # libpq's socket is non-blocking (O_NONBLOCK is shared with the
            # dup): without a timeout here a read before the close arrived
            # raised BlockingIOError instead of waiting for it.
            s.settimeout(15)
            try:
                data = b""
                closed = False
                while len(data) < 65536:
                    chunk = s.recv(65536)
                    if not chunk:
                        closed = True
                        break
                    data += chunk
                check(data[:1] == b"E" and b"57P05" in data, f"a quiet session gets the idle timeout's FATAL ({data[:60]!r})")
                check(closed, "and its socket is closed")
            finally:
                s.detach()
    finally:
        stopped_cleanly(proc, "--client-idle-timeout")


def run():
    proc, url, murl, start = serve(["--origin", origin_url(), "--pool-size", "2"])
    try:
        loop = asyncio.new_event_loop()
        held = loop.run_until_complete(main(url, murl))
        stopped_cleanly(proc, "with quiet sessions held")
        for c in held:
            c.terminate()
        loop.close()
    except BaseException:
        proc.kill()
        raise
    log = err_text()[start:]
    bad = [line for line in log.splitlines() if "level=error" in line or "internal:" in line]
    check(not bad, f"serve logged no error ({bad[:3]})")
    idle_timeout_case()
    print("PASS")


run()
