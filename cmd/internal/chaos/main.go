package chaos

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Main is sagachaos: it parses args, runs the suite and returns the exit
// status: 0 when every scenario passed, 1 when one failed, 2 on bad usage
// or when the suite could not run.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sagachaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	fs.BoolVar(&cfg.Short, "short", false, "fewer capsules and faults per scenario (the CI version)")
	var names []string
	for _, s := range Scenarios {
		names = append(names, s.Name)
	}
	fs.StringVar(&cfg.Scenario, "scenario", "", "run only this scenario: "+strings.Join(names, ", "))
	fs.StringVar(&cfg.Dir, "dir", "", "keep binaries, data and logs here (default: a temporary directory, removed when all pass)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg.Log = stderr
	results, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	code := 0
	for _, r := range results {
		fmt.Fprintln(stdout, r)
		if !r.OK() {
			code = 1
		}
	}
	return code
}
