#!/usr/bin/python3
"""Strict checks of a Prometheus text exposition (format 0.0.4) scraped from
hyperpool, and that its counters move between two scrapes.

  metrics_check.py parse FILE          validates FILE, prints its samples as JSON
  metrics_check.py moved FILE1 FILE2   validates both; asserts that counters moved

Every line must be a HELP, TYPE or sample line matching the format's
grammar; every sample belongs to a family with a TYPE (declared once, before
its samples, with its samples contiguous); counters end in _total;
histograms have cumulative _bucket{le=...} samples ending at le="+Inf" equal
to _count, and a _sum.
"""
import json
import math
import re
import sys

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
VALUE = r"(?:[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Inf|NaN)"
SAMPLE = re.compile(rf"^({NAME})(?:\{{((?:{LABEL})(?:,{LABEL})*)?,?\}})? ({VALUE})(?: (-?\d+))?$")
HELP = re.compile(rf"^# HELP ({NAME}) (.*)$")
TYPE = re.compile(rf"^# TYPE ({NAME}) (counter|gauge|histogram|summary|untyped)$")
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def fail(msg):
    sys.exit(f"metrics_check: {msg}")


def family_of(name, types):
    if name in types:
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and types.get(name[: -len(suffix)]) in ("histogram", "summary"):
            return name[: -len(suffix)]
    return None


def parse(path):
    text = open(path, encoding="utf-8").read()
    if not text.endswith("\n"):
        fail(f"{path}: does not end with a newline")
    types, helps, samples, seen_done = {}, {}, [], set()
    current = None
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = f"{path}:{n}"
        if line.startswith("#"):
            m = HELP.match(line) or TYPE.match(line)
            if not m:
                fail(f"{where}: bad comment line {line!r}")
            name = m.group(1)
            table = helps if line.startswith("# HELP") else types
            if name in table:
                fail(f"{where}: second {line.split()[1]} for {name}")
            if any(s[0] == name or family_of(s[0], types) == name for s in samples):
                fail(f"{where}: {line.split()[1]} for {name} after its samples")
            table[name] = m.group(2)
            continue
        m = SAMPLE.match(line)
        if not m:
            fail(f"{where}: not a sample line: {line!r}")
        name, labels_text, value = m.group(1), m.group(2) or "", m.group(3)
        family = family_of(name, types)
        if family is None:
            fail(f"{where}: sample {name} has no TYPE")
        if family not in helps:
            fail(f"{where}: family {family} has no HELP")
        if family != current:
            if family in seen_done:
                fail(f"{where}: samples of {family} are not contiguous")
            if current is not None:
                seen_done.add(current)
            current = family
        if types[family] == "counter" and not family.endswith("_total"):
            fail(f"{where}: counter {family} does not end in _total")
        labels = dict(LABEL_RE.findall(labels_text))
        samples.append((name, labels, float(value), family))
    for family, kind in types.items():
        if kind != "histogram":
            continue
        groups = {}
        for name, labels, value, fam in samples:
            if fam != family:
                continue
            key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
            groups.setdefault(key, {"buckets": [], "sum": None, "count": None})
            g = groups[key]
            if name == family + "_bucket":
                if "le" not in labels:
                    fail(f"{family}: bucket without le")
                g["buckets"].append((float(labels["le"].replace("+Inf", "inf")), value))
            elif name == family + "_sum":
                g["sum"] = value
            elif name == family + "_count":
                g["count"] = value
        if not groups:
            fail(f"histogram {family} has no samples")
        for g in groups.values():
            bounds = [b for b, _ in g["buckets"]]
            counts = [c for _, c in g["buckets"]]
            if not bounds or bounds[-1] != math.inf:
                fail(f"{family}: last bucket is not le=\"+Inf\"")
            if bounds != sorted(bounds) or counts != sorted(counts):
                fail(f"{family}: buckets not increasing/cumulative")
            if g["sum"] is None or g["count"] is None or g["count"] != counts[-1]:
                fail(f"{family}: _sum/_count missing or +Inf bucket != _count")
    return types, samples


def value(samples, name, **labels):
    for n, l, v, _ in samples:
        if n == name and all(l.get(k) == val for k, val in labels.items()):
            return v
    fail(f"no sample {name}{labels}")


def main():
    if sys.argv[1] == "parse":
        types, samples = parse(sys.argv[2])
        print(json.dumps([[n, l, v] for n, l, v, _ in samples]))
        return
    if sys.argv[1] != "moved":
        fail("usage: metrics_check.py parse FILE | moved FILE1 FILE2")
    _, first = parse(sys.argv[2])
    types, second = parse(sys.argv[3])
    # The queries between the two scrapes were transactions on the origin.
    for name in ("hyperpool_transactions_total", "hyperpool_queries_total",
                 "hyperpool_transaction_duration_seconds_count",
                 "hyperpool_pool_acquire_wait_seconds_count",
                 "hyperpool_client_connections_accepted_total"):
        if not value(second, name) > value(first, name):
            fail(f"{name} did not move: {value(first, name)} -> {value(second, name)}")
    if not value(second, "hyperpool_cache_hits_total", tier="endpoint") + \
            value(second, "hyperpool_cache_hits_total", tier="client") > 0:
        fail("the repeated cacheable query made no cache hit")
    # Counters never go down.
    for n, l, v, fam in first:
        if types.get(fam) == "counter" and value(second, n, **l) < v:
            fail(f"counter {n}{l} went down")
    for name in ("hyperpool_pool_connections", "hyperpool_pool_max_connections", "hyperpool_pool_waiting",
                 "hyperpool_client_connections", "hyperpool_pins_total", "hyperpool_cancels_total",
                 "hyperpool_pool_acquire_timeouts_total", "hyperpool_cache_evictions_total",
                 "hyperpool_cache_bytes"):
        if name not in types:
            fail(f"{name} missing")
    print("metrics_check: ok")


main()
