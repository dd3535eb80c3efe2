// Command sagactl is the admin CLI of sagad: publish, inspect and steer
// capsules. See `sagactl --help` and README.md.
package main

import (
	"os"

	"github.com/sagad/sagad/cmd/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
