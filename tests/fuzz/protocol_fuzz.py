#!/usr/bin/python3
"""Differential fuzzer of the PostgreSQL wire protocol: direct vs through hyperpool.

Usage:
  /usr/bin/python3 protocol_fuzz.py --direct-port 45179 --hp-port 46001 \
      --user U --password P --dbname D [--seed 1] [--count 2000] [--label cacheon]
  (defaults for user/password/dbname/direct-port come from $HYPERPOOL_TEST_PG_ENV,
  the env file tests/support/pgcluster.sh writes; findings go to $FUZZ_OUT or ./fuzz-findings)

  --replay FILE.json   run one saved sequence and print both outputs
  --reduce FILE.json   reduce a saved finding to a minimal sequence, write repro script

Each sequence runs on a fresh connection per side; fz_t is reset directly on the
origin before each side's run. hyperpool must be serving with --pool-size 1
for the leak check to mean anything.
"""
import argparse, json, os, random, socket, struct, sys, time, traceback

import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))


def load_env():
    env = {}
    p = os.environ.get("HYPERPOOL_TEST_PG_ENV", os.path.join(HERE, "pg", "env"))
    if os.path.exists(p):
        for line in open(p):
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                env[k] = v
    return env


# ---------------------------------------------------------------- messages
def msg(t, b=b""):
    return t + struct.pack("!i", len(b) + 4) + b


def cstr(s):
    return s.encode() + b"\0"


def m_parse(name, sql, oids=()):
    return msg(b"P", cstr(name) + cstr(sql) + struct.pack("!h", len(oids)) +
               b"".join(struct.pack("!i", o) for o in oids))


def m_bind(portal, stmt, params):
    b = cstr(portal) + cstr(stmt) + struct.pack("!h", 0) + struct.pack("!h", len(params))
    for p in params:
        if p is None:
            b += struct.pack("!i", -1)
        else:
            e = p.encode()
            b += struct.pack("!i", len(e)) + e
    b += struct.pack("!h", 0)
    return msg(b"B", b)


def m_describe(kind, name):
    return msg(b"D", kind.encode() + cstr(name))


def m_execute(portal, maxrows):
    return msg(b"E", cstr(portal) + struct.pack("!i", maxrows))


def m_close(kind, name):
    return msg(b"C", kind.encode() + cstr(name))


def m_query(sql):
    return msg(b"Q", cstr(sql))


def m_fcall(oid):
    return msg(b"F", struct.pack("!ihhh", oid, 0, 0, 0))


TABLE = "fz_t"


def build(item):
    """item: JSON-able list describing a message; returns bytes."""
    if TABLE != "fz_t":
        item = [x.replace("fz_t", TABLE) if isinstance(x, str) else x for x in item]
    k = item[0]
    if k == "Parse":
        return m_parse(item[1], item[2], item[3])
    if k == "Bind":
        return m_bind(item[1], item[2], item[3])
    if k == "Describe":
        return m_describe(item[1], item[2])
    if k == "Execute":
        return m_execute(item[1], item[2])
    if k == "Close":
        return m_close(item[1], item[2])
    if k == "Flush":
        return msg(b"H")
    if k == "Sync":
        return msg(b"S")
    if k == "Query":
        return m_query(item[1])
    if k == "FunctionCall":
        return m_fcall(item[1])
    raise ValueError(k)


# ---------------------------------------------------------------- grammar
PARSE_SQL = [
    ("select 1", 0),
    ("select $1::int + 1", 1),
    ("select $1::text as t", 1),
    ("select $1 as u", 1),
    ("select x from fz_t where id = $1", 1),
    ("select id, x from fz_t order by id", 0),
    ("select count(*) from fz_t", 0),
    ("select id from fz_t order by id", 0),
    ("select x from fz_t where id = $1 and x > $2", 2),
    ("update fz_t set x = x + 1 where id = $1", 1),
    ("update fz_t set x = x + 1 where id = $1 returning x", 1),
    ("insert into fz_t values ($1, 0) on conflict do nothing", 1),
    ("selec 1", 0),
    ("select * from fz_nosuch", 0),
    ("select 1/0", 0),
    ("select 1/$1::int", 1),
    ("begin", 0),
    ("commit", 0),
    ("rollback", 0),
    ("set work_mem = '7MB'", 0),
    ("show work_mem", 0),
    ("select pg_sleep(0)", 0),
    ("select current_setting('work_mem')", 0),
    ("savepoint sp", 0),
    ("rollback to savepoint sp", 0),
    ("select generate_series(1, 3) as g", 0),
]

QUERY_SQL = [
    "select 1", "select 1; select 2", "select x from fz_t where id = 2",
    "select id, x from fz_t order by id", "select count(*) from fz_t",
    "update fz_t set x = x + 1 where id = 2", "update fz_t set x = x + 1 where id = 3 returning x",
    "insert into fz_t values (6, 0) on conflict do nothing",
    "begin", "commit", "rollback", "begin; update fz_t set x = x + 1 where id = 1; select x from fz_t where id = 1",
    "begin; select 1/0; commit", "select 1; selec 2", "selec 1", "select * from fz_nosuch", "select 1/0",
    "set work_mem = '7MB'", "show work_mem", "set work_mem = '7MB'; show work_mem", "reset work_mem",
    "set local work_mem = '9MB'; show work_mem",
    "deallocate s1", "deallocate s2", "deallocate all",
    "prepare q1 as select 1", "execute q1", "deallocate q1",
    "prepare q2(int) as select 1"  # "... select x from fz_t ...": PG 15.20 backend crash, see pgcrash.py
   , "execute q2(2)",
    "select pg_sleep(0)", "savepoint sp", "rollback to savepoint sp", "release savepoint sp",
    "select x from fz_t where id = 1; update fz_t set x = x + 1 where id = 1; select x from fz_t where id = 1",
    "commit; select 1", "select generate_series(1, 3) as g",
]

STMT_NAMES = ["", "s1", "s2", "s3"]
PORTALS = ["", "p1"]
PARAM_VALUES = ["1", "2", "3", "0", "5", "7", "abc", None]


def gen_sequence(rng):
    items = []
    n = rng.randint(1, 14)
    for _ in range(n):
        r = rng.random()
        if r < 0.17:
            sql, np = rng.choice(PARSE_SQL)
            oids = []
            if np and rng.random() < 0.3:
                oids = [rng.choice([23, 25, 0]) for _ in range(np)]
            items.append(["Parse", rng.choice(STMT_NAMES), sql, oids])
        elif r < 0.33:
            # Usually the param count of some SQL from the pool, sometimes wrong
            np = rng.choice([0, 1, 1, 1, 2])
            items.append(["Bind", rng.choice(PORTALS), rng.choice(STMT_NAMES),
                          [rng.choice(PARAM_VALUES) for _ in range(np)]])
        elif r < 0.41:
            if rng.random() < 0.5:
                items.append(["Describe", "S", rng.choice(STMT_NAMES)])
            else:
                items.append(["Describe", "P", rng.choice(PORTALS)])
        elif r < 0.55:
            items.append(["Execute", rng.choice(PORTALS), rng.choice([0, 0, 1])])
        elif r < 0.60:
            if rng.random() < 0.6:
                items.append(["Close", "S", rng.choice(STMT_NAMES)])
            else:
                items.append(["Close", "P", rng.choice(PORTALS)])
        elif r < 0.64:
            items.append(["Flush"])
        elif r < 0.76:
            items.append(["Sync"])
        elif r < 0.97:
            items.append(["Query", rng.choice(QUERY_SQL)])
        else:
            items.append(["FunctionCall", 89])
        # common idiom: Parse/Bind/Execute chains
        if items[-1][0] == "Parse" and rng.random() < 0.5:
            name = items[-1][1]
            sql = items[-1][2]
            np = sql.count("$1") + sql.count("$2")
            portal = rng.choice(PORTALS)
            items.append(["Bind", portal, name,
                          [rng.choice(PARAM_VALUES[:6]) for _ in range(np)]])
            if rng.random() < 0.3:
                items.append(["Describe", "P", portal])
            items.append(["Execute", portal, rng.choice([0, 0, 1])])
            if rng.random() < 0.6:
                items.append(["Sync"])
        if rng.random() < 0.2:
            items.append(["SEND"])  # chunk boundary
    return items


# ---------------------------------------------------------------- running
RESET_SQL = """
with d as (delete from fz_t where id not between 1 and 5 returning 1),
u as (update fz_t set x = id * 10 where id between 1 and 5 and x is distinct from id * 10 returning 1),
i as (insert into fz_t select g, g * 10 from generate_series(1, 5) g on conflict (id) do nothing returning 1)
select (select count(*) from d) + (select count(*) from u) + (select count(*) from i)
"""


class Runner:
    def __init__(self, args):
        self.a = args
        self.admin = None

    def dsn(self, port):
        return (f"host=127.0.0.1 port={port} user={self.a.user} password={self.a.password} "
                f"dbname={self.a.dbname} sslmode=disable connect_timeout=10")

    def setup(self):
        self.admin = psycopg.connect(self.dsn(self.a.direct_port), autocommit=True)
        self.admin.execute(f"create table if not exists {TABLE} (id int primary key, x int)")
        self.reset()

    def reset(self):
        for _ in range(40):
            try:
                return self.admin.execute(RESET_SQL.replace("fz_t", TABLE)).fetchone()[0]
            except psycopg.OperationalError:
                print("reset: origin connection lost (origin crash?), reconnecting", flush=True)
                time.sleep(0.5)
                try:
                    self.admin = psycopg.connect(self.dsn(self.a.direct_port), autocommit=True)
                except psycopg.OperationalError:
                    pass
        return self.admin.execute(RESET_SQL.replace("fz_t", TABLE)).fetchone()[0]


def recv_exact(s, n, buf):
    while len(buf) < n:
        d = s.recv(65536)
        if not d:
            raise EOFError("connection closed")
        buf += d
    return buf


def read_msgs_until(s, pred, timeout=10.0):
    """Read backend messages until pred(list) is true. Returns (msgs, status)."""
    s.settimeout(timeout)
    buf = bytearray()
    out = []
    deadline = time.time() + timeout
    try:
        while True:
            while True:
                if len(buf) >= 5:
                    ln = struct.unpack("!i", buf[1:5])[0]
                    if len(buf) >= ln + 1:
                        out.append((bytes(buf[0:1]), bytes(buf[5:ln + 1])))
                        del buf[:ln + 1]
                        if pred(out):
                            return out, "ok"
                        continue
                break
            if time.time() > deadline:
                return out, "timeout"
            s.settimeout(max(0.05, deadline - time.time()))
            d = s.recv(65536)
            if not d:
                return out, "eof"
            buf += d
    except socket.timeout:
        return out, "timeout"
    except (ConnectionResetError, BrokenPipeError, OSError) as e:
        return out, "error:" + type(e).__name__


def fields(body):
    f = {}
    for part in body.split(b"\0"):
        if part:
            f[chr(part[0])] = part[1:].decode(errors="replace")
    return f


def norm(t, body):
    """Returns (strict, soft) normalised strings, or None to ignore."""
    t = t.decode()
    if t in ("N", "S", "K", "A"):
        return None
    if t == "E":
        f = fields(body)
        return "E:" + f.get("C", "?"), "E:" + f.get("C", "?") + ":" + f.get("M", "")
    if t == "C":
        v = "C:" + body.rstrip(b"\0").decode(errors="replace")
        return v, v
    if t == "D":
        n = struct.unpack("!h", body[:2])[0]
        p = 2
        vals = []
        for _ in range(n):
            ln = struct.unpack("!i", body[p:p + 4])[0]
            p += 4
            if ln < 0:
                vals.append(None)
            else:
                vals.append(body[p:p + ln].decode(errors="replace"))
                p += ln
        v = "D:" + json.dumps(vals)
        return v, v
    if t == "T":
        n = struct.unpack("!h", body[:2])[0]
        p = 2
        cols = []
        for _ in range(n):
            e = body.index(b"\0", p)
            name = body[p:e].decode(errors="replace")
            p = e + 1
            _tab, _att, typ, _sz, _mod, fmt = struct.unpack("!ihihih", body[p:p + 18])
            p += 18
            cols.append(f"{name}/{typ}/{fmt}")
        v = "T:" + ",".join(cols)
        return v, v
    if t == "t":
        n = struct.unpack("!h", body[:2])[0]
        oids = struct.unpack("!%di" % n, body[2:2 + 4 * n])
        v = "t:" + ",".join(map(str, oids))
        return v, v
    if t == "Z":
        v = "Z:" + body.decode()
        return v, v
    if t == "V":
        return "V", "V"
    return t, t


def run_side(runner, port, items, n, is_hp, checker=None):
    """Run one sequence on a fresh connection. Returns dict."""
    res = {"strict": [], "soft": [], "status": None, "after": None, "leak": None, "err": None}
    try:
        c = psycopg.connect(runner.dsn(port), autocommit=True)
    except Exception as e:
        res["err"] = "connect: " + str(e).strip()[:200]
        return res
    s = socket.socket(fileno=os.dup(c.pgconn.socket))
    s.settimeout(10)
    try:
        chunks = [[]]
        for it in items:
            if it[0] == "SEND":
                chunks.append([])
            elif it[0] == "ROUNDTRIP":
                chunks[-1].append(m_query(""))
                chunks.append("WAIT")
                chunks.append([])
            else:
                chunks[-1].append(build(it))
        chunks[-1] += [msg(b"S"), m_query(f"select 'end-{n}'"), m_query("")]

        def done(out):
            return len(out) >= 2 and out[-1][0] == b"Z" and out[-2][0] == b"I"
        out = []
        st = "ok"
        for i, ch in enumerate(chunks):
            if ch == "WAIT":
                o, st = read_msgs_until(s, done, 10.0)
                out += o
                if st != "ok":
                    break
                continue
            if ch:
                s.sendall(b"".join(ch))
            if i + 1 < len(chunks) and chunks[i + 1] != "WAIT":
                time.sleep(0.002)
        if st == "ok":
            o, st = read_msgs_until(s, done, 10.0)
            out += o
        res["status"] = st
        for t, b in out:
            r = norm(t, b)
            if r:
                res["strict"].append(r[0])
                res["soft"].append(r[1])
        last_z = None
        for t, b in out:
            if t == b"Z":
                last_z = b.decode()
        res["lastz"] = last_z
        if st != "ok":
            return res
        # leak check (hyperpool only): connection idle, another client must get a backend
        if is_hp and checker is not None and last_z == "I":
            res["leak"] = checker.check()
        # the fuzzed connection must still answer select 42
        s.sendall(m_query("select 42"))
        out2, st2 = read_msgs_until(s, lambda o: o and o[-1][0] == b"Z", 10.0)
        res["after"] = [x[0] for x in (norm(t, b) for t, b in out2) if x] + ([] if st2 == "ok" else [st2])
        try:
            s.sendall(msg(b"X"))
        except OSError:
            pass
    except Exception as e:
        res["err"] = "exc: " + repr(e)[:300]
    finally:
        try:
            s.close()
        except OSError:
            pass
        try:
            c.close()
        except Exception:
            pass
    return res


class Checker:
    """A second client through hyperpool; must run select 1 within 5 s."""

    def __init__(self, runner, port):
        self.runner, self.port = runner, port
        self.c = self.s = None

    def connect(self):
        self.close()
        self.c = psycopg.connect(self.runner.dsn(self.port), autocommit=True)
        self.s = socket.socket(fileno=os.dup(self.c.pgconn.socket))

    def close(self):
        for x in (self.s, self.c):
            try:
                if x is not None:
                    x.close()
            except Exception:
                pass
        self.c = self.s = None

    def check(self):
        t0 = time.time()
        try:
            if self.s is None:
                self.connect()
            self.s.sendall(m_query("select 1"))
            out, st = read_msgs_until(self.s, lambda o: o and o[-1][0] == b"Z", 5.0)
        except Exception as e:
            self.close()
            return "checker error: " + repr(e)[:200]
        if st != "ok":
            self.close()
            return f"LEAK: second client got no answer to select 1 within 5 s ({st})"
        strict = [x[0] for x in (norm(t, b) for t, b in out) if x]
        if strict != ["T:?column?/23/0", 'D:["1"]', "C:SELECT 1", "Z:I"]:
            self.close()
            return "checker got " + repr(strict)
        return None


def compare(d, h):
    """Return list of difference descriptions (empty = same)."""
    diffs = []
    if d["err"] or h["err"]:
        if d["err"] != h["err"]:
            diffs.append(f"error: direct={d['err']} hp={h['err']}")
    if d["status"] != h["status"]:
        diffs.append(f"read status: direct={d['status']} hp={h['status']}")
    if d["strict"] != h["strict"]:
        diffs.append("messages differ")
    if d["after"] != h["after"]:
        diffs.append(f"select 42 after: direct={d['after']} hp={h['after']}")
    if h.get("leak"):
        diffs.append(h["leak"])
    return diffs


def soft_compare(d, h):
    return d["strict"] == h["strict"] and d["soft"] != h["soft"]


def run_pair(runner, items, n, checker, settle):
    dirty = runner.reset()
    d = run_side(runner, runner.a.direct_port, items, n, False)
    dirty = runner.reset() or dirty or any(
        it[0] in ("Parse", "Query") and ("update" in it[-2 if it[0] == "Parse" else 1] or
                                         "insert" in it[-2 if it[0] == "Parse" else 1])
        for it in items)
    if dirty and settle:
        time.sleep(settle)  # let hyperpool's WAL feed see the external reset
    h = run_side(runner, runner.a.hp_port, items, n, True, checker)
    return d, h


def show(items):
    return "\n".join("  " + json.dumps(it) for it in items)


def side_by_side(d, h):
    a, b = d["soft"], h["soft"]
    lines = []
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else "-"
        y = b[i] if i < len(b) else "-"
        mark = "   " if (d["strict"][i:i + 1] == h["strict"][i:i + 1]) else "!! "
        lines.append(f"{mark}{x[:70]:<72} | {y[:70]}")
    lines.append(f"   status: {d['status']} | {h['status']}   after: {d['after']} | {h['after']}")
    if h.get("leak"):
        lines.append("   " + h["leak"])
    if d["err"] or h["err"]:
        lines.append(f"   err: {d['err']} | {h['err']}")
    return "\n".join(lines)


def main():
    env = load_env()
    ap = argparse.ArgumentParser()
    ap.add_argument("--direct-port", type=int, default=int(env.get("PGPORT", 5432)))
    ap.add_argument("--hp-port", type=int, required=True)
    ap.add_argument("--user", default=env.get("ADMIN_USER"))
    ap.add_argument("--password", default=env.get("ADMIN_PASSWORD"))
    ap.add_argument("--dbname", default=env.get("PGDATABASE", "hp_test"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--label", default="run")
    ap.add_argument("--settle", type=float, default=0.2,
                    help="sleep after an external write before the hyperpool run (WAL feed lag)")
    ap.add_argument("--max-time", type=float, default=0, help="stop after this many seconds")
    ap.add_argument("--roundtrip", action="store_true",
                    help="wait for the answers after every Sync (no pipelining across Syncs)")
    ap.add_argument("--replay", help="JSON file with a sequence (list of items or finding)")
    ap.add_argument("--reduce", help="JSON finding file to reduce")
    ap.add_argument("--table", default="fz_t", help="table the sequences use (fz_t), for parallel runs")
    ap.add_argument("--from-n", type=int, default=0, help="skip the first N generated sequences")
    args = ap.parse_args()
    global TABLE
    TABLE = args.table

    runner = Runner(args)
    runner.setup()
    checker = Checker(runner, args.hp_port)

    if args.replay or args.reduce:
        f = json.load(open(args.replay or args.reduce))
        items = f["items"] if isinstance(f, dict) else f
        if args.replay:
            d, h = run_pair(runner, items, 0, checker, args.settle)
            print(show(items))
            print(side_by_side(d, h))
            print("DIFF:", compare(d, h), "soft:", soft_compare(d, h))
            return
        reduce(runner, checker, items, args)
        return

    outdir = os.path.join(os.environ.get("FUZZ_OUT", "fuzz-findings"), args.label)
    os.makedirs(outdir, exist_ok=True)
    rng = random.Random(args.seed)
    t0 = time.time()
    nfind = nsoft = 0
    done = 0
    for n in range(args.count):
        if args.max_time and time.time() - t0 > args.max_time:
            break
        items = gen_sequence(rng)
        if n < args.from_n:
            continue
        if args.roundtrip:
            # a round trip after every Sync (Query('') as its marker): no pipelining across Syncs
            items = [y for it in items for y in ([it, ["ROUNDTRIP"]] if it[0] == "Sync" else [it])]
        d, h = run_pair(runner, items, n, checker, args.settle)
        done += 1
        diffs = compare(d, h)
        if diffs:
            nfind += 1
            path = os.path.join(outdir, f"f{n:05d}.json")
            json.dump({"seed": args.seed, "n": n, "items": items, "diffs": diffs,
                       "direct": d, "hp": h}, open(path, "w"), indent=1)
            print(f"[{n}] DIFF {diffs} -> {path}", flush=True)
        elif soft_compare(d, h):
            nsoft += 1
            path = os.path.join(outdir, f"soft{n:05d}.json")
            json.dump({"seed": args.seed, "n": n, "items": items, "diffs": ["error message text"],
                       "direct": d, "hp": h}, open(path, "w"), indent=1)
            print(f"[{n}] SOFT (message text) -> {path}", flush=True)
        if n % 100 == 0:
            print(f"[{n}] {time.time() - t0:.0f}s findings={nfind} soft={nsoft}", flush=True)
    print(f"DONE label={args.label} seed={args.seed} sequences={done} findings={nfind} soft={nsoft} "
          f"time={time.time() - t0:.0f}s", flush=True)


def reduce(runner, checker, items, args):
    items = [it for it in items]

    def differs(cand):
        d, h = run_pair(runner, cand, 0, checker, args.settle)
        return bool(compare(d, h)), d, h

    ok, d, h = differs(items)
    if not ok:
        print("does not reproduce")
        return
    changed = True
    while changed:
        changed = False
        i = 0
        while i < len(items):
            cand = items[:i] + items[i + 1:]
            if differs(cand)[0]:
                items = cand
                changed = True
            else:
                i += 1
    # simplify: drop SEND markers done above; confirm 3 times
    confirmed = sum(differs(items)[0] for _ in range(3))
    ok, d, h = differs(items)
    print("MINIMAL (%d/3 confirmed):" % confirmed)
    print(show(items))
    print(side_by_side(d, h))
    print("DIFF:", compare(d, h))
    out = args.reduce.replace(".json", ".min.json")
    json.dump({"items": items, "confirmed": confirmed, "diffs": compare(d, h)}, open(out, "w"), indent=1)
    print("->", out)


if __name__ == "__main__":
    main()
