package main

import (
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// newProgress returns a progress bar of max steps described by desc on w
// when w is a terminal or force is set (a -progress flag), and nil
// otherwise, so that a log file does not collect a carriage-return update
// per step. The bar's methods are safe for concurrent use; a nil bar must
// not be used.
func newProgress(w io.Writer, force bool, max int, desc string) *progressbar.ProgressBar {
	if !force && !isTerminal(w) {
		return nil
	}
	return progressbar.NewOptions(max,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
}

// isTerminal reports whether w is a file open on a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}
