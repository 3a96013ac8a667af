// Command msgaudit runs the msgaudit demo, benchmarks and sizing tool.
//
//	msgaudit demo   [flags]   exactly-once demo under injected faults (the main job)
//	msgaudit bench  [flags]   benchmark matrix against baselines
//	msgaudit tune   [flags]   size the audit from a trace of message ids
//
// Run "msgaudit <command> -h" for a command's flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// command is one subcommand: run gets the arguments after its name and
// returns the process exit status.
type command struct {
	name  string
	short string
	run   func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"demo", "exactly-once demo under injected faults", runDemo},
		{"bench", "benchmark matrix against baselines", runBench},
		{"tune", "size the audit from a trace of message ids", runTune},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "msgaudit: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: msgaudit <command> [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-6s %s\n", c.name, c.short)
	}
}
