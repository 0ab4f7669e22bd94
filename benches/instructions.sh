#!/usr/bin/env bash
# Instructions per decision, counted by callgrind on the criterion bench binary: deterministic
# where wall-clock medians on a shared machine are not. Prints a markdown table on stdout.
#
#   benches/instructions.sh                 # the uncontended decision and the composed check
#   benches/instructions.sh 'REGEX' ...     # other single-process benchmarks (criterion ids)
#
# Instructions per decision = inclusive instructions of criterion's measured loop
# (`Bencher::iter`, in `--profile-time` mode) over the decisions it made, counted as its calls
# of `clock_gettime` (one per decision, except `composed/three_checks`: one per composed check
# of three limits, and `composed/three_separate`: three). They include criterion's loop (about
# 4) and glibc's `clock_gettime` entry as valgrind runs it (10; the vDSO read itself is not
# counted). Needs valgrind (`apt-get install -y valgrind`).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install -y valgrind)" >&2; exit 1; }

# The bench binary of the current sources (touch: cargo's fingerprints go by mtime).
touch src/lib.rs
bin="$(cargo bench --no-run --bench shmlimit 2>&1 | sed -n 's/.*Executable benches\/main.rs (\(.*\))$/\1/p' | tail -1)"
[[ -x "$bin" ]] || { echo "no bench binary found" >&2; exit 1; }

if [[ $# -gt 0 ]]; then
    ids=("$@")
else
    ids=(
        'uncontended_token_bucket_admit/shmlimit'
        'uncontended_token_bucket_admit/c_reference'
        'uncontended_token_bucket_deny/shmlimit'
        'uncontended_token_bucket_deny/c_reference'
        'composed/three_checks'
        'composed/three_separate'
    )
fi

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
echo "Run: $(date -u '+%Y-%m-%d %H:%M UTC'), library at $(git rev-parse --short HEAD)$(git diff --quiet -- src || echo ' + uncommitted changes in src/'), \`benches/instructions.sh\`"
echo
echo "| benchmark | instructions per call | decisions per call |"
echo "|---|---:|---:|"
for id in "${ids[@]}"; do
    file="$out/cg.$(echo "$id" | tr '/' '_')"
    valgrind --tool=callgrind --callgrind-out-file="$file" "$bin" --bench --profile-time 1 "^${id}\$" \
        >/dev/null 2>&1
    python3 - "$file" "$id" <<'PY'
import re, subprocess, sys
path, bench = sys.argv[1], sys.argv[2]
text = subprocess.run(["callgrind_annotate", "--inclusive=yes", path],
                      capture_output=True, text=True, check=True).stdout
loop = clock = None
for line in text.splitlines():
    m = re.match(r"\s*([\d,]+)\s", line)
    if not m:
        continue
    value = int(m.group(1).replace(",", ""))
    if loop is None and "Bencher<M>::iter [" in line:
        loop = value
    if clock is None and "clock_gettime@@" in line:
        clock = value
if not loop or not clock:
    print(f"| {bench} | not measured | |")
    sys.exit(0)
# glibc's clock_gettime entry is 10 instructions under valgrind: its inclusive count / 10 is
# the number of reads.
reads = clock / 10
per_call = {"composed/three_checks": 1, "composed/three_separate": 3}.get(bench, 1)
calls = reads / per_call
decisions = 3 if bench.startswith("composed/") else 1
print(f"| {bench} | {loop / calls:.1f} | {decisions} |")
PY
done
