#!/bin/sh
# bench-ab.sh OLD_REV [RUNS] [-- SAGABENCH FLAGS] — sagad's own cost, one
# build against another on the same machine in the same minutes.
#
# Builds cmd/sagabench at OLD_REV (a temporary copy) and at the work
# tree, then runs them alternately RUNS times each (default 5; old, new, new,
# old, ... so that neither always goes first) with
#   -floor -n 3000 -rounds 2 -window 200 -roundtrips -1
# or the flags given after -- (FLOOR=new: both against the work tree's
# floor). Each run measures its own saga floor, so the
# figures compared are sagad / floor paired by round (throughput) and sagad's
# CPU per capsule over the floor's: the machine's drift (other processes)
# moves both systems of a run together. Prints every run's figures, then the
# median and the spread of each build. The ratios to the floor and the relay
# are left out when they did not run: `-- -skip-baseline -n 3000 -rounds 2
# -roundtrips -1` compares sagad's own CPU per capsule alone.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 OLD_REV [RUNS] [-- sagabench flags]" >&2; exit 2; }
old=$1
shift
runs=5
if [ $# -ge 1 ] && [ "$1" != "--" ]; then runs=$1; shift; fi
[ $# -ge 1 ] && [ "$1" = "--" ] && shift
[ $# -ge 1 ] || set -- -floor -n 3000 -rounds 2 -window 200 -roundtrips -1
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/src"
git archive "$old" | tar -x -C "$tmp/src"
# FLOOR=new measures the old build against the work tree's floor, so that a
# floor brought up to date with sagad's requests moves neither build.
if [ "${FLOOR:-}" = new ]; then cp cmd/internal/bench/floor.go "$tmp/src/cmd/internal/bench/floor.go"; fi
(cd "$tmp/src" && go build -o "$tmp/old" ./cmd/sagabench)
go build -o "$tmp/new" ./cmd/sagabench
i=0
while [ $i -lt "$runs" ]; do
	if [ $((i % 2)) -eq 0 ]; then order="old new"; else order="new old"; fi
	for b in $order; do
		"$tmp/$b" -json "$@" 2>/dev/null >"$tmp/$b.$i.json" || echo "# $b run $i exited $?" >&2
	done
	i=$((i + 1))
done
python3 - "$tmp" "$runs" <<'EOF'
import json, statistics, sys
tmp, runs = sys.argv[1], int(sys.argv[2])
med = statistics.median
res = {"old": [], "new": []}
for i in range(runs):
    for b in ("old", "new"):
        try:
            d = json.load(open(f"{tmp}/{b}.{i}.json"))
        except Exception as e:
            print(f"{b} run {i}: no report ({e})")
            continue
        rounds = {k: (d.get(k) or {}).get("rounds") or [] for k in ("sagad", "floor", "baseline")}
        s, f, rl = rounds["sagad"], rounds["floor"], rounds["baseline"]
        ok = all(d[k]["delivery"]["lost"] == 0 and d[k]["delivery"]["duplicates"] == 0 and d[k]["delivery"]["wrong"] == 0
                 for k in ("sagad", "floor", "baseline") if d.get(k))
        nan = float("nan")
        r = dict(sagad=med(x["capsules_per_second"] for x in s), us=med(x["cpu_per_capsule_ns"] for x in s) / 1000,
                 thr=med(x["capsules_per_second"] / y["capsules_per_second"] for x, y in zip(s, f)) if f else nan,
                 cpu=med(x["cpu_per_capsule_ns"] / y["cpu_per_capsule_ns"] for x, y in zip(s, f)) if f else nan,
                 fus=med(y["cpu_per_capsule_ns"] for y in f) / 1000 if f else nan,
                 rel=med(x["capsules_per_second"] / y["capsules_per_second"] for x, y in zip(s, rl)) if rl else nan)
        res[b].append(r)
        out = f"{b} run {i}: sagad {r['sagad']:.0f}/s, {r['us']:.0f} us per capsule"
        if f:
            out += f"; sagad/floor {r['thr']:.2f} x, CPU per capsule / floor's {r['cpu']:.2f} x ({r['fus']:.0f} us)"
        if rl:
            out += f"; sagad/relay {r['rel']:.2f} x"
        print(out + ("" if ok else "; DELIVERY CHECK FAILED"))
for b in ("old", "new"):
    if not res[b]:
        continue
    line = [f"{b}: {len(res[b])} runs"]
    for k, name in (("thr", "sagad/floor"), ("cpu", "CPU per capsule / floor's"), ("rel", "sagad/relay"), ("us", "sagad us per capsule")):
        v = [r[k] for r in res[b] if r[k] == r[k]]
        if v:
            line.append(f"{name} median {med(v):.2f} ({min(v):.2f}-{max(v):.2f})")
    print(", ".join(line))
EOF
