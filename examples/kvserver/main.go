// Command kvserver is understudy's example key-value server: a member of a
// replicated KV cluster with an HTTP API (the library's public kv state
// machine: put, delete, compare-and-swap), membership endpoints, and
// Prometheus metrics.
//
//	go run ./examples/kvserver            # a one-member cluster on 127.0.0.1:8001
//	curl -X PUT localhost:8001/kv/a -d 1 && curl localhost:8001/kv/a
//
// See the README's walkthrough (three members, a learner that catches up and
// stays a standby, a voter lost and replaced) and docs/operations.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	os.Exit(mainExit(os.Args[1:]))
}

// mainExit runs the server and returns the process's exit code: 0 on a
// clean shutdown (SIGINT, SIGTERM), 2 for bad flags, 1 otherwise — always
// with a one-line reason on stderr.
func mainExit(args []string) int {
	opts, err := parseFlags(args)
	if err != nil {
		if errors.Is(err, errHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "kvserver: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts); err != nil {
		fmt.Fprintf(os.Stderr, "kvserver: %v\n", oneLine(err))
		return 1
	}
	return 0
}

// oneLine joins a (possibly joined, multi-line) error into one line.
func oneLine(err error) string {
	b := []byte(err.Error())
	for i, c := range b {
		if c == '\n' {
			b[i] = ';'
		}
	}
	return string(b)
}
