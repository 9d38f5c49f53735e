#!/usr/bin/env python3
"""bench/seed_report.py DIR RTT_MS: summary.csv and report.md of a
bench/seed_postgresjs.sh run from DIR/iterations.csv (target,iteration,ms)."""
import csv
import os
import statistics
import sys

ORDER = ["direct", "pgbouncer", "hyperpool", "hyperpool-cache"]
WHAT = {
    "direct": "app → WAN → PostgreSQL",
    "pgbouncer": "app → PgBouncer → WAN → PostgreSQL",
    "hyperpool": "app → hyperpool client → WAN → hyperpool endpoint → PostgreSQL (cache off)",
    "hyperpool-cache": "the same, cache on (warm)",
}
# The lead's goals for the split topology (docs/performance.md, "Seed workload").
POOLED_GOAL_RTTS = 6.5
CACHED_GOAL_RATIO = 0.05


def main():
    out, rtt = sys.argv[1], float(sys.argv[2])
    samples = {}
    with open(os.path.join(out, "iterations.csv")) as f:
        for row in csv.DictReader(f):
            samples.setdefault(row["target"], []).append(float(row["ms"]))
    targets = [t for t in ORDER if t in samples] + sorted(t for t in samples if t not in ORDER)
    stats = {}
    for t in targets:
        s = samples[t]
        stats[t] = dict(n=len(s), mean=statistics.fmean(s), median=statistics.median(s), min=min(s), max=max(s))
    direct = stats.get("direct")

    def ratio(t, key):
        return stats[t][key] / direct[key] if direct and direct[key] > 0 else None

    fields = ["target", "iterations", "rtt_ms", "mean_ms", "median_ms", "min_ms", "max_ms", "mean_rtts",
              "median_rtts", "mean_vs_direct", "median_vs_direct"]
    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        for t in targets:
            st = stats[t]
            rm, rd = ratio(t, "mean"), ratio(t, "median")
            w.writerow([t, st["n"], f"{rtt:g}", f"{st['mean']:.1f}", f"{st['median']:.1f}", f"{st['min']:.1f}",
                        f"{st['max']:.1f}", f"{st['mean'] / rtt:.2f}", f"{st['median'] / rtt:.2f}",
                        "" if rm is None else f"{rm:.3f}", "" if rd is None else f"{rd:.3f}"])

    env = open(os.path.join(out, "env.txt")).read() if os.path.exists(os.path.join(out, "env.txt")) else ""
    lines = [
        "# Seed workload: postgres.js, a fresh client per iteration, 5 distinct reads",
        "",
        f"Simulated WAN RTT {rtt:g} ms between the app and the database (`hyperpool wan`). "
        "Each iteration: `postgres(url, {max: 1})` (prepare: true, its type lookup at connect), 5 reads "
        "on pgbench's tables awaited one after another, `end()`. \"× RTT\" = ms ÷ RTT: the WAN round trips "
        "an iteration costs.",
        "",
        "| target | path | iterations | mean ms | median ms | mean × RTT | median × RTT | mean vs direct | median vs direct |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for t in targets:
        st = stats[t]
        rm, rd = ratio(t, "mean"), ratio(t, "median")
        lines.append(
            f"| {t} | {WHAT.get(t, '')} | {st['n']} | {st['mean']:.1f} | {st['median']:.1f} | {st['mean'] / rtt:.2f} | "
            f"{st['median'] / rtt:.2f} | {'–' if rm is None else f'{rm:.2f}×'} | {'–' if rd is None else f'{rd:.2f}×'} |")
    lines += ["", "## Goals", "", "| goal | measured | met? |", "|---|---|---|"]
    if "hyperpool" in stats:
        r = stats["hyperpool"]["median"] / rtt
        lines.append(f"| hyperpool, cache off: ≈ 6 round trips (median ≤ {POOLED_GOAL_RTTS:g} × RTT) | "
                     f"{r:.2f} × RTT | {'yes' if r <= POOLED_GOAL_RTTS else 'no'} |")
    if "hyperpool-cache" in stats and direct:
        r = ratio("hyperpool-cache", "median")
        lines.append(f"| hyperpool, cache on (warm): ≤ {CACHED_GOAL_RATIO:g} × direct (median) | {r:.3f}× | "
                     f"{'yes' if r <= CACHED_GOAL_RATIO else 'no'} |")
    lines += ["", "```", env.strip(), "```", ""]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
