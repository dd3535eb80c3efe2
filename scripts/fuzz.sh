#!/bin/sh
# fuzz.sh [DURATION] [REGEXP] — fuzz every Fuzz target of the module for
# DURATION each (default 30s), or only those whose name matches REGEXP.
#
# `go test` fuzzes one target per run, so this loops over every
# `func FuzzX(f *testing.F)` in the *_test.go files, package by package. A
# failing input is written to that package's testdata/fuzz/FuzzX/ (commit it:
# `go test` then replays it on every run); the script goes on with the other
# targets and exits 1 at the end if any failed. Plain `go test ./...` runs
# every target's seed corpus without fuzzing.
set -u
cd "$(dirname "$0")/.." || exit 2
time=${1:-30s}
only=${2:-.}
# Minimising each new interesting input (not only failures) may take the
# default 60s, which with large seeds (whole capsules) eats short runs.
minimize=${FUZZ_MINIMIZE_TIME:-5s}
failed=""
for dir in $(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do
	for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$dir"/*_test.go | grep -E -- "$only" | sort -u); do
		echo "== $dir $target ($time)"
		if ! go test -run='^$' -fuzz="^$target\$" -fuzztime="$time" -fuzzminimizetime="$minimize" "$dir"; then
			failed="$failed $dir:$target"
		fi
	done
done
if [ -n "$failed" ]; then
	echo "FAILED:$failed (inputs under testdata/fuzz/)" >&2
	exit 1
fi
echo "all fuzz targets passed"
