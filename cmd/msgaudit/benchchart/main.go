// Command benchchart draws the chart of a "msgaudit bench" run: the cost
// of checking one new message id against the audit's depth and against
// the producers tracked, for every implementation measured (ActiveMQ's
// Java audits when they ran), from the JSON report that
// "msgaudit bench --json" writes, into a PNG file:
//
//	go run ./cmd/msgaudit bench --json bench.json
//	go run ./cmd/msgaudit/benchchart -o bench.png bench.json
//
// It is a module of its own so that the msgaudit command links no
// plotting library: only this command downloads and compiles one.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/benchreport"
)

const usage = `usage: benchchart [-o FILE] REPORT.json

Draws the inorder cost per check against depth and against producers
(log scales, every implementation of the report) from a report written
by "msgaudit bench --json", into a PNG file.

Flags:
`

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run is the command: 0 when the chart was written, 1 when it could not
// be, 2 on a bad command line.
func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("benchchart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	out := fs.String("o", "bench.png", "write the chart to `FILE` (PNG)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "benchchart: want one report (the JSON file msgaudit bench --json writes)\nrun 'benchchart -h' for usage")
		return 2
	}
	b, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "benchchart:", err)
		return 1
	}
	var rep benchreport.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		fmt.Fprintf(stderr, "benchchart: %s: %v\n", fs.Arg(0), err)
		return 1
	}
	if err := writeBenchPNG(*out, &rep); err != nil {
		fmt.Fprintln(stderr, "benchchart:", err)
		return 1
	}
	return 0
}
