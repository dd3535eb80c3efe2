#!/bin/sh
# bench-ab.sh OLD_REV [RUNS] [-- SAGABENCH FLAGS] — sagad's own cost, one
# build against another on the same machine in the same minutes.
#
# Builds cmd/sagabench at OLD_REV (in a temporary worktree) and at the work
# tree, then runs them alternately RUNS times each (default 5; old, new, new,
# old, ... so that neither always goes first) with
#   -floor -n 3000 -rounds 2 -window 200 -roundtrips -1
# or the flags given after --. Each run measures its own saga floor, so the
# figures compared are sagad / floor paired by round (throughput) and sagad's
# CPU per capsule over the floor's: the machine's drift (other processes)
# moves both systems of a run together. Prints every run's figures, then the
# median and the spread of each build.
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
trap 'git worktree remove --force "$tmp/src" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add --detach "$tmp/src" "$old" >/dev/null 2>&1
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
res = {"old": [], "new": []}
for i in range(runs):
    for b in ("old", "new"):
        try:
            d = json.load(open(f"{tmp}/{b}.{i}.json"))
        except Exception as e:
            print(f"{b} run {i}: no report ({e})")
            continue
        s, f = d["sagad"]["rounds"], d["floor"]["rounds"]
        thr = [x["capsules_per_second"] / y["capsules_per_second"] for x, y in zip(s, f)]
        cpu = [x["cpu_per_capsule_ns"] / y["cpu_per_capsule_ns"] for x, y in zip(s, f)]
        ok = all(d[k]["delivery"]["lost"] == 0 and d[k]["delivery"]["duplicates"] == 0 and d[k]["delivery"]["wrong"] == 0
                 for k in ("sagad", "floor"))
        r = dict(thr=statistics.median(thr), cpu=statistics.median(cpu),
                 sagad=statistics.median(x["capsules_per_second"] for x in s),
                 floor=statistics.median(y["capsules_per_second"] for y in f),
                 us=statistics.median(x["cpu_per_capsule_ns"] for x in s) / 1000,
                 fus=statistics.median(y["cpu_per_capsule_ns"] for y in f) / 1000)
        res[b].append(r)
        print(f"{b} run {i}: sagad/floor {r['thr']:.2f} x (sagad {r['sagad']:.0f}/s, floor {r['floor']:.0f}/s), "
              f"CPU per capsule {r['cpu']:.2f} x ({r['us']:.0f} / {r['fus']:.0f} us){'' if ok else ' DELIVERY CHECK FAILED'}")
for b in ("old", "new"):
    if not res[b]:
        continue
    t = [r["thr"] for r in res[b]]
    c = [r["cpu"] for r in res[b]]
    u = [r["us"] for r in res[b]]
    print(f"{b}: sagad/floor median {statistics.median(t):.2f} x ({min(t):.2f}-{max(t):.2f}), "
          f"CPU per capsule / floor's median {statistics.median(c):.2f} x ({min(c):.2f}-{max(c):.2f}), "
          f"sagad CPU per capsule median {statistics.median(u):.0f} us ({min(u):.0f}-{max(u):.0f})")
EOF
