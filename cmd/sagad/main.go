// Command sagad drives capsules through the seven-phase saga on NATS
// JetStream. Run it with no flags to start an embedded NATS server; see
// `sagad -h` and README.md.
package main

import (
	"os"

	"github.com/sagad/sagad/cmd/internal/daemon"
)

func main() { os.Exit(daemon.Main(os.Args[1:], os.Stdout, os.Stderr)) }
