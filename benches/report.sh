#!/usr/bin/env bash
# Rerun the criterion suite with short warm-up and measurement times, then print a markdown
# report (medians, decisions per second, ratios against the C reference and against shmlimit,
# and the targets of the benchmark issue) on stdout. Criterion's own output goes to stderr.
#
#   benches/report.sh                   # the whole suite (about 10 minutes on 2 cores)
#   benches/report.sh 'contention'      # only groups matching a criterion filter (a regex)
#   benches/report.sh --table-only      # no run: tabulate the results already on disk
#
# Environment: CARGO_TARGET_DIR (default ./target), WARM_UP (s, default 0.5),
# MEASURE (s, default 2), SHMLIMIT_REDIS_URL (see docs/performance.md).
set -euo pipefail
cd "$(dirname "$0")/.."

target="${CARGO_TARGET_DIR:-target}"
stamp="$(mktemp)"
trap 'rm -f "$stamp"' EXIT

if [[ "${1:-}" == "--table-only" ]]; then
    since=0
    load_before=""
    command="(tabulated from results on disk)"
else
    filter=("$@")
    command="cargo bench --bench shmlimit -- --warm-up-time ${WARM_UP:-0.5} --measurement-time ${MEASURE:-2} --nresamples 20000 ${filter[*]:-}"
    touch "$stamp"
    since="$(stat -c %Y "$stamp")"
    load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
    cargo bench --bench shmlimit -- \
        --warm-up-time "${WARM_UP:-0.5}" --measurement-time "${MEASURE:-2}" --nresamples 20000 \
        "${filter[@]}" >&2
fi

echo "Run: $(date -u '+%Y-%m-%d %H:%M UTC'), \`${command% }\`, library at $(git rev-parse --short HEAD)$(git diff --quiet -- src || echo ' + uncommitted changes in src/'), $(nproc) CPUs, kernel $(uname -r)${load_before:+, load average $load_before before and $(cut -d' ' -f1-3 /proc/loadavg) after}"
echo

python3 - "$target/criterion" "$since" <<'PY'
import json
import os
import sys
from collections import defaultdict

root, since = sys.argv[1], float(sys.argv[2])

# (group, function, parameter) -> median ns per decision, from this run only; and the fastest
# sample's ns per decision, which other load on the machine can only make slower.
medians = {}
fastest = {}
for dirpath, _, files in os.walk(root):
    if os.path.basename(dirpath) != "new" or "estimates.json" not in files:
        continue
    est = os.path.join(dirpath, "estimates.json")
    # A second of slack: criterion rewrites the files as each benchmark ends.
    if os.path.getmtime(est) + 1 < since:
        continue
    with open(os.path.join(dirpath, "benchmark.json")) as f:
        bench = json.load(f)
    with open(est) as f:
        median = json.load(f)["median"]["point_estimate"]
    with open(os.path.join(dirpath, "sample.json")) as f:
        sample = json.load(f)
    key = (bench["group_id"], bench["function_id"] or "", bench["value_str"] or "")
    medians[key] = median
    fastest[key] = min(t / n for t, n in zip(sample["times"], sample["iters"]))

if not medians:
    sys.exit(f"no criterion results under {root} from this run")

def fmt_ns(ns):
    return f"{ns / 1000:.1f} µs" if ns >= 10_000 else f"{ns:.1f} ns"

def fmt_rate(ns):
    per_s = 1e9 / ns
    if per_s >= 1e6:
        return f"{per_s / 1e6:.2f} M/s"
    return f"{per_s / 1e3:.1f} k/s"

def fmt_ratio(x):
    if x is None:
        return "—"
    return f"{x:.0f}x" if x >= 100 else f"{x:.2f}x"

floor_ref = medians.get(("floor", "c_reference", ""))

groups = defaultdict(dict)
for (group, function, param), ns in medians.items():
    groups[group][(function, param)] = ns

ORDER = ["floor", "uncontended", "contention_threads", "contention_processes", "algorithm", "clock",
         "keyed", "composed", "hot_split", "concurrency", "c_abi"]

# Groups compared against one of their own benchmarks rather than shmlimit / the C reference.
def baseline(group):
    if group.startswith("keyed_"):
        return "unkeyed"
    if group == "composed":
        return "three_separate"
    if group == "concurrency":
        return "token_bucket"
    if group.startswith("c_abi_"):
        return "shmlimit"
    if group == "hot_split":
        return "1"
    return None

def rank(group):
    for i, prefix in enumerate(ORDER):
        if group.startswith(prefix):
            return (i, group)
    return (len(ORDER), group)

PREFERRED = [
    "shmlimit", "c_reference", "governor_monotonic", "governor_quanta", "mutex_in_process",
    "pthread_robust_shm", "flock", "redis_lua",
    "clock_monotonic", "clock_monotonic_coarse", "cas_local", "clock_and_cas",
    "token_bucket", "fixed_window", "sliding_window", "sliding_log_10", "sliding_log_100",
    "sliding_log_1000", "sliding_log_10000", "monotonic", "monotonic_coarse",
    "unkeyed", "keyed", "governor_unkeyed", "governor_keyed", "governor_keyed_quanta",
    "pingora_rate", "three_separate", "three_checks", "acquire_release",
    "keyed_acquire_release", "c_header",
    "python_ctypes_raw", "python_ctypes", "1", "2", "4",
]

def order(function):
    return (PREFERRED.index(function), "") if function in PREFERRED else (len(PREFERRED), function)

def sort_param(p):
    return (0, int(p)) if p.isdigit() else (1, p)

for group in sorted(groups, key=rank):
    rows = groups[group]
    params = sorted({p for _, p in rows}, key=sort_param)
    functions = sorted({f for f, _ in rows}, key=order)
    if group == "floor" and "c_reference" in functions:
        functions.remove("c_reference")
        functions.append("c_reference")
    print(f"### `{group}`\n")
    base = baseline(group)
    if "" in params and len(params) > 1:
        # Benchmarks with and without a parameter (keyed/<keys> beside unkeyed): one row each.
        b = rows.get((base, ""))
        bf = fastest.get((group, base, ""))
        print(f"| benchmark | median / decision | fastest sample | decisions/s | vs {base} (fastest) |")
        print("|---|---|---|---|---|")
        for function in functions:
            for p in params:
                if (function, p) not in rows:
                    continue
                ns, best = rows[(function, p)], fastest[(group, function, p)]
                ratio = f"{fmt_ratio(ns / b)} ({fmt_ratio(best / bf)})" if b else "—"
                label = f"{function}/{p}" if p else function
                print(f"| {label} | {fmt_ns(ns)} | {fmt_ns(best)} | {fmt_rate(ns)} | {ratio} |")
    elif params == [""] and base:
        b = rows.get((base, ""))
        bf = fastest.get((group, base, ""))
        print(f"| benchmark | median / decision | fastest sample | decisions/s | vs {base} (fastest) |")
        print("|---|---|---|---|---|")
        for function in functions:
            ns, best = rows[(function, "")], fastest[(group, function, "")]
            ratio = f"{fmt_ratio(ns / b)} ({fmt_ratio(best / bf)})" if b else "—"
            print(f"| {function} | {fmt_ns(ns)} | {fmt_ns(best)} | {fmt_rate(ns)} | {ratio} |")
    elif base:
        print("Decisions per second in total (median; fastest sample in parentheses), by workers:\n")
        print("| benchmark | " + " | ".join(params) + " |")
        print("|---|" + "---|" * len(params))
        for function in functions:
            cells = [f"{fmt_rate(rows[(function, p)])} ({fmt_rate(fastest[(group, function, p)])})"
                     if (function, p) in rows else "—" for p in params]
            print(f"| {function} | " + " | ".join(cells) + " |")
        print(f"\nDecisions/s over {base}'s (> 1: more decisions per second), medians (fastest samples):\n")
        print("| benchmark | " + " | ".join(params) + " |")
        print("|---|" + "---|" * len(params))
        for function in functions:
            cells = []
            for p in params:
                ns, b = rows.get((function, p)), rows.get((base, p))
                nf, bf = fastest.get((group, function, p)), fastest.get((group, base, p))
                cells.append(f"{fmt_ratio(b / ns)} ({fmt_ratio(bf / nf)})" if ns and b else "—")
            print(f"| {function} | " + " | ".join(cells) + " |")
    elif params == [""]:
        ref = rows.get(("c_reference", "")) or floor_ref
        ref_name = "C ref" if ("c_reference", "") in rows else "C ref (floor)"
        shm = rows.get(("shmlimit", ""))
        head = f"| benchmark | median / decision | fastest sample | decisions/s | vs {ref_name} |"
        if shm:
            head += " shmlimit faster by |"
        print(head)
        print("|" + "---|" * (head.count("|") - 1))
        for function in functions:
            ns = rows[(function, "")]
            best = fastest[(group, function, "")]
            line = f"| {function} | {fmt_ns(ns)} | {fmt_ns(best)} | {fmt_rate(ns)} | {fmt_ratio(ns / ref) if ref else '—'} |"
            if shm:
                line += f" {fmt_ratio(ns / shm)} |"
            print(line)
    else:
        print("Decisions per second in total (median), by workers:\n")
        print("| contender | " + " | ".join(params) + " |")
        print("|---|" + "---|" * len(params))
        for function in functions:
            cells = [fmt_rate(rows[(function, p)]) if (function, p) in rows else "—" for p in params]
            print(f"| {function} | " + " | ".join(cells) + " |")
        if not any(f in ("shmlimit", "c_reference") for f in functions):
            print()
            continue
        print("\nshmlimit's decisions/s divided by the contender's (> 1: shmlimit faster); "
              "for shmlimit itself, its time per decision over the C reference's:\n")
        print("| contender | " + " | ".join(params) + " |")
        print("|---|" + "---|" * len(params))
        for function in functions:
            cells = []
            for p in params:
                ns, shm, ref = rows.get((function, p)), rows.get(("shmlimit", p)), rows.get(("c_reference", p))
                if ns is None:
                    cells.append("—")
                elif function == "shmlimit":
                    cells.append(f"{fmt_ratio(ns / ref)} of C" if ref else "—")
                else:
                    cells.append(fmt_ratio(ns / shm) if shm else "—")
            print(f"| {function} | " + " | ".join(cells) + " |")
    print()

# The targets of the benchmark issue, checked against this run.
def get(group, function, param=""):
    return medians.get((group, function, param))

def best(group, function, param=""):
    return fastest.get((group, function, param))

def both(a, b, fmt="{:.2f}x"):
    """A ratio of medians, with the ratio of fastest samples in parentheses."""
    ra = a[0] / a[1] if a[0] and a[1] else None
    rb = b[0] / b[1] if b[0] and b[1] else None
    if ra is None:
        return None, None
    return ra, fmt.format(ra) + (f" ({fmt.format(rb)})" if rb else "")

checks = []
def check(what, value, target, ok):
    if value is None:
        checks.append((what, "not measured", target, "—"))
    else:
        checks.append((what, value, target, "met" if ok else "missed"))

for workload in ("admit", "deny"):
    for k in ("1", "2", "8"):
        g = f"contention_processes_{workload}"
        r, text = both((get(g, "shmlimit", k), get(g, "c_reference", k)), (best(g, "shmlimit", k), best(g, "c_reference", k)))
        check(f"shmlimit time / C reference time, {k} process(es), {workload}", text, "<= 1.10x", r is not None and r <= 1.10)
    g = f"uncontended_token_bucket_{workload}"
    r, text = both((get(g, "shmlimit"), get(g, "c_reference")), (best(g, "shmlimit"), best(g, "c_reference")))
    check(f"shmlimit time / C reference time, uncontended, {workload}", text, "<= 1.10x", r is not None and r <= 1.10)
    r, text = both((get(g, "shmlimit"), get(g, "governor_monotonic")), (best(g, "shmlimit"), best(g, "governor_monotonic")))
    check(f"shmlimit time / governor time (same clock), {workload}", text, "<= 1.20x", r is not None and r <= 1.20)
for peer, target in (("pthread_robust_shm", 4), ("flock", 20), ("redis_lua", 1000)):
    ratios = []
    g = "contention_processes_admit"
    for k in ("2", "4", "8"):
        r, text = both((get(g, peer, k), get(g, "shmlimit", k)), (best(g, peer, k), best(g, "shmlimit", k)), "{:.1f}x")
        if r is not None:
            ratios.append((r, k, text))
    worst = min(ratios) if ratios else None
    check(f"shmlimit decisions/s over {peer}'s, 2-8 processes, admit (worst k)",
          worst and f"{worst[2]} at {worst[1]}", f">= {target}x", worst is not None and worst[0] >= target)
for workload in ("admit", "deny"):
    g = f"clock_source_{workload}"
    coarse = get(g, "monotonic_coarse")
    check(f"uncontended decision, coarse clock, {workload}",
          coarse and f"{fmt_ns(coarse)} ({fmt_ns(best(g, 'monotonic_coarse'))})", "< 15 ns", coarse is not None and coarse < 15)
for workload in ("admit", "deny"):
    g = f"algorithm_{workload}"
    r, text = both((get(g, "sliding_log_10000"), get(g, "sliding_log_10")), (best(g, "sliding_log_10000"), best(g, "sliding_log_10")))
    check(f"sliding log time L=10,000 / L=10, {workload}", text, "<= 2x", r is not None and r <= 2)

for access in ("uniform", "zipf"):
    g = f"keyed_token_bucket_{access}"
    r, text = both((get(g, "keyed", "1000000"), get(g, "unkeyed")), (best(g, "keyed", "1000000"), best(g, "unkeyed")))
    check(f"keyed decision at 1,000,000 keys / unkeyed decision, {access}", text, "<= 2x", r is not None and r <= 2)

# The targets of the typed-handle issue (#14), in the same run.
checks14 = []
def check14(what, value, target, ok):
    if value is None:
        checks14.append((what, "not measured", target, "—"))
    else:
        checks14.append((what, value, target, "met" if ok else "missed"))

for workload in ("admit", "deny"):
    g = f"uncontended_token_bucket_{workload}"
    r, text = both((get(g, "shmlimit"), get(g, "c_reference")), (best(g, "shmlimit"), best(g, "c_reference")))
    check14(f"shmlimit time / C reference time, uncontended, {workload}", text, "<= 1.05x", r is not None and r <= 1.05)
    r, text = both((get(g, "shmlimit"), get(g, "governor_monotonic")), (best(g, "shmlimit"), best(g, "governor_monotonic")))
    check14(f"shmlimit time / governor time (same clock), {workload}", text, "<= 1.00x", r is not None and r <= 1.0)
r, text = both((get("composed", "three_checks"), get("composed", "three_separate")),
               (best("composed", "three_checks"), best("composed", "three_separate")))
check14("try_acquire_all of three / three separate try_acquire", text, "<= 0.90x", r is not None and r <= 0.9)
for keys in ("1", "1000"):
    g = "keyed_token_bucket_uniform"
    r, text = both((get(g, "keyed", keys), get(g, "unkeyed")), (best(g, "keyed", keys), best(g, "unkeyed")))
    check14(f"keyed decision at {int(keys):,} key(s) / unkeyed, uniform", text, "<= 1.5x", r is not None and r <= 1.5)
# The floor of a keyed decision at 1,000,000 keys: one dependent random 16-byte read-and-CAS in
# a mapping the size of that table (`floor/keyed_slot_cas_1000000`).
g = "keyed_token_bucket_uniform"
keyed, unkeyed, slot = get(g, "keyed", "1000000"), get(g, "unkeyed"), get("floor", "keyed_slot_cas_1000000")
if keyed and unkeyed and slot:
    bound = unkeyed + 1.3 * slot
    fast = best(g, "keyed", "1000000"), best(g, "unkeyed"), best("floor", "keyed_slot_cas_1000000")
    extra = f"; fastest {fmt_ns(fast[0])} vs {fmt_ns(fast[1] + 1.3 * fast[2])}" if all(fast) else ""
    check14("keyed decision at 1,000,000 keys, uniform, against unkeyed + 1.3 x floor",
            f"{fmt_ns(keyed)} vs {fmt_ns(unkeyed)} + 1.3 x {fmt_ns(slot)} = {fmt_ns(bound)}{extra}",
            "<= unkeyed + 1.3 x floor", keyed <= bound)
else:
    check14("keyed decision at 1,000,000 keys, uniform, against unkeyed + 1.3 x floor", None,
            "<= unkeyed + 1.3 x floor", False)

# Keyed contenders side by side, and the keyed targets of the one-engine issue (#27).
KEYED_PEERS = ["governor_keyed", "governor_keyed_quanta", "pingora_rate"]
checks27 = []
for access in ("uniform", "zipf"):
    g = f"keyed_token_bucket_{access}"
    counts = sorted({p for (gr, f, p) in medians if gr == g and f == "keyed" and p}, key=sort_param)
    if not counts:
        continue
    peers = [f for f in KEYED_PEERS if any((g, f, k) in medians for k in counts)]
    print(f"### Keyed contenders, {access}\n")
    print("Median per decision (fastest sample); ratios of medians (of fastest samples). "
          "`unkeyed` is shmlimit's plain decision on the same bucket"
          + (f" ({fmt_ns(get(g, 'unkeyed'))})" if get(g, "unkeyed") else "") + ".\n")
    head = ["keys", "shmlimit keyed"] + peers + [f"keyed / {f}" for f in peers] + ["keyed / unkeyed"]
    print("| " + " | ".join(head) + " |")
    print("|---" * len(head) + "|")
    for k in counts:
        cells = [f"{int(k):,}"]
        for f in ["keyed"] + peers:
            ns = get(g, f, k)
            cells.append(f"{fmt_ns(ns)} ({fmt_ns(best(g, f, k))})" if ns else "—")
        for f in peers + ["unkeyed"]:
            p = "" if f == "unkeyed" else k
            _, text = both((get(g, "keyed", k), get(g, f, p)), (best(g, "keyed", k), best(g, f, p)))
            cells.append(text or "—")
        print("| " + " | ".join(cells) + " |")
    print()
    if access != "uniform":
        continue
    for k, peer_goal, unkeyed_goal in (("1", 0.5, 1.3), ("1000", 0.5, 1.3), ("1000000", 0.8, None)):
        r, text = both((get(g, "keyed", k), get(g, "governor_keyed", k)),
                       (best(g, "keyed", k), best(g, "governor_keyed", k)))
        checks27.append((f"keyed decision at {int(k):,} key(s) / governor's keyed (same clock), uniform",
                         text or "not measured", f"<= {peer_goal}x",
                         "—" if r is None else ("met" if r <= peer_goal else "missed")))
        if unkeyed_goal:
            r, text = both((get(g, "keyed", k), get(g, "unkeyed")), (best(g, "keyed", k), best(g, "unkeyed")))
            checks27.append((f"keyed decision at {int(k):,} key(s) / unkeyed, uniform",
                             text or "not measured", f"<= {unkeyed_goal}x",
                             "—" if r is None else ("met" if r <= unkeyed_goal else "missed")))
    keyed, unkeyed, slot = get(g, "keyed", "1000000"), get(g, "unkeyed"), get("floor", "keyed_slot_cas_1000000")
    if keyed and unkeyed and slot:
        bound = unkeyed + 1.3 * slot
        checks27.append(("keyed decision at 1,000,000 keys, uniform, against unkeyed + 1.3 x floor",
                         f"{fmt_ns(keyed)} vs {fmt_ns(unkeyed)} + 1.3 x {fmt_ns(slot)} = {fmt_ns(bound)}",
                         "<= unkeyed + 1.3 x floor", "met" if keyed <= bound else "missed"))
if checks27:
    print("### Keyed targets of the one-engine issue\n")
    print("Ratios of medians; in parentheses the same ratio of the fastest samples.\n")
    print("| target | measured | goal | |")
    print("|---|---|---|---|")
    for what, value, target, verdict in checks27:
        print(f"| {what} | {value} | {target} | {verdict} |")
    print()

print("### Targets of the typed-handle issue\n")
print("Ratios of medians; in parentheses the same ratio of the fastest samples. Instructions per "
      "decision: `benches/instructions.sh`; library dependencies: `cargo tree -e normal -p shmlimit`.\n")
print("| target | measured | goal | |")
print("|---|---|---|---|")
for what, value, target, verdict in checks14:
    print(f"| {what} | {value} | {target} | {verdict} |")
print()

print("### Targets\n")
print("Ratios of medians; in parentheses the same ratio of the fastest samples, which load from "
      "other processes on the machine can only make slower.\n")
print("| target | measured | goal | |")
print("|---|---|---|---|")
for what, value, target, verdict in checks:
    print(f"| {what} | {value} | {target} | {verdict} |")
PY
