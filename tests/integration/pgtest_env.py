"""The test cluster as the Python integration tests see it: the KEY=VALUE
lines of $HYPERPOOL_TEST_PG_ENV (tests/support/pgcluster.sh writes them)."""
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse

# Where a test sends the stderr of the `hyperpool serve` it starts; fail()
# prints its tail.
ERR = tempfile.TemporaryFile()


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
    ERR.seek(0)
    sys.exit("FAIL: " + msg + "\n--- serve stderr:\n" + ERR.read().decode()[-4000:])


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
