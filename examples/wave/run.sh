#!/usr/bin/env bash
# Waves, end to end against a running sagad (docs/WAVES.md):
#
#   1. a 3,000-token wave; five capsules of 1,000 tokens each (operator-gated,
#      so the admitted ones keep their reservations until accepted):
#      three are admitted and run, two wait (state waiting, wave_capacity);
#   2. the cap is raised to 5,000: the two waiting capsules go on by themselves;
#      all five are accepted and complete, and their unused reservations are
#      released (used 2,500, reserved 0);
#   3. a capsule bigger than what is left waits; closing the wave halts it
#      with wave_closed:<wave>.
#
# Run sagad from the repository root first (go run ./cmd/sagad), then
#   examples/wave/run.sh
# sagactl's connection settings apply (SAGA_NATS_URL, ...). WAVE names the
# wave (default: a new one per run); SAGACTL the sagactl to use.
set -euo pipefail
cd "$(dirname "$0")/../.."

tmp=$(mktemp -d)
# Each capsule targets (and locks) a file of its own in sagad's workspace,
# the repository root, so the five never contend for a lock.
work=examples/wave/.run-$$
mkdir -p "$work"
trap 'rm -rf "$tmp" "$work"' EXIT
if [[ -z "${SAGACTL:-}" ]]; then
	go build -o "$tmp/sagactl" ./cmd/sagactl
	SAGACTL="$tmp/sagactl"
fi
wave=${WAVE:-demo-$(date +%s)}

sagactl() { "$SAGACTL" "$@"; }
newid() { cat /proc/sys/kernel/random/uuid 2>/dev/null || uuidgen | tr '[:upper:]' '[:lower:]'; }
step() { printf '\n== %s\n' "$*"; }

# capsule ID TOKENS writes a capsule of the wave with a token cap of TOKENS;
# the stub executor and reviewer report 400 + 100 tokens.
capsule() {
	touch "$work/$1.txt"
	cat >"$tmp/$1.json" <<EOF
{
  "schema_version": "1.0",
  "capsule_id": "$1",
  "wave_id": "$wave",
  "created_at": "2030-01-01T00:00:00Z",
  "deadline": "2030-01-07T00:00:00Z",
  "producer_agent_id": "agent-coder-1",
  "task": {"kind": "stub", "title": "Wave demo", "description": "One capsule of the waves demo."},
  "spec": {
    "approved": true, "approved_by": "human-lead", "approved_at": "2029-12-31T00:00:00Z",
    "acceptance_criteria": ["the reviewer approves"],
    "problem_statement": "Show wave admission.", "definition_of_done": "The capsule completes."
  },
  "context_refs": ["file:go.mod"],
  "target": "file:$work/$1.txt",
  "constraints": {"resource_locks_required": ["$work/$1.txt"], "allowed_paths": ["."], "network": {"mode": "none"}, "destructive": false},
  "budget": {"tokens": $2, "dollars": 1},
  "review": {"reviewer_agent_id": "stub-reviewer", "max_cycles": 1, "operator_gate": true},
  "metadata": {"stub": {"usage": {"tokens": 400, "dollars": 0.01}, "review_usage": {"tokens": 100, "dollars": 0.01}}}
}
EOF
	sagactl publish --seal "$tmp/$1.json" >/dev/null
}

# state ID prints the capsule's state.
state() { sagactl status "$1" -o json | sed -n 's/^  "state": "\(.*\)",$/\1/p'; }

# await N STATE IDS... waits (up to about 30s) until N of the capsules are
# in STATE.
await() {
	local want=$1 st=$2 n i
	shift 2
	for ((i = 0; i < 150; i++)); do
		n=0
		for id in "$@"; do [[ "$(state "$id")" == "$st" ]] && n=$((n + 1)); done
		((n >= want)) && return 0
		sleep 0.2
	done
	echo "timed out waiting for $want capsules in state $st" >&2
	return 1
}

step "wave $wave: a cap of 3,000 tokens"
sagactl wave set "$wave" --tokens 3000 --reason "waves demo"

step "five capsules of 1,000 tokens each"
ids=()
for _ in 1 2 3 4 5; do
	id=$(newid)
	capsule "$id" 1000
	ids+=("$id")
	echo "published $id"
done
await 3 waiting_for_operator "${ids[@]}" # admitted, run, and wait for the operator gate
await 2 waiting "${ids[@]}"              # no room: waiting for the wave's capacity
for id in "${ids[@]}"; do printf '%s  %s\n' "$id" "$(state "$id")"; done
sagactl wave show "$wave"
sagactl list --state waiting

step "raise the cap to 5,000: the two waiting capsules go on by themselves"
sagactl wave set "$wave" --tokens 5000
await 5 waiting_for_operator "${ids[@]}"
for id in "${ids[@]}"; do sagactl decide "$id" accept --rationale "waves demo" >/dev/null; done
for id in "${ids[@]}"; do sagactl wait "$id" --timeout 30s >/dev/null && echo "$id completed"; done
sagactl wave show "$wave"

step "a 4,000-token capsule does not fit the 2,500 left: it waits; closing the wave halts it"
big=$(newid)
capsule "$big" 4000
await 1 waiting "$big"
sagactl wave close "$wave" --reason "waves demo over"
sagactl wait "$big" --timeout 30s || true # exit 1: halted wave_closed:<wave>
sagactl wave list
