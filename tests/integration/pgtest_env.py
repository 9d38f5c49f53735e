"""The test cluster as the Python integration tests see it: the KEY=VALUE
lines of $HYPERPOOL_TEST_PG_ENV (tests/support/pgcluster.sh writes them)."""
import os
import subprocess
import sys
import tempfile
import re
import time
import urllib.parse
import urllib.request

# Where a test sends the stderr of the `hyperpool serve` it starts; fail()
# prints its tail. The serves share the file's offset with this process:
# with seek(0)-then-read, a line a serve wrote in between either landed over
# the first lines or moved the offset past what was to be read (a serve's
# "metrics on" line was lost both ways). So: O_APPEND, and pread.
def append_tempfile():
    """An anonymous temporary file opened for appending (O_APPEND), for a
    child's stderr that this process reads back (read_whole) while the child
    runs."""
    fd, path = tempfile.mkstemp(prefix="hp-serve-err-")
    f = open(path, "a+b")
    os.close(fd)
    os.unlink(path)
    return f


def read_whole(f):
    """Everything in f, read without its file offset: a child writing to the
    same open file moves that offset, so seek-then-read can miss lines."""
    fd = f.fileno()
    return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")


ERR = append_tempfile()
PGCLUSTER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support", "pgcluster.sh")


def err_text():
    """Everything the serves of this test wrote to ERR so far."""
    return read_whole(ERR)


def fetch_metrics(url):
    """The samples of a /metrics page (url: http://host:port) as {name{labels}: value}."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and " " in line:
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def metric(url, name):
    """One sample of a /metrics page (url: http://host:port), -1 when absent."""
    return fetch_metrics(url).get(name, -1)


def serve_metrics(index=0):
    """The /metrics of the index-th serve that logged its metrics listener to ERR."""
    return fetch_metrics(re.findall(r"metrics on (http://[0-9.:]+)/metrics", err_text())[index])


def metrics_url_since(start, deadline_s=20):
    """The /metrics address the serve started after err_text()[:start] logged."""
    wait_for(lambda: "metrics on http" in err_text()[start:], "the metrics address", deadline_s)
    return re.findall(r"metrics on (http://[0-9.:]+)/metrics", err_text()[start:])[0]


def run_serve_with_metrics(args, main):
    """`serve ARGS --metrics-listen 127.0.0.1:0`; runs asyncio `main(url,
    metrics_url)`, stops the serve even when it fails, then prints PASS."""
    import asyncio
    start = len(err_text())
    proc, url = start_serve(list(args) + ["--metrics-listen", "127.0.0.1:0"])
    try:
        asyncio.run(main(url, metrics_url_since(start)))
    finally:
        stop_serve(proc)
    print("PASS")


def start_serve(args):
    """`hyperpool serve ARGS` (HYPERPOOL_BINARY), its stderr to ERR; returns
    (process, the connection string it printed). stop_serve(process) ends it."""
    proc = subprocess.Popen([os.environ["HYPERPOOL_BINARY"], "serve"] + list(args), stdout=subprocess.PIPE,
                            stderr=ERR, text=True)
    url = proc.stdout.readline().strip()
    if not url.startswith("postgresql://"):
        stop_serve(proc)
        fail("no connection string from serve " + " ".join(args))
    return proc, url


def stop_serve(proc, timeout_s=10):
    """SIGTERM, then SIGKILL after timeout_s."""
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout_s)


def start_cluster(base, extra_conf=""):
    """A PostgreSQL of the test's own in `base` (pgcluster.sh, postgresql.conf
    lines `extra_conf` added); returns its env dict and the admin's
    plaintext URL. stop_cluster(base) stops it."""
    subprocess.run(["bash", PGCLUSTER, "start", base], check=True, stdout=subprocess.DEVNULL, timeout=120,
                   env=dict(os.environ, PGCLUSTER_EXTRA_CONF=extra_conf))
    env = read_env(os.path.join(base, "env"))
    url = "postgresql://{}:{}@{}:{}/{}?sslmode=disable".format(
        env["ADMIN_USER"], urllib.parse.quote(env["ADMIN_PASSWORD"], safe=""), env["PGHOST"], env["PGPORT"],
        env["PGDATABASE"])
    return env, url


def stop_cluster(base):
    subprocess.run(["bash", PGCLUSTER, "stop", base], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=120)


def env_get(name):
    with open(os.environ["HYPERPOOL_TEST_PG_ENV"]) as f:
        for line in f:
            if line.startswith(name + "="):
                return line.rstrip("\n").split("=", 1)[1]
    raise KeyError(name)


def origin_url():
    """The cluster as its admin role, plaintext."""
    return "postgresql://{}:{}@{}:{}/{}?sslmode=disable".format(
        env_get("ADMIN_USER"), urllib.parse.quote(env_get("ADMIN_PASSWORD"), safe=""),
        env_get("PGHOST"), env_get("PGPORT"), env_get("PGDATABASE"))


def fail(msg):
    sys.exit("FAIL: " + msg + "\n--- serve stderr:\n" + err_text()[-12000:])


def _print_serve_stderr_on_error(kind, value, tb):
    """An uncaught exception (a serve gone, say) shows what the serves logged,
    as fail() does."""
    sys.__excepthook__(kind, value, tb)
    tail = err_text()[-4000:]
    if tail:
        sys.stderr.write("--- serve stderr:\n" + tail)


sys.excepthook = _print_serve_stderr_on_error


def check(cond, msg):
    if not cond:
        fail(msg)
    print("ok  ", msg)


def read_env(path):
    """The KEY=VALUE lines of a cluster's env file (pgcluster.sh) as a dict."""
    env = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition("=")
            env[k] = v
    return env


def as_pg(args):
    """pg_ctl refuses to run as root: run it as the postgres OS user then."""
    if os.getuid() == 0:
        args = ["runuser", "-u", "postgres", "--"] + args
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)


def wait_for(cond, what, deadline_s):
    """Polls cond() every 20 ms until it is true; fail() after deadline_s."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    fail(f"timed out after {deadline_s} s waiting for: {what}")
