package main

import (
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// newBar returns a progress bar on w, or nil when quiet. The bar's methods
// are safe for concurrent use; a nil bar is never used.
func newBar(w io.Writer, quiet bool, total int, desc string) *progressbar.ProgressBar {
	if quiet {
		return nil
	}
	return progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
}
