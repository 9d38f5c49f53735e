#!/usr/bin/env python3
"""bench/seed_report.py DIR RTT_MS: summary.csv and report.md of a
bench/seed_postgresjs.sh run from DIR/iterations.csv (target,iteration,ms).
A target named NAME@0 is NAME run at RTT 0 in the same run: its median is
NAME's local work (the driver's and the pooler's), and NAME's limit is its
WAN round trips by the protocol's count × RTT plus that local work."""
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
# WAN round trips an iteration needs by the protocol's count (docs/performance.md,
# "Seed workload"): direct 1 TCP + 3 SCRAM + 1 type lookup + 2 x 5 statements +
# end() waiting for the server's close; PgBouncer (beside the app) the type
# lookup and 2 x 5; hyperpool cache off one per statement execution (the type
# lookup and the 5 reads: the Client answers the Describes); warm none.
ROUND_TRIPS = {"direct": 16, "pgbouncer": 11, "hyperpool": 6, "hyperpool-cache": 0}
# The goals for the split topology (issue 14).
POOLED_GOAL_RTTS = 6
POOLED_GOAL_MARGIN = 0.05
CACHED_GOAL_RATIO = 0.05


def main():
    out, rtt = sys.argv[1], float(sys.argv[2])
    samples = {}
    with open(os.path.join(out, "iterations.csv")) as f:
        for row in csv.DictReader(f):
            samples.setdefault(row["target"], []).append(float(row["ms"]))
    base = [t for t in ORDER if t in samples] + sorted(t for t in samples if t not in ORDER and "@" not in t)
    stats = {}
    for t in samples:
        s = samples[t]
        stats[t] = dict(n=len(s), mean=statistics.fmean(s), median=statistics.median(s), min=min(s), max=max(s))
    direct = stats.get("direct")

    def ratio(t, key):
        return stats[t][key] / direct[key] if direct and direct[key] > 0 else None

    def local(t):
        return stats[t + "@0"]["median"] if t + "@0" in stats else None

    def limit(t):
        if t not in ROUND_TRIPS or local(t) is None:
            return None
        return ROUND_TRIPS[t] * rtt + local(t)

    fields = ["target", "iterations", "rtt_ms", "mean_ms", "median_ms", "min_ms", "max_ms", "mean_rtts",
              "median_rtts", "mean_vs_direct", "median_vs_direct", "round_trips", "local_ms", "limit_ms",
              "median_vs_limit"]
    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        for t in base + [t + "@0" for t in base if t + "@0" in stats]:
            st = stats[t]
            at0 = t.endswith("@0")
            r = 0.0 if at0 else rtt
            rm, rd = (None, None) if at0 else (ratio(t, "mean"), ratio(t, "median"))
            lim = None if at0 else limit(t)
            w.writerow([t, st["n"], f"{r:g}", f"{st['mean']:.1f}", f"{st['median']:.1f}", f"{st['min']:.1f}",
                        f"{st['max']:.1f}", "" if at0 else f"{st['mean'] / rtt:.2f}",
                        "" if at0 else f"{st['median'] / rtt:.2f}",
                        "" if rm is None else f"{rm:.3f}", "" if rd is None else f"{rd:.3f}",
                        "" if at0 else ROUND_TRIPS.get(t, ""), "" if at0 or local(t) is None else f"{local(t):.1f}",
                        "" if lim is None else f"{lim:.1f}",
                        "" if lim is None or lim <= 0 else f"{st['median'] / lim:.3f}"])

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
    for t in base:
        st = stats[t]
        rm, rd = ratio(t, "mean"), ratio(t, "median")
        lines.append(
            f"| {t} | {WHAT.get(t, '')} | {st['n']} | {st['mean']:.1f} | {st['median']:.1f} | {st['mean'] / rtt:.2f} | "
            f"{st['median'] / rtt:.2f} | {'–' if rm is None else f'{rm:.2f}×'} | {'–' if rd is None else f'{rd:.2f}×'} |")
    if any(local(t) is not None for t in base):
        lines += [
            "",
            f"## The limit: round trips × RTT + local work (the same target at RTT 0, same run)",
            "",
            "| target | round trips (protocol count) | × RTT ms | local work ms (median at RTT 0) | limit ms | "
            "median ms | median ÷ limit | median ÷ (round trips × RTT) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for t in base:
            if local(t) is None or t not in ROUND_TRIPS:
                continue
            n = ROUND_TRIPS[t]
            lim = limit(t)
            med = stats[t]["median"]
            wan = n * rtt
            lines.append(f"| {t} | {n} | {wan:.0f} | {local(t):.1f} | {lim:.1f} | {med:.1f} | {med / lim:.3f} | "
                         f"{'–' if wan <= 0 else f'{med / wan:.3f}'} |")
    lines += ["", "## Goals", "", "| goal | measured | met? |", "|---|---|---|"]
    if "hyperpool" in stats:
        med = stats["hyperpool"]["median"]
        bound = POOLED_GOAL_RTTS * rtt * (1 + POOLED_GOAL_MARGIN)
        lines.append(f"| hyperpool, cache off: within {POOLED_GOAL_MARGIN:.0%} of {POOLED_GOAL_RTTS} round trips "
                     f"(median ≤ {bound:.0f} ms) | {med:.1f} ms = {med / rtt:.2f} × RTT | "
                     f"{'yes' if med <= bound else 'no'} |")
        lim = limit("hyperpool")
        if lim is not None:
            lines.append(f"| hyperpool, cache off: within {POOLED_GOAL_MARGIN:.0%} of its limit, {POOLED_GOAL_RTTS} × RTT "
                         f"+ local work ({lim:.0f} ms) | {med / lim:.3f} × limit | "
                         f"{'yes' if med <= lim * (1 + POOLED_GOAL_MARGIN) else 'no'} |")
    if "hyperpool-cache" in stats and direct:
        r = ratio("hyperpool-cache", "median")
        lines.append(f"| hyperpool, cache on (warm): ≤ {CACHED_GOAL_RATIO:g} × direct (median) | {r:.3f}× | "
                     f"{'yes' if r <= CACHED_GOAL_RATIO else 'no'} |")
    lines += ["", "```", env.strip(), "```", ""]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
