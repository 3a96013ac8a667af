package main

import (
	"context"
	"fmt"
	"io"
)

// runBench is replaced by the bench subcommand's implementation.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "msgaudit bench: not built yet")
	return 1
}
