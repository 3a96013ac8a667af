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
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
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
	fmt.Fprintf(stderr, "msgaudit: unknown command %q\nrun 'msgaudit -h' for usage\n", args[0])
	return 2
}

// Exit statuses of every command.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and failed
	exitUsage   = 2 // bad command line: nothing was done
)

// parseFlags parses args into fs (named as the command) and reports
// whether the command should stop, with its exit status: -h prints the
// command's usage (fs.Usage) and stops with 0; a bad flag prints one line
// naming it and a pointer to -h, and stops with 2.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, stop bool) {
	// The flag package would print the whole usage on every error.
	usage := fs.Usage
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(stderr)
	switch {
	case err == nil:
		return exitOK, false
	case errors.Is(err, flag.ErrHelp):
		if usage != nil {
			usage()
		} else {
			fs.PrintDefaults()
		}
		return exitOK, true
	}
	return usageError(stderr, fs.Name(), "%v", err), true
}

// usageError prints "msgaudit <cmd>: <message>" and the pointer to the
// command's -h, and returns exitUsage.
func usageError(stderr io.Writer, cmd, format string, args ...any) int {
	fmt.Fprintf(stderr, "msgaudit %s: %s\nrun 'msgaudit %s -h' for usage\n", cmd, fmt.Sprintf(format, args...), cmd)
	return exitUsage
}

// failure prints "msgaudit <cmd>: <err>" without repeating a prefix the
// error already starts with (the tune package's "tune: "), and returns
// exitFailure.
func failure(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "msgaudit %s: %s\n", cmd, errText(cmd, err))
	return exitFailure
}

// errText is err's message without a leading "<cmd>: ", which the
// command's own prefix already says.
func errText(cmd string, err error) string {
	return strings.TrimPrefix(err.Error(), cmd+": ")
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: msgaudit <command> [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-6s %s\n", c.name, c.short)
	}
}
