package main

import (
	"context"
	"fmt"
	"io"
)

// runDemo is replaced by the demo subcommand's implementation.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "msgaudit demo: not built yet")
	return 1
}
