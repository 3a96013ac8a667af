package tune

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/benchkit"
)

// DistKind is the shape of a redelivery-distance distribution.
type DistKind uint8

// The distribution shapes.
const (
	// Fixed: always A.
	Fixed DistKind = iota
	// Uniform: an integer drawn uniformly from [A, B].
	Uniform
	// Exponential: floor of an exponential variate with mean A.
	Exponential
)

// Distribution is a redelivery-distance distribution: how far below its
// producer's highest sequence a redelivered id lies.
type Distribution struct {
	Kind DistKind
	A, B uint64
}

// ParseDistribution parses "fixed:N", "uniform:A-B" (A <= B) or
// "exp:MEAN" (integers >= 0; MEAN > 0).
func ParseDistribution(s string) (Distribution, error) {
	kind, arg, ok := strings.Cut(s, ":")
	bad := func(why string) (Distribution, error) {
		return Distribution{}, fmt.Errorf("%w: %q: %s (want fixed:N, uniform:A-B or exp:MEAN)", ErrDistribution, s, why)
	}
	if !ok {
		return bad("no ':'")
	}
	num := func(x string) (uint64, bool) {
		n, err := strconv.ParseUint(x, 10, 64)
		return n, err == nil && n <= 1<<40
	}
	switch kind {
	case "fixed":
		n, ok := num(arg)
		if !ok {
			return bad("N is not an integer in 0..2^40")
		}
		return Distribution{Kind: Fixed, A: n}, nil
	case "uniform":
		a, b, ok := strings.Cut(arg, "-")
		x, ok1 := num(a)
		y, ok2 := num(b)
		if !ok || !ok1 || !ok2 || x > y {
			return bad("want A-B, integers, A <= B")
		}
		return Distribution{Kind: Uniform, A: x, B: y}, nil
	case "exp":
		n, ok := num(arg)
		if !ok || n == 0 {
			return bad("MEAN is not an integer in 1..2^40")
		}
		return Distribution{Kind: Exponential, A: n}, nil
	}
	return bad("unknown kind " + strconv.Quote(kind))
}

// String returns the form ParseDistribution accepts.
func (d Distribution) String() string {
	switch d.Kind {
	case Fixed:
		return fmt.Sprintf("fixed:%d", d.A)
	case Uniform:
		return fmt.Sprintf("uniform:%d-%d", d.A, d.B)
	case Exponential:
		return fmt.Sprintf("exp:%d", d.A)
	}
	return fmt.Sprintf("distribution(%d)", d.Kind)
}

func (d Distribution) sample(r *rand.Rand) uint64 {
	switch d.Kind {
	case Uniform:
		return d.A + r.Uint64N(d.B-d.A+1)
	case Exponential:
		return uint64(math.Floor(r.ExpFloat64() * float64(d.A)))
	}
	return d.A
}

// GenerateOptions configures Generate.
type GenerateOptions struct {
	// Producers interleave round-robin: message i comes from producer
	// i mod Producers. 0 means 64.
	Producers int
	// Count is the number of distinct messages; 0 means 100000.
	Count int
	// RedeliveryRate is the probability, after each message, of a
	// redelivery of an earlier message of the same producer, in [0, 1].
	RedeliveryRate float64
	// Distance is the redelivery distance: the redelivered sequence is the
	// producer's current sequence minus the distance (skipped when that
	// would be below 1). The zero value is fixed:0, an immediate
	// redelivery.
	Distance Distribution
	// Destinations, if > 0, adds a destination column: producer p sends to
	// "/queue/q<p mod Destinations>".
	Destinations int
	// Seed makes the trace reproducible.
	Seed uint64
}

// GenerateStats describes a generated trace.
type GenerateStats struct {
	// Lines written; Redeliveries of them are duplicates; Skipped counts
	// redeliveries drawn at a distance beyond the producer's history.
	Lines, Redeliveries, Skipped int
	// MaxDistance is the largest distance written.
	MaxDistance uint64
}

// Generate writes a synthetic trace to w: ids in the benchmark format
// ("ID:host-41234-1700000000000-1:1:1:<p>:<seq>", see internal/benchkit),
// one per line. Its answer is known by construction: with a fixed distance
// d >= 1 and P producers, catching every duplicate needs depth >= d and a
// producer cap >= P (per destination: ceil(P/Destinations)). It holds 8
// bytes per producer that has sent, so its memory is at most a fifth of
// what it has written. It stops with ctx's error when ctx is done.
func Generate(ctx context.Context, w io.Writer, o GenerateOptions) (GenerateStats, error) {
	if o.Producers == 0 {
		o.Producers = 64
	}
	if o.Count == 0 {
		o.Count = 100000
	}
	if o.Producers < 0 || o.Count < 0 || o.Destinations < 0 {
		return GenerateStats{}, fmt.Errorf("%w: producers %d, count %d, destinations %d must be >= 0", ErrOptions, o.Producers, o.Count, o.Destinations)
	}
	if !(o.RedeliveryRate >= 0 && o.RedeliveryRate <= 1) {
		return GenerateStats{}, fmt.Errorf("%w: redelivery rate %v not in [0,1]", ErrOptions, o.RedeliveryRate)
	}
	r := rand.New(rand.NewPCG(o.Seed, 0x6d736761756469))
	bw := bufio.NewWriter(w)
	// seq grows as producers first send: message i < Producers is
	// producer i's first.
	var seq []uint64
	var st GenerateStats
	var buf []byte
	var werr error // the first write error: stops the loop
	emit := func(p int, s uint64) {
		buf = append(buf[:0], benchkit.KeyPrefix...)
		buf = strconv.AppendInt(buf, int64(p)+1, 10)
		buf = append(buf, ':')
		buf = strconv.AppendUint(buf, s, 10)
		if o.Destinations > 0 {
			buf = append(buf, " /queue/q"...)
			buf = strconv.AppendInt(buf, int64(p%o.Destinations), 10)
		}
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			werr = err
		}
		st.Lines++
	}
	for i := range o.Count {
		if werr != nil {
			break
		}
		if i%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return st, err
			}
		}
		p := i % o.Producers
		if p == len(seq) {
			seq = append(seq, 0)
		}
		seq[p]++
		emit(p, seq[p])
		if o.RedeliveryRate > 0 && r.Float64() < o.RedeliveryRate {
			d := o.Distance.sample(r)
			if d >= seq[p] {
				st.Skipped++
				continue
			}
			emit(p, seq[p]-d)
			st.Redeliveries++
			st.MaxDistance = max(st.MaxDistance, d)
		}
	}
	if err := cmp.Or(werr, bw.Flush()); err != nil {
		return st, fmt.Errorf("tune: writing trace: %w", err)
	}
	return st, nil
}
