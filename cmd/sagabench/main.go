// Command sagabench measures sagad against a bare JetStream relay on one
// embedded nats-server and checks that every capsule finished exactly once.
// It exits 1 when a capsule was lost, duplicated or ended wrongly, 2 on
// bad flags or when it could not measure; speed targets are reported, not
// enforced. See BENCHMARKS.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"

	"github.com/sagad/sagad/cmd/internal/bench"
)

func main() {
	var cfg bench.Config
	var asJSON bool
	fs := flag.NewFlagSet("sagabench", flag.ExitOnError)
	fs.IntVar(&cfg.Capsules, "n", 5000, "capsules per system and round (warm-up excluded)")
	fs.IntVar(&cfg.Warmup, "warmup", 0, "warm-up capsules per system, not measured (default n/10, at most 1000; -1 for none)")
	fs.IntVar(&cfg.Window, "window", 200, "capsules in flight at most (the offered load, the same for both systems)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "publish this many capsules per second to both systems (open loop; default 0: a new one as each finishes, up to -window)")
	fs.IntVar(&cfg.Workers, "workers", 0, "sagad workers per phase (default sagad's, 64)")
	fs.IntVar(&cfg.RelayWorkers, "relay-workers", 0, "baseline workers per stage (default -1: a goroutine per message, the floor; N: a pool of N like a sagad phase)")
	fs.StringVar(&cfg.Mix, "mix", bench.MixMixed, `capsule mix: "mix" (80% valid, 10% two review cycles, 5% executor_failed, 5% spec_not_approved) or "valid"`)
	fs.IntVar(&cfg.Rounds, "rounds", 1, "alternate baseline and sagad this many times and report the median round")
	fs.IntVar(&cfg.Cluster, "cluster", 0, "run on an in-process JetStream cluster of this many nodes with every stream and bucket replicated on all (default 0: one server, R1)")
	fs.BoolVar(&cfg.SkipBaseline, "skip-baseline", false, "measure sagad alone")
	fs.BoolVar(&cfg.Floor, "floor", false, "also measure the saga floor: sagad's JetStream requests for a valid capsule (same kinds, sizes, order) with none of its logic")
	fs.BoolVar(&cfg.MemCheck, "memcheck", false, "memory flatness: sagad alone to -memcheck-first capsules, then on to -memcheck-total")
	fs.IntVar(&cfg.MemCheckFirst, "memcheck-first", 10_000, "first memory reading after this many capsules")
	fs.IntVar(&cfg.MemCheckTotal, "memcheck-total", 100_000, "second memory reading after this many capsules")
	fs.IntVar(&cfg.RoundTripSample, "roundtrips", 50, "capsules per class for the round-trip count (-1 to skip)")
	fs.StringVar(&cfg.DataDir, "data", "", "data directory (default: a temporary one, removed afterwards)")
	fs.StringVar(&cfg.Sync, "sync", "default", `server fsync policy, as sagad's --sync: "always", "default" (the server's 2m; every earlier figure) or a duration ("1s", sagad's default)`)
	var syncAlways bool
	fs.BoolVar(&syncAlways, "sync-always", false, "alias of -sync always")
	fs.DurationVar(&cfg.DuplicateWindow, "dup-window", 0, "experiment: sagad's JetStream de-duplication window (default: sagad's, 2m)")
	fs.DurationVar(&cfg.Retention, "retention", 0, "sagad's retention of ended capsules (default: sagad's, 168h; negative keeps them forever)")
	fs.DurationVar(&cfg.PhaseTimeout, "phase-timeout", 0, "experiment: sagad's phase timeout (default: sagad's, 10m)")
	fs.DurationVar(&cfg.StallTimeout, "stall", 0, "give up on capsules after this long without any outcome (default 60s)")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of the first measured round of the -profile system (sagad by default) to this file (with -memcheck: after the first reading; FILE.first before it)")
	fs.StringVar(&cfg.MemProfile, "memprofile", "", "write heap profiles after (FILE) and before (FILE.base) the measured rounds of the -profile system")
	fs.StringVar(&cfg.Profile, "profile", "sagad", `the system -cpuprofile and -memprofile cover: "sagad", "floor" (with -floor) or "baseline"`)
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON on stdout (progress goes to stderr)")
	fs.IntVar(&runtime.MemProfileRate, "memprofilerate", runtime.MemProfileRate, "bytes allocated per heap profile sample (smaller sees smaller holders, at some CPU)")
	_ = fs.Parse(os.Args[1:])
	if syncAlways {
		cfg.Sync = "always"
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var text io.Writer = os.Stdout
	if asJSON {
		text = os.Stderr
	}
	rep, err := bench.Run(ctx, cfg, text)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sagabench:", err)
		os.Exit(2)
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	}
	if !rep.ExactlyOnce() {
		fmt.Fprintln(os.Stderr, "sagabench: FAILED: a capsule was lost, duplicated or ended wrongly")
		os.Exit(1)
	}
}
