#!/usr/bin/env python3
"""Runs ONE pgbench workload against ONE target and appends a row to runs.csv.

Called by bench/run.sh once per (repetition, workload, target). Measures, besides
what pgbench prints:
  - pooler CPU: utime+stime of the pooler process (/proc/PID/stat, all its
    threads) before and after the run, divided by the transactions processed;
  - pooler memory: VmRSS and VmHWM (/proc/PID/status) after the run;
  - per-transaction latency quantiles from pgbench -l logs (workloads that
    ask for it), written to LATDIR/<workload>__<target>__r<rep>.csv.
A run that pgbench aborts, or that reports failed transactions, or that times
out, is recorded with status FAILED and the error text: that is a result.
"""

import argparse
import csv
import glob
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads  # noqa: E402

FIELDS = [
    "rep", "workload", "target", "status", "tps", "transactions", "failed_tx",
    "latency_avg_ms", "lat_p50_us", "lat_p90_us", "lat_p99_us", "lat_p999_us",
    "cpu_us_per_tx", "cpu_s", "rss_kb", "hwm_kb", "load1", "wall_s", "error",
]

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        data = f.read()
    fields = data[data.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)


def mem_kb(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out.get("VmRSS", 0), out.get("VmHWM", 0)


def first(pattern, text, cast=float):
    m = re.search(pattern, text)
    return cast(m.group(1)) if m else None


def error_text(output):
    """The distinct errors pgbench printed (server ERROR/FATAL messages, client
    aborts, connection failures), with client numbers folded so that 100
    clients failing alike give one line, and a count of aborted clients."""
    seen = []
    aborted = set()
    for line in output.splitlines():
        low = line.lower()
        if not ("error" in low or "fatal" in low or "aborted" in low or "could not" in low
                or "timed out" in low):
            continue
        m = re.search(r"client (\d+) .*aborted", line)
        if m:
            aborted.add(m.group(1))
        m = re.search(r"((?:ERROR|FATAL|PANIC):.*)$", line)
        msg = m.group(1) if m else re.sub(r"client \d+", "client N", line.strip())
        msg = re.sub(r"^pgbench: (pgbench: )*(error: )?", "", msg)
        msg = re.sub(r"\s+", " ", msg)
        if msg.startswith("Run was aborted"):
            continue
        if msg not in seen:
            seen.append(msg)
    text = " | ".join(seen[:4])
    if aborted:
        text += f" ({len(aborted)} client(s) aborted)"
    return text[:600]


def read_latency_log(prefix):
    """The latencies (µs) of pgbench --log files PREFIX.*, which it removes.
    Lines: client_id transaction_no latency_us script_no epoch_s epoch_us."""
    values = []
    for path in glob.glob(prefix + ".*"):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[2].isdigit():
                    values.append(int(parts[2]))
        os.unlink(path)
    return values


def reduce_latency_log(prefix, out_csv):
    values = read_latency_log(prefix)
    if not values:
        return {}
    values.sort()
    n = len(values)

    def q(p):
        return values[min(n - 1, int(p * n))]

    with open(out_csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["quantile", "latency_us"])
        for i in range(0, 1001):
            p = i / 1000.0
            w.writerow([f"{p:.3f}", q(p) if i < 1000 else values[-1]])
    return {"lat_p50_us": q(0.5), "lat_p90_us": q(0.9), "lat_p99_us": q(0.99),
            "lat_p999_us": q(0.999)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rep", type=int, required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--password", required=True)
    ap.add_argument("--database", required=True)
    ap.add_argument("--pid", type=int, default=0, help="pooler process; 0 = none (direct)")
    ap.add_argument("--duration", type=int, required=True)
    ap.add_argument("--out", required=True, help="runs.csv to append to")
    ap.add_argument("--latdir", required=True)
    ap.add_argument("--logdir", required=True, help="raw pgbench output goes here")
    ap.add_argument("--tmpdir", required=True, help="for pgbench -l logs")
    ap.add_argument("--hot-sql", required=True)
    args = ap.parse_args()

    w = workloads.WORKLOADS[args.workload]
    tag = f"{args.workload}__{args.target}__r{args.rep}"
    cmd = ["pgbench", "-n", "-T", str(args.duration), "-h", args.host, "-p", str(args.port),
           "-U", args.user] + workloads.pgbench_args(args.workload, args.hot_sql)
    log_prefix = os.path.join(args.tmpdir, "lat_" + tag)
    if w["latency_log"]:
        cmd += ["-l", "--log-prefix=" + log_prefix]
    cmd.append(args.database)
    env = dict(os.environ, PGPASSWORD=args.password, PGSSLMODE="disable",
               PGAPPNAME="hyperpool-bench")

    row = {k: "" for k in FIELDS}
    row.update(rep=args.rep, workload=args.workload, target=args.target,
               load1=f"{os.getloadavg()[0]:.2f}")
    pid = args.pid
    alive = pid > 0 and os.path.exists(f"/proc/{pid}")
    if pid > 0 and not alive:
        row.update(status="FAILED", error=f"{args.target} process {pid} is not running")
        append(args.out, row)
        return 0
    t0_cpu = cpu_ticks(pid) if alive else 0
    t0 = time.monotonic()
    # Generous timeout: 100 clients connecting through a slow pooler take time,
    # but a hung pooler must not hang the suite.
    timeout = args.duration * 3 + 60
    try:
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=timeout)
        output, rc = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as e:
        output = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        output += f"\npgbench: error: timed out after {timeout} s (killed)"
        rc = -1
    wall = time.monotonic() - t0
    with open(os.path.join(args.logdir, tag + ".log"), "w") as f:
        f.write(" ".join(cmd) + "\n\n" + output)

    tx = first(r"number of transactions actually processed: (\d+)", output, int)
    failed = first(r"number of failed transactions: (\d+)", output, int) or 0
    tps = first(r"tps = ([\d.]+)", output)
    row.update(tps=f"{tps:.1f}" if tps is not None else "", transactions=tx if tx is not None else "",
               failed_tx=failed, latency_avg_ms=first(r"latency average = ([\d.]+) ms", output) or "",
               wall_s=f"{wall:.1f}")
    if pid > 0:
        if os.path.exists(f"/proc/{pid}"):
            ticks = cpu_ticks(pid) - t0_cpu
            rss, hwm = mem_kb(pid)
            row.update(cpu_s=f"{ticks / CLK_TCK:.2f}", rss_kb=rss, hwm_kb=hwm)
            if tx:
                row["cpu_us_per_tx"] = f"{ticks / CLK_TCK * 1e6 / tx:.1f}"
        else:
            output += f"\n{args.target} process {pid} exited during the run"
            rc = rc or -2
    else:
        row.update(cpu_us_per_tx="0", cpu_s="0")
    aborted = "aborted" in output or rc != 0 or failed > 0 or not tx
    if aborted:
        row["status"] = "FAILED"
        row["error"] = error_text(output) or f"pgbench exit code {rc}"
    else:
        row["status"] = "OK"
    if w["latency_log"]:
        if row["status"] == "OK":
            row.update(reduce_latency_log(log_prefix, os.path.join(args.latdir, tag + ".csv")))
        else:
            for path in glob.glob(log_prefix + ".*"):
                os.unlink(path)
    append(args.out, row)
    shown = row["tps"] or "-"
    print(f"  r{args.rep} {args.workload:<20} {args.target:<10} {row['status']:<6} tps={shown:<9} "
          f"cpu/tx={row['cpu_us_per_tx'] or '-'}us load={row['load1']}"
          + (f"  [{row['error'][:160]}]" if row["error"] else ""), flush=True)
    return 0


def append(path, row):
    new = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        w.writerow(row)


if __name__ == "__main__":
    # Die by the signal on Ctrl-C, so that run.sh (bash) sees it and stops too.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(main())
