"""The pgbench workloads of the side-by-side suite (bench/run.sh).

Each workload is one pgbench invocation; the same list drives the runner
(pgbench_run.py), the report (report.py) and docs/performance.md.

  python3 bench/workloads.py list      # names, one per line, in run order
"""

import sys

# name -> (pgbench arguments without -T/connection options, clients, log per-transaction latency)
# `hot` runs bench/hot.sql (one fixed read-only point query): on hyperpool it is
# a cache hit after the first execution, on the others an ordinary query.
WORKLOADS = {}


def _add(name, args, clients, latency_log=False, description=""):
    jobs = min(2, clients)
    WORKLOADS[name] = {
        "args": args + ["-c", str(clients), "-j", str(jobs)],
        "clients": clients,
        "latency_log": latency_log,
        "description": description,
    }


for _mode in ("simple", "extended", "prepared"):
    for _clients in (1, 8, 100):
        _add(f"S-{_mode}-c{_clients}", ["-S", "-M", _mode], _clients,
             latency_log=(_clients == 1),
             description=f"pgbench -S (read-only point select), -M {_mode}, {_clients} client(s)")
_add("S-connect-c1", ["-S", "-C", "-M", "simple"], 1,
     description="pgbench -S -C: a new connection (startup + auth) per transaction, 1 client")
_add("tpcb-c8", ["-M", "simple"], 8,
     description="pgbench default TPC-B-like script (5 statements in BEGIN/END), 8 clients")
_add("hot-c1", ["-M", "simple", "-f", "@HOT_SQL@"], 1, latency_log=True,
     description="the same point select every time (bench/hot.sql): a cache hit on hyperpool")


def pgbench_args(name, hot_sql):
    return [a.replace("@HOT_SQL@", hot_sql) for a in WORKLOADS[name]["args"]]


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "list":
        for n in WORKLOADS:
            print(n)
    elif len(sys.argv) >= 2 and sys.argv[1] == "describe":
        for n, w in WORKLOADS.items():
            print(f"{n}\t{w['description']}")
    else:
        print(__doc__)
        sys.exit(2)
