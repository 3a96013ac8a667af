package tune_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/tune"
)

// FuzzRead: any input parses without panicking; every record is a line's
// id re-assembled exactly, and lines are either records, skipped or bad.
func FuzzRead(f *testing.F) {
	for _, s := range []string{
		"", "\n", "# c\n", "a:1\n", "a:1 /queue/x\r\n", "a:01\n", "a:1 b c\n", ":1\n", "a:\n",
		"ID:host-41234-1700000000000-1:1:1:1:1\nID:host-41234-1700000000000-1:1:1:1:1\n",
		"a:18446744073709551615\na:18446744073709551616\n", "\xff:1\n", "a:1\x00\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		tr, err := tune.Read(context.Background(), strings.NewReader(in), tune.ReadOptions{MaxBadLines: -1})
		if err != nil {
			t.Fatal(err)
		}
		if len(tr.Records)+tr.Bad > tr.Lines {
			t.Fatalf("%d records + %d bad > %d lines", len(tr.Records), tr.Bad, tr.Lines)
		}
		lines := strings.Split(strings.ReplaceAll(in, "\r\n", "\n"), "\n")
		for _, r := range tr.Records {
			id := tr.Keys[r.Key] + ":" + strconv.FormatUint(r.Seq, 10)
			f := strings.Fields(lines[r.Line-1])
			if f[0] != id || (len(f) == 2) != (tr.Dests[r.Dest] != "") || (len(f) == 2 && f[1] != tr.Dests[r.Dest]) {
				t.Fatalf("line %d %q: record %q dest %q", r.Line, lines[r.Line-1], id, tr.Dests[r.Dest])
			}
		}
		_, serr := tune.Read(context.Background(), strings.NewReader(in), tune.ReadOptions{Strict: true})
		if (serr == nil) != (tr.Bad == 0) {
			t.Fatalf("strict error %v with %d bad lines", serr, tr.Bad)
		}
	})
}

// FuzzParseDistribution: what parses prints back to itself.
func FuzzParseDistribution(f *testing.F) {
	for _, s := range []string{"fixed:0", "fixed:3000", "uniform:1-9", "exp:500", "exp:0", "uniform:9-1", "x:1", "fixed:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := tune.ParseDistribution(s)
		if err != nil {
			return
		}
		d2, err := tune.ParseDistribution(d.String())
		if err != nil || d2 != d {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, d, d.String(), d2, err)
		}
	})
}
