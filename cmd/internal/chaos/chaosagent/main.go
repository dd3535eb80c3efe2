// Command chaosagent is the executor of the chaos suite (package chaos): a
// command executor that appends one line per call, "<capsule_id> <cycle>
// <unix nanoseconds>", to the file named by CHAOS_CALLS, waits CHAOS_DELAY
// (so that kills land while calls are in flight), and answers ok.
//
// The line is written before anything else, with O_APPEND in one write, so
// a call cut short by a kill is still counted and lines never interleave.
package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "chaosagent:", err)
		os.Exit(1)
	}
}

func run() error {
	line := fmt.Sprintf("%s %s %d\n", os.Getenv("SAGA_CAPSULE_ID"), os.Getenv("SAGA_CYCLE"), time.Now().UnixNano())
	f, err := os.OpenFile(os.Getenv("CHAOS_CALLS"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, os.Stdin); err != nil {
		return err
	}
	if d, err := time.ParseDuration(os.Getenv("CHAOS_DELAY")); err == nil {
		time.Sleep(d)
	}
	_, err = fmt.Println(`{"status":"ok","content":{"chaos":true},"usage":{"tokens":10,"dollars":0.001}}`)
	return err
}
