// Command sagachaos runs sagad's chaos suite (package cmd/internal/chaos) on
// loopback and exits non-zero unless every scenario lost, duplicated and
// left stuck no capsule and no live sagad repeated an agent call.
//
//	go run ./cmd/sagachaos [-short] [-scenario NAME] [-dir DIR]
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/sagad/sagad/cmd/internal/chaos"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(chaos.Main(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
