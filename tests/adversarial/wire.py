"""PostgreSQL v3 wire helpers for raw-socket tests (standard library only).

Frame builders, a blocking connection that reads whole backend messages,
a SCRAM-SHA-256 client, and helpers to start `hyperpool serve` against the
ctest PostgreSQL fixture (HYPERPOOL_TEST_PG_ENV, HYPERPOOL_BINARY).

    with wire.Serve(["--user", "app", "--database", "appdb"]) as serve:
        conn = wire.Conn(serve.host, serve.port)
        conn.login(serve.user, serve.password, serve.database)
        conn.send(wire.query("SELECT 1"))
        msgs = conn.read_until("Z")
"""

import base64
import hashlib
import hmac
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse

PROTOCOL_30 = 196608
SSL_REQUEST_CODE = 80877103


class Fail(Exception):
    """A test expectation did not hold."""


def check(cond, what):
    if not cond:
        raise Fail(what)


# ---- frames ----

def frame(tag, payload=b""):
    """A tagged message: Byte1 tag + Int32 length + payload."""
    if isinstance(tag, str):
        tag = tag.encode()
    return tag + struct.pack("!I", len(payload) + 4) + payload


def startup(params, version=PROTOCOL_30):
    """A StartupMessage with `params` (dict or list of pairs)."""
    items = params.items() if isinstance(params, dict) else params
    body = struct.pack("!I", version)
    for k, v in items:
        body += k.encode() + b"\0" + v.encode() + b"\0"
    body += b"\0"
    return struct.pack("!I", len(body) + 4) + body


def ssl_request():
    return struct.pack("!II", 8, SSL_REQUEST_CODE)


def query(sql):
    return frame("Q", sql.encode() + b"\0")


def parse(name, sql):
    """A Parse of `sql` as statement `name`, no parameter types."""
    return frame("P", name.encode() + b"\0" + sql.encode() + b"\0" + struct.pack("!h", 0))


def bind(statement):
    """A Bind of `statement` to the unnamed portal: no parameters, text results."""
    return frame("B", b"\0" + statement.encode() + b"\0" + struct.pack("!hhh", 0, 0, 0))


def describe_portal():
    return frame("D", b"P\0")


def execute():
    return frame("E", b"\0" + struct.pack("!i", 0))


def sync():
    return frame("S")


def terminate():
    return frame("X")


def sasl_initial(mechanism, data):
    return frame("p", mechanism.encode() + b"\0" + struct.pack("!i", len(data)) + data)


def sasl_response(data):
    return frame("p", data)


def error_fields(payload):
    """ErrorResponse/NoticeResponse payload -> {field code: value}."""
    fields = {}
    for part in payload.split(b"\0"):
        if part:
            fields[chr(part[0])] = part[1:].decode(errors="replace")
    return fields


# ---- SCRAM-SHA-256 (RFC 5802 / 7677, as PostgreSQL uses it) ----

class ScramClient:
    def __init__(self, password):
        self.password = password.encode()
        self.nonce = base64.b64encode(os.urandom(18)).decode()
        self.first_bare = "n=,r=" + self.nonce
        self.server_signature = None

    def client_first(self):
        return ("n,," + self.first_bare).encode()

    def client_final(self, server_first):
        attrs = dict(kv.split("=", 1) for kv in server_first.decode().split(","))
        check(attrs["r"].startswith(self.nonce), "server nonce does not extend ours")
        salted = hashlib.pbkdf2_hmac("sha256", self.password, base64.b64decode(attrs["s"]), int(attrs["i"]))
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        stored_key = hashlib.sha256(client_key).digest()
        without_proof = "c=biws,r=" + attrs["r"]
        auth_message = ",".join([self.first_bare, server_first.decode(), without_proof]).encode()
        signature = hmac.digest(stored_key, auth_message, "sha256")
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_key = hmac.digest(salted, b"Server Key", "sha256")
        self.server_signature = hmac.digest(server_key, auth_message, "sha256")
        return (without_proof + ",p=" + base64.b64encode(proof).decode()).encode()


# ---- a blocking connection ----

class Conn:
    """A raw TCP connection to a PostgreSQL-speaking server."""

    def __init__(self, host, port, timeout=10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, data):
        self.sock.sendall(data)

    recv_size = 65536  # bytes asked of each recv (a subclass may read slower)

    def _fill(self):
        try:
            chunk = self.sock.recv(self.recv_size)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return False
        self.buf += chunk
        return True

    def read_exact(self, n):
        """n bytes, or None on EOF (socket.timeout propagates)."""
        while len(self.buf) < n:
            if not self._fill():
                return None
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_msg(self):
        """(tag, payload) or None on EOF."""
        head = self.read_exact(5)
        if head is None:
            return None
        (length,) = struct.unpack("!I", head[1:5])
        body = self.read_exact(length - 4)
        if body is None:
            return None
        return chr(head[0]), body

    def read_until(self, tags):
        """Messages up to and including the first whose tag is in `tags`
        (EOF ends the list early)."""
        out = []
        while True:
            m = self.read_msg()
            if m is None:
                return out
            out.append(m)
            if m[0] in tags:
                return out

    def closed_within(self, seconds):
        """True if the peer closes (EOF or reset) within `seconds`, discarding data."""
        deadline = time.monotonic() + seconds
        self.sock.settimeout(0.2)
        try:
            while time.monotonic() < deadline:
                try:
                    chunk = self.sock.recv(65536)
                except socket.timeout:
                    continue
                except ConnectionResetError:
                    return True
                if not chunk:
                    return True
            return False
        finally:
            self.sock.settimeout(10.0)

    def scram(self, password):
        """After a StartupMessage: runs SCRAM. Returns the list of raw
        authentication-phase messages (tag, payload) up to AuthenticationOk
        or the first ErrorResponse."""
        got = []
        m = self.read_msg()
        while m is not None and m[0] == "v":  # NegotiateProtocolVersion
            got.append(m)
            m = self.read_msg()
        if m is None:
            return got
        got.append(m)
        if m[0] != "R" or struct.unpack("!I", m[1][:4])[0] != 10:
            return got
        client = ScramClient(password)
        self.send(sasl_initial("SCRAM-SHA-256", client.client_first()))
        m = self.read_msg()
        if m is None:
            return got
        got.append(m)
        if m[0] != "R":
            return got
        self.send(sasl_response(client.client_final(m[1][4:])))
        while True:
            m = self.read_msg()
            if m is None:
                return got
            got.append(m)
            if m[0] == "E" or (m[0] == "R" and struct.unpack("!I", m[1][:4])[0] == 0):
                return got

    def login(self, user, password, database, extra=None):
        """Startup + SCRAM + everything up to ReadyForQuery; fails otherwise."""
        params = {"user": user, "database": database}
        params.update(extra or {})
        self.send(startup(params))
        auth = self.scram(password)
        check(auth and auth[-1][0] == "R", "login failed: %r" % (auth[-1:],))
        rest = self.read_until("ZE")
        check(rest and rest[-1][0] == "Z", "no ReadyForQuery after login: %r" % (rest[-1:],))
        return rest


# ---- the ctest PostgreSQL fixture and `hyperpool serve` ----

def pg_env():
    path = os.environ.get("HYPERPOOL_TEST_PG_ENV")
    check(path and os.path.exists(path), "HYPERPOOL_TEST_PG_ENV must name the fixture's env file")
    env = {}
    with open(path) as f:
        for line in f:
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                env[k] = v
    return env


def origin_url(env):
    return "postgresql://%s:%s@%s:%s/%s?sslmode=disable" % (
        env["ADMIN_USER"], urllib.parse.quote(env["ADMIN_PASSWORD"], safe=""),
        env["PGHOST"], env["PGPORT"], env["PGDATABASE"])


def wait_until(pred, seconds, step=0.05):
    """Polls `pred` until it returns a truthy value or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            return v
        time.sleep(step)


async def second_read_cached(url, sql, key, evaluations, seconds):
    """Until a fresh asyncpg connection's second fetchrow(sql, key) leaves
    `evaluations()` (a counter the query bumps at the origin) unchanged,
    i.e. is answered from the cache: the catalog snapshot loads on first
    use (a statement asyncpg prepared before counts as a possible write for
    its connection's life), and a connection's first Bind comes with
    asyncpg's named Parse, which the origin must see. False after
    `seconds`."""
    import asyncio
    import asyncpg
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        conn = await asyncpg.connect(url)
        try:
            await conn.fetchrow(sql, key)
            before = evaluations()
            await conn.fetchrow(sql, key)
            if evaluations() == before:
                return True
        finally:
            await conn.close()
        await asyncio.sleep(0.1)
    return False


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise Fail("no VmRSS for pid %d" % pid)


class Serve:
    """`hyperpool serve` against the fixture, as a context manager. Exposes
    host, port, user, password, database, proc and stderr_text()."""

    def __init__(self, args=(), user="app", database="appdb", password="s3cret-pw"):
        self.args = list(args)
        self.user, self.database, self.password = user, database, password

    def __enter__(self):
        binary = os.environ.get("HYPERPOOL_BINARY")
        check(binary and os.path.exists(binary), "HYPERPOOL_BINARY must name the hyperpool binary")
        env = pg_env()
        # Opened for appending: stderr_text() seeks this file, whose offset
        # serve shares, while serve writes to it.
        fd, path = tempfile.mkstemp(prefix="hp-wire-err-")
        self.err = open(path, "a+b")
        os.close(fd)
        os.unlink(path)
        cmd = [binary, "serve", "--origin", origin_url(env), "--user", self.user, "--database", self.database,
               "--password", self.password] + self.args
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.err)
        line = self.proc.stdout.readline().decode().strip()
        check(line.startswith("postgresql://"), "serve printed %r; stderr: %s" % (line, self.stderr_text()))
        url = urllib.parse.urlparse(line)
        self.host, self.port = url.hostname, url.port
        return self

    def stderr_text(self):
        fd = self.err.fileno()  # pread: serve's writes move the shared offset
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.err.close()
        return False


def run(tests):
    """Runs test functions, prints each result; exit status 1 if any failed."""
    failed = 0
    for t in tests:
        start = time.monotonic()
        try:
            t()
            print("ok   %s (%.1f s)" % (t.__name__, time.monotonic() - start))
        except Exception as e:  # noqa: BLE001 - report every kind of failure
            failed += 1
            print("FAIL %s: %s: %s" % (t.__name__, type(e).__name__, e))
    sys.stdout.flush()
    sys.exit(1 if failed else 0)
