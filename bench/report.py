#!/usr/bin/env python3
"""Turns one bench/run.sh result directory into summary.csv, report.md and PNGs.

  /usr/bin/python3 bench/report.py bench/results/latest

Inputs (written by run.sh): runs.csv (one row per pgbench run), latency/*.csv
(quantiles of 1-client runs), idle.jsonl (memory per idle client),
idle_latency.jsonl (one client's latency while N idle clients are held), peak_rss.txt, micro-*.json (Google Benchmark), env.txt.
Medians over the repetitions that succeeded; a cell is FAILED when no
repetition succeeded (the error text is listed under the tables).
"""

import csv
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads as W  # noqa: E402

# nullproxy: an epoll TCP forwarder with no logic (bench/nullproxy.c), the floor
# for any proxy process; pgbouncer is 1.25.2 when it could be built
# (env.txt says which), pgbouncer118 Debian's 1.18.
TARGETS = ["direct", "nullproxy", "pgbouncer", "pgbouncer118", "hyperpool"]
COLORS = {"direct": "#4c72b0", "nullproxy": "#8c8c8c", "pgbouncer": "#dd8452", "pgbouncer118": "#c44e52",
          "hyperpool": "#55a868"}

GOALS_TEXT = [
    ("pgbench -S -c 8 (simple) ≥ 0.9× direct", "S-simple-c8", "hp/direct", 0.9),
    ("pgbench -S -c 8 (simple) ≥ 1.3× PgBouncer", "S-simple-c8", "hp/pgbouncer", 1.3),
    ("pgbench -S -C ≥ 10× direct", "S-connect-c1", "hp/direct", 10.0),
    ("pooler CPU ≤ 8 µs per transaction (-S -c 8 simple)", "S-simple-c8", "cpu", 8.0),
    ("cache hit p50 ≤ 60 µs (hot-c1, end to end through pgbench)", "hot-c1", "p50", 60.0),
    ("≤ 4 kB per idle client", None, "idle", 4.0),
    ("select 1 p50 with 10,000 idle clients held ≤ PgBouncer's", None, "idle_lat", 1.0),
]
IDLE_LAT_GOAL_CLIENTS = 10000


def fnum(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def load_runs(d):
    path = os.path.join(d, "runs.csv")
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def summarize(runs):
    order = [w for w in W.WORKLOADS if any(r["workload"] == w for r in runs)]
    order += [w for w in dict.fromkeys(r["workload"] for r in runs) if w not in order]
    targets = [t for t in TARGETS if any(r["target"] == t for r in runs)]
    summary = {}
    for w in order:
        for t in targets:
            rs = [r for r in runs if r["workload"] == w and r["target"] == t]
            if not rs:
                continue
            ok = [r for r in rs if r["status"] == "OK"]
            errors = list(dict.fromkeys(r["error"] for r in rs if r["status"] != "OK" and r["error"]))
            summary[(w, t)] = {
                "workload": w, "target": t, "n_runs": len(rs), "n_ok": len(ok),
                "status": "OK" if ok else "FAILED",
                "tps": median(fnum(r["tps"]) for r in ok),
                "cpu_us_per_tx": median(fnum(r["cpu_us_per_tx"]) for r in ok),
                "latency_avg_ms": median(fnum(r["latency_avg_ms"]) for r in ok),
                "lat_p50_us": median(fnum(r["lat_p50_us"]) for r in ok),
                "lat_p99_us": median(fnum(r["lat_p99_us"]) for r in ok),
                "lat_p999_us": median(fnum(r["lat_p999_us"]) for r in ok),
                "hwm_kb": max([fnum(r["hwm_kb"]) or 0 for r in rs] or [0]) or None,
                "load1": median(fnum(r["load1"]) for r in rs),
                "error": errors[0] if errors else "",
                "partial_tps": median(fnum(r["tps"]) for r in rs if r["status"] != "OK"),
            }
    return order, targets, summary


def ratio(summary, w, a, b):
    x, y = summary.get((w, a)), summary.get((w, b))
    if not x or not y or x["tps"] is None or y["tps"] is None or not y["tps"]:
        return None
    return x["tps"] / y["tps"]


def fmt(x, digits=0, unit=""):
    if x is None:
        return "–"
    if digits == 0:
        return f"{x:,.0f}{unit}"
    return f"{x:,.{digits}f}{unit}"


def read_jsonl(d, name):
    """The records of results file `name`, skipping lines that are not JSON."""
    out = []
    path = os.path.join(d, name)
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        out.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass
    return out


def load_idle(d):
    return {rec.get("target", "?"): rec for rec in read_jsonl(d, "idle.jsonl")}


def load_idle_latency(d):
    """idle_latency.jsonl: one record per target, in the order run."""
    return read_jsonl(d, "idle_latency.jsonl")


def idle_latency_p50(recs, target, query):
    for rec in recs:
        if rec.get("target") == target:
            for r in rec.get("latency", []):
                if r.get("query") == query and not r.get("error") and r.get("p50_ms"):
                    return r["p50_ms"], rec.get("n_open") or 0
    return None, 0


def idle_latency_section(recs):
    L = []
    n = max([r.get("n_requested") or 0 for r in recs] or [0])
    secs = next((r["latency_seconds"] for r in recs if r.get("latency_seconds")), None)
    held_query = next((r["query"] for r in recs if r.get("query")), "SELECT 1")
    L.append(f"## select 1 with {n:,} idle clients held\n")
    L.append(
        f"`bench/idle_clients.py` opens {n:,} connections to the target (asyncpg, 25 at a time, "
        f"each runs `{held_query}` once) and holds them; meanwhile one more client runs the query "
        f"back to back over the simple protocol for {secs if secs else '?'} s with pgbench "
        "(`-c1 -j1 -M simple`), and p50/p90/p99 come from pgbench's per-transaction log "
        "(`--log`), so no Python timing is in the figures. hyperpool answers `SELECT 1` from "
        "its Client cache tier (default config); `now()` is a stable function, never cached, "
        "so `SELECT now()` reaches the origin every time; PgBouncer forwards both. "
        "direct and nullproxy are not run: each client would be a PostgreSQL backend "
        "(max_connections = 200).\n")
    L.append("| target | query | clients held | memory per held client | p50 ms | p90 ms | p99 ms | "
             "transactions | p50 / PgBouncer's | note |")
    L.append("|---|---|---|---|---|---|---|---|---|---|")
    for rec in recs:
        t = rec.get("target", "?")
        held = "–"
        if "n_open" in rec:
            held = f"{rec['n_open']:,}"
            if rec["n_open"] != rec.get("n_requested"):
                held += f" of {rec.get('n_requested', 0):,}"
        notes = []
        if rec.get("errors"):
            notes.append(f"{rec['errors']} connections failed: {rec.get('first_error', '')[:160]}")
        after = rec.get("n_open_after_latency")
        if after is not None and after != rec.get("n_open"):
            notes.append(f"{after:,} still open after the measurement")
        if rec.get("warning"):
            notes.append(rec["warning"])
        if rec.get("skipped") or rec.get("error") or not rec.get("latency"):
            text = rec.get("skipped") and f"skipped: {rec['skipped']}" or rec.get("error", "no result")
            notes.insert(0, text[:300].replace("|", "/"))
            L.append(f"| {t} | – | {held} | – | – | – | – | – | – | {'; '.join(notes)} |")
            continue
        # (RSS after - RSS before) / clients held: what a client that reached
        # the origin costs (the memory test's clients ran SELECT 1 only).
        mem = fmt(rec.get("kb_per_client"), 2, " kB")
        for r in rec["latency"]:
            q = r.get("query", "?")
            base, _ = idle_latency_p50(recs, "pgbouncer", q)
            p50 = r.get("p50_ms")
            rel = fmt(p50 / base, 2, "×") if p50 and base and not r.get("error") else "–"
            rnotes = list(notes)
            if r.get("error"):
                rnotes.insert(0, r["error"][:200])
            if r.get("failed"):
                rnotes.append(f"{r['failed']} failed transactions")
            L.append(f"| {t} | `{q}` | {held} | {mem} | {fmt(p50, 3)} | {fmt(r.get('p90_ms'), 3)} | "
                     f"{fmt(r.get('p99_ms'), 3)} | {fmt(r.get('count'))} | {rel} | "
                     f"{'; '.join(rnotes).replace('|', '/')} |")
    L.append("")
    cmds = [rec for rec in recs if rec.get("command")]
    if cmds:
        L.append("Commands, run from the repository root by bench/run.sh (password masked), and the "
                 "pgbench each runs once per query while the clients are held (FILE holds the "
                 "query and a `;`; PGPASSWORD in its environment):\n")
        L.append("```")
        for rec in cmds:
            L.append(f"# {rec['target']}")
            L.append(rec["command"])
            pgb = next((r["pgbench"] for r in rec.get("latency", []) if r.get("pgbench")), None)
            if pgb:
                L.append(pgb)
        L.append("```")
        L.append("")
    return L


def load_peak(d):
    out = {}
    path = os.path.join(d, "peak_rss.txt")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    out[parts[0]] = float(parts[1])
    return out


def load_micro(d):
    rows = []
    for path in sorted(glob.glob(os.path.join(d, "micro-*.json"))):
        binary = os.path.basename(path)[len("micro-"):-len(".json")]
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError):
            continue
        for b in data.get("benchmarks", []):
            if b.get("run_type") == "aggregate":
                continue
            unit = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}.get(b.get("time_unit", "ns"), 1)
            items = b.get("items_per_second")
            rows.append({
                "binary": binary, "name": b["name"],
                "ns_per_iter": b["cpu_time"] * unit,
                "mb_s": b["bytes_per_second"] / 1e6 if "bytes_per_second" in b else None,
                "ns_per_msg": 1e9 / items if items else None,
                "counters": {k: v for k, v in b.items()
                             if k not in ("name", "family_index", "per_family_instance_index",
                                          "run_name", "run_type", "repetitions",
                                          "repetition_index", "threads", "iterations",
                                          "real_time", "cpu_time", "time_unit",
                                          "bytes_per_second", "items_per_second")
                             and isinstance(v, (int, float))},
            })
    return rows


def latency_curves(d, workload, target):
    """Median over repetitions of each quantile."""
    files = sorted(glob.glob(os.path.join(d, "latency", f"{workload}__{target}__r*.csv")))
    per_q = {}
    for path in files:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                per_q.setdefault(float(row["quantile"]), []).append(float(row["latency_us"]))
    qs = sorted(per_q)
    return qs, [statistics.median(per_q[q]) for q in qs]


def plots(d, order, targets, summary):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["(no plots: python3-matplotlib is not installed)"]
    made = []
    # Throughput bars, log scale (tps spans 10^2..10^5).
    fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(order) + 2), 5))
    width = 0.8 / max(1, len(targets))
    for i, t in enumerate(targets):
        xs, ys = [], []
        for j, w in enumerate(order):
            s = summary.get((w, t))
            x = j + (i - (len(targets) - 1) / 2) * width
            if s and s["tps"]:
                xs.append(x)
                ys.append(s["tps"])
            elif s:
                ax.text(x, 1.3, "FAILED", rotation=90, ha="center", va="bottom", fontsize=7,
                        color=COLORS.get(t, "k"))
        ax.bar(xs, ys, width, label=t, color=COLORS.get(t))
    ax.set_yscale("log")
    top = max([s["tps"] or 1 for s in summary.values()] or [1])
    ax.set_ylim(1, top * 10)  # headroom for the legend
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels(order, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("transactions / s (median, log scale)")
    ax.set_title("pgbench throughput per workload and target")
    ax.legend(ncol=len(targets), loc="upper center", fontsize=8)
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(d, "throughput.png"), dpi=110)
    plt.close(fig)
    made.append("throughput.png")

    lat_workloads = [w for w in order if W.WORKLOADS.get(w, {}).get("latency_log")]
    if lat_workloads:
        fig, axes = plt.subplots(1, len(lat_workloads), figsize=(4.2 * len(lat_workloads), 4),
                                 squeeze=False)
        any_curve = False
        for ax, w in zip(axes[0], lat_workloads):
            for t in targets:
                qs, lat = latency_curves(d, w, t)
                if qs:
                    ax.plot(lat, qs, label=t, color=COLORS.get(t))
                    any_curve = True
            ax.set_xscale("log")
            ax.set_xlabel("latency per transaction (µs, log)")
            ax.set_title(w, fontsize=9)
            ax.grid(alpha=0.3, which="both")
            ax.set_ylim(0, 1)
        axes[0][0].set_ylabel("fraction of transactions")
        axes[0][0].legend(fontsize=8)
        fig.suptitle("latency CDF, 1 client (pgbench -l)")
        fig.tight_layout()
        if any_curve:
            fig.savefig(os.path.join(d, "latency_cdf.png"), dpi=110)
            made.append("latency_cdf.png")
        plt.close(fig)

    cpu_targets = [t for t in targets if t != "direct"]
    if cpu_targets:
        fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(order) + 2), 4))
        width = 0.8 / len(cpu_targets)
        for i, t in enumerate(cpu_targets):
            xs, ys = [], []
            for j, w in enumerate(order):
                s = summary.get((w, t))
                if s and s["cpu_us_per_tx"] is not None:
                    xs.append(j + (i - (len(cpu_targets) - 1) / 2) * width)
                    ys.append(s["cpu_us_per_tx"])
            ax.bar(xs, ys, width, label=t, color=COLORS.get(t))
        ax.axhline(8, color="red", linestyle="--", linewidth=1, label="goal: 8 µs")
        ax.set_yscale("log")
        ax.set_xticks(range(len(order)))
        ax.set_xticklabels(order, rotation=35, ha="right", fontsize=8)
        ax.set_ylabel("pooler CPU µs / transaction (log)")
        ax.set_title("pooler CPU per transaction (utime+stime / transactions)")
        ax.legend(fontsize=8)
        ax.grid(axis="y", which="both", alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(d, "cpu_per_tx.png"), dpi=110)
        plt.close(fig)
        made.append("cpu_per_tx.png")
    return made


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "results", "latest")
    runs = load_runs(d)
    order, targets, summary = summarize(runs)
    idle = load_idle(d)
    idle_lat = load_idle_latency(d)
    peak = load_peak(d)
    micro = load_micro(d)
    env = open(os.path.join(d, "env.txt")).read() if os.path.exists(os.path.join(d, "env.txt")) else ""

    with open(os.path.join(d, "summary.csv"), "w", newline="") as f:
        fields = ["workload", "target", "status", "n_ok", "n_runs", "tps", "cpu_us_per_tx",
                  "latency_avg_ms", "lat_p50_us", "lat_p99_us", "lat_p999_us", "hwm_kb", "load1",
                  "hp_over_direct", "hp_over_pgbouncer", "hp_over_nullproxy", "error"]
        wr = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        wr.writeheader()
        for (w, t), s in summary.items():
            row = dict(s)
            row["hp_over_direct"] = ratio(summary, w, "hyperpool", "direct") if t == "hyperpool" else ""
            row["hp_over_pgbouncer"] = ratio(summary, w, "hyperpool", "pgbouncer") if t == "hyperpool" else ""
            row["hp_over_nullproxy"] = ratio(summary, w, "hyperpool", "nullproxy") if t == "hyperpool" else ""
            wr.writerow(row)

    made = plots(d, order, targets, summary)
    notes = []  # footnotes for FAILED cells

    def cell(w, t):
        s = summary.get((w, t))
        if not s:
            return "–"
        if s["status"] != "OK":
            if s["error"] not in notes:
                notes.append(s["error"])
            return f"**FAILED** [{notes.index(s['error']) + 1}]"
        text = fmt(s["tps"])
        if s["n_ok"] < s["n_runs"]:
            if s["error"] and s["error"] not in notes:
                notes.append(s["error"])
            ref = f" [{notes.index(s['error']) + 1}]" if s["error"] else ""
            text += f" ({s['n_runs'] - s['n_ok']}/{s['n_runs']} failed{ref})"
        return text

    L = []
    L.append(f"# hyperpool benchmark report ({os.path.basename(os.path.abspath(d))})\n")
    L.append("```\n" + env.strip() + "\n```\n")
    L.append("## Throughput (pgbench tps, median of repetitions)\n")
    head = "| workload | " + " | ".join(targets)
    has_hp = "hyperpool" in targets
    if has_hp and "direct" in targets:
        head += " | hp/direct"
    if has_hp and "pgbouncer" in targets:
        head += " | hp/pgbouncer"
    if has_hp and "nullproxy" in targets:
        head += " | hp/nullproxy"
    L.append(head + " |")
    L.append("|" + "---|" * (head.count("|")))
    for w in order:
        line = f"| {w} | " + " | ".join(cell(w, t) for t in targets)
        if has_hp and "direct" in targets:
            line += f" | {fmt(ratio(summary, w, 'hyperpool', 'direct'), 2, '×')}"
        if has_hp and "pgbouncer" in targets:
            line += f" | {fmt(ratio(summary, w, 'hyperpool', 'pgbouncer'), 2, '×')}"
        if has_hp and "nullproxy" in targets:
            line += f" | {fmt(ratio(summary, w, 'hyperpool', 'nullproxy'), 2, '×')}"
        L.append(line + " |")
    L.append("")

    poolers = [t for t in targets if t != "direct"]
    if poolers:
        L.append("## Pooler cost and latency (medians)\n")
        L.append("CPU = pooler utime+stime during the run / transactions (all threads); "
                 "latency = pgbench's average per transaction.\n")
        L.append("| workload | " + " | ".join(f"{t} CPU µs/tx" for t in poolers) + " | "
                 + " | ".join(f"{t} lat ms" for t in targets) + " |")
        L.append("|---|" + "---|" * (len(poolers) + len(targets)))
        for w in order:
            cpu = [fmt((summary.get((w, t)) or {}).get("cpu_us_per_tx"), 1) for t in poolers]
            lat = [fmt((summary.get((w, t)) or {}).get("latency_avg_ms"), 3) for t in targets]
            L.append(f"| {w} | " + " | ".join(cpu) + " | " + " | ".join(lat) + " |")
        L.append("")

    lat_rows = [(w, t) for w in order for t in targets
                if W.WORKLOADS.get(w, {}).get("latency_log") and summary.get((w, t), {}).get("lat_p50_us")]
    if lat_rows:
        L.append("## Latency distribution, 1 client (pgbench -l, µs)\n")
        L.append("| workload | target | p50 | p99 | p99.9 |")
        L.append("|---|---|---|---|---|")
        for w, t in lat_rows:
            s = summary[(w, t)]
            L.append(f"| {w} | {t} | {fmt(s['lat_p50_us'])} | {fmt(s['lat_p99_us'])} | {fmt(s['lat_p999_us'])} |")
        L.append("")

    L.append("## Memory\n")
    L.append("| target | peak RSS (VmHWM) | idle clients held | memory per idle client | note |")
    L.append("|---|---|---|---|---|")
    for t in targets:
        rec = idle.get(t, {})
        pk = peak.get(t)
        if pk is None:
            pk = max([s["hwm_kb"] or 0 for (w, tt), s in summary.items() if tt == t] or [0]) or None
        if t == "direct":
            per = fmt(rec.get("backend_pss_kb"), 0, " kB") if rec.get("backend_pss_kb") else "n/a"
            note = "PostgreSQL backend Pss per connection (a process; not comparable)"
        else:
            per = fmt(rec.get("kb_per_client"), 2, " kB") if rec.get("kb_per_client") is not None else "–"
            note = "(RSS after − RSS before) / connections"
        if rec.get("errors"):
            note += f"; {rec['errors']} connections failed: {rec.get('first_error', '')[:160]}"
        if rec.get("error"):
            note += f"; {rec['error'][:200]}"
        L.append(f"| {t} | {fmt(pk / 1024, 1, ' MB') if pk else ('n/a' if t == 'direct' else '–')} | "
                 f"{rec.get('n_open', '–')} | {per} | {note} |")
    L.append("")

    if idle_lat:
        L += idle_latency_section(idle_lat)

    if has_hp:
        L.append("## Goals\n")
        L.append("| goal | measured | met? |")
        L.append("|---|---|---|")
        for text, w, kind, limit in GOALS_TEXT:
            val = None
            if kind == "hp/direct":
                val = ratio(summary, w, "hyperpool", "direct")
                shown = fmt(val, 2, "×")
                met = val is not None and val >= limit
            elif kind == "hp/pgbouncer":
                val = ratio(summary, w, "hyperpool", "pgbouncer")
                shown = fmt(val, 2, "×")
                met = val is not None and val >= limit
            elif kind == "cpu":
                val = (summary.get((w, "hyperpool")) or {}).get("cpu_us_per_tx")
                shown = fmt(val, 1, " µs")
                met = val is not None and val <= limit
            elif kind == "p50":
                val = (summary.get((w, "hyperpool")) or {}).get("lat_p50_us")
                shown = fmt(val, 0, " µs")
                met = val is not None and val <= limit
            elif kind == "idle_lat":
                hp, n_hp = idle_latency_p50(idle_lat, "hyperpool", "SELECT 1")
                pb, n_pb = idle_latency_p50(idle_lat, "pgbouncer", "SELECT 1")
                val = hp / pb if hp and pb else None
                held = min(n_hp, n_pb)
                shown = fmt(val, 2, "× PgBouncer's") + (f" ({held:,} clients held)" if val is not None else "")
                met = val is not None and val <= limit and held >= IDLE_LAT_GOAL_CLIENTS
                if val is not None and val <= limit and not met:
                    L.append(f"| {text} | {shown} | not at {IDLE_LAT_GOAL_CLIENTS:,} clients |")
                    continue
            else:
                val = idle.get("hyperpool", {}).get("kb_per_client")
                shown = fmt(val, 2, " kB")
                met = val is not None and val <= limit
            s = summary.get((w, "hyperpool")) if w else None
            if s and s["status"] != "OK":
                shown = "FAILED"
            L.append(f"| {text} | {shown} | {'yes' if met else ('no' if val is not None else 'not measured')} |")
        L.append("")

    if micro:
        L.append("## Microbenchmarks (Google Benchmark, CPU time)\n")
        L.append("| binary | benchmark | ns/iteration | MB/s | ns/message | other counters |")
        L.append("|---|---|---|---|---|---|")
        for m in micro:
            other = ", ".join(f"{k}={v:.4g}" for k, v in m["counters"].items())
            L.append(f"| {m['binary']} | {m['name']} | {fmt(m['ns_per_iter'], 1)} | "
                     f"{fmt(m['mb_s'], 0)} | {fmt(m['ns_per_msg'], 1)} | {other} |")
        L.append("")

    if notes:
        L.append("## Failures (error text as printed)\n")
        for i, n in enumerate(notes, 1):
            L.append(f"{i}. `{n.replace('`', chr(39))}`")
        L.append("")
    if made:
        L.append("## Plots\n")
        for m in made:
            L.append(f"![{m}]({m})")
        L.append("")
    with open(os.path.join(d, "report.md"), "w") as f:
        f.write("\n".join(L))
    print("\n".join(L))
    return 0


if __name__ == "__main__":
    sys.exit(main())
