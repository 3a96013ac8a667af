package tune_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/tune"
)

// Replay sizes the audit for a synthetic trace whose answer is known: 4
// producers interleaved, every redelivery exactly 300 ids behind its
// producer's latest, so catching them all takes depth 300 and 4 producers.
func ExampleReplay() {
	var trace bytes.Buffer
	tune.Generate(context.Background(), &trace, tune.GenerateOptions{Producers: 4, Count: 4000, RedeliveryRate: 0.05,
		Distance: tune.Distribution{Kind: tune.Fixed, A: 300}, Seed: 1})
	tr, err := tune.Read(context.Background(), &trace, tune.ReadOptions{})
	if err != nil {
		panic(err)
	}
	r, err := tune.Replay(context.Background(), tr, tune.Options{Depths: []int{128, 300}, Caps: []int{3, 4}})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d messages, %d duplicates\n", r.Exact.Messages, r.Exact.Duplicates)
	fmt.Printf("need depth %d, max producers %d\n", r.NeedDepth, r.NeedCap)
	for _, c := range r.Cells {
		fmt.Printf("depth %d, cap %d: caught %d, missed %d too old + %d evicted\n",
			c.Depth, c.MaxProducers, c.Caught, c.MissedTooOld, c.MissedEvicted)
	}
	rec := r.Recommended
	fmt.Printf("recommended depth %d, max producers %d: caught %d\n", rec.Depth, rec.MaxProducers, rec.Caught)
	// Output:
	// 4140 messages, 140 duplicates
	// need depth 300, max producers 4
	// depth 128, cap 3: caught 0, missed 0 too old + 140 evicted
	// depth 128, cap 4: caught 0, missed 140 too old + 0 evicted
	// depth 300, cap 3: caught 0, missed 0 too old + 140 evicted
	// depth 300, cap 4: caught 140, missed 0 too old + 0 evicted
	// recommended depth 375, max producers 5: caught 140
}

// Bad lines are counted and reported with their line numbers.
func ExampleRead() {
	in := "ID:a-1-2-3:1:1:1:1\nnot an id at all\nID:a-1-2-3:1:1:1:01\n# comment\nID:a-1-2-3:1:1:1:1 /queue/orders\n"
	tr, err := tune.Read(context.Background(), strings.NewReader(in), tune.ReadOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d lines, %d records, %d bad, destinations %q\n", tr.Lines, len(tr.Records), tr.Bad, tr.Dests)
	for _, b := range tr.BadLines {
		fmt.Printf("line %d: %v\n", b.Line, b.Err)
	}
	// Output:
	// 5 lines, 2 records, 2 bad, destinations ["" "/queue/orders"]
	// line 2: 5 fields, want <id> [destination]
	// line 3: msgid: malformed id: "ID:a-1-2-3:1:1:1:01"
}

func ExampleGenerate() {
	d, err := tune.ParseDistribution("fixed:1")
	if err != nil {
		panic(err)
	}
	st, err := tune.Generate(context.Background(), os.Stdout, tune.GenerateOptions{Producers: 2, Count: 4, RedeliveryRate: 1, Distance: d})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d lines, %d redeliveries, %d skipped\n", st.Lines, st.Redeliveries, st.Skipped)
	// Output:
	// ID:host-41234-1700000000000-1:1:1:1:1
	// ID:host-41234-1700000000000-1:1:1:2:1
	// ID:host-41234-1700000000000-1:1:1:1:2
	// ID:host-41234-1700000000000-1:1:1:1:1
	// ID:host-41234-1700000000000-1:1:1:2:2
	// ID:host-41234-1700000000000-1:1:1:2:1
	// 6 lines, 2 redeliveries, 2 skipped
}
