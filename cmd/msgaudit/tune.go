package main

import (
	"context"
	"fmt"
	"io"
)

// runTune is replaced by the tune subcommand's implementation.
func runTune(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "msgaudit tune: not built yet")
	return 1
}
