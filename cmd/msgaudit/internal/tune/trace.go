package tune

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/acemq/msgaudit/audit"
	"github.com/acemq/msgaudit/msgid"
)

// maxLine is the longest trace line Read accepts; longer lines are bad.
const maxLine = 64 << 10

// maxRecords bounds a trace: record indexes are kept as int32.
const maxRecords = math.MaxInt32

// DefaultMaxBadLines is how many bad lines Read keeps for reporting when
// ReadOptions.MaxBadLines is 0. All of them are counted.
const DefaultMaxBadLines = 20

// Record is one message of a trace. Strings are interned in the Trace.
type Record struct {
	// Line is the 1-based line number in the input.
	Line int
	// Dest indexes Trace.Dests; Key indexes Trace.Keys.
	Dest, Key uint32
	// Stream indexes the trace's (destination, producer) pairs: the unit
	// that has one window in an audit.
	Stream uint32
	// Seq is the producer sequence number.
	Seq uint64
}

// BadLine is one line Read could not use.
type BadLine struct {
	Line int
	// Text is the line, truncated to 64 bytes.
	Text string
	Err  error
}

// Trace is a parsed trace, kept compactly: producer keys and destinations
// are interned, so a record is 32 bytes.
type Trace struct {
	// Keys are the distinct producer keys, Dests the distinct destinations
	// ("" when lines have no destination column), in order of appearance.
	Keys, Dests []string
	Records     []Record
	// Lines counts the lines read, Bad the bad ones; BadLines keeps the
	// first ReadOptions.MaxBadLines of them.
	Lines, Bad int
	BadLines   []BadLine

	// streams maps (dest, key) to a Record.Stream; streamKey is the reverse.
	streams   map[[2]uint32]uint32
	streamKey [][2]uint32
	// keyIndex maps a producer key to its index in Keys; with streams, it
	// finds a stream from an audit's eviction callback.
	keyIndex map[string]uint32
}

// stream returns the stream of producer key on destination dest.
func (t *Trace) stream(dest uint32, key string) uint32 {
	return t.streams[[2]uint32{dest, t.keyIndex[key]}]
}

// Streams returns the number of distinct (destination, producer) pairs.
func (t *Trace) Streams() int { return len(t.streamKey) }

// ReadOptions configures Read.
type ReadOptions struct {
	// Strict makes the first bad line fatal (an error wrapping ErrBadLine).
	Strict bool
	// MaxBadLines is how many bad lines to keep in Trace.BadLines; 0 means
	// DefaultMaxBadLines, negative keeps none. All are counted in Bad.
	MaxBadLines int
	// MaxIDLength rejects longer ids as bad lines; 0 means
	// audit.DefaultMaxIDLength (what the audit itself accepts).
	MaxIDLength int
}

// Read parses a trace. Only read errors, bad lines in strict mode, and
// ctx's error are returned as errors. Read returns as soon as ctx is done,
// even while r blocks: r is read on a goroutine of its own, which then
// ends with the Read call on r in progress (its data is dropped).
func Read(ctx context.Context, r io.Reader, o ReadOptions) (*Trace, error) {
	keep := o.MaxBadLines
	if keep == 0 {
		keep = DefaultMaxBadLines
	}
	limit := o.MaxIDLength
	if limit <= 0 {
		limit = audit.DefaultMaxIDLength
	}
	t := &Trace{streams: map[[2]uint32]uint32{}, keyIndex: map[string]uint32{}}
	dests := map[string]uint32{}
	intern := func(m map[string]uint32, list *[]string, s string) uint32 {
		if i, ok := m[s]; ok {
			return i
		}
		s = strings.Clone(s) // do not pin the line buffer
		i := uint32(len(*list))
		m[s] = i
		*list = append(*list, s)
		return i
	}
	bad := func(line int, text string, err error) error {
		t.Bad++
		if o.Strict {
			return fmt.Errorf("%w: line %d: %v", ErrBadLine, line, err)
		}
		if len(t.BadLines) < keep {
			t.BadLines = append(t.BadLines, BadLine{Line: line, Text: msgid.Truncate(text), Err: err})
		}
		return nil
	}
	br := bufio.NewReaderSize(&ctxReader{ctx: ctx, r: r, res: make(chan ctxRead, 1)}, 64<<10)
	var long []byte
	for {
		chunk, isPrefix, err := br.ReadLine()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("tune: reading trace after line %d: %w", t.Lines, err)
		}
		if isPrefix || long != nil {
			// A line longer than the reader's buffer: collect up to
			// maxLine bytes, then judge it whole.
			if len(long) <= maxLine {
				long = append(long, chunk...)
			}
			if isPrefix {
				continue
			}
			chunk, long = long, nil
		}
		t.Lines++
		line := string(chunk)
		if len(chunk) > maxLine {
			if err := bad(t.Lines, line, fmt.Errorf("line longer than %d bytes", maxLine)); err != nil {
				return nil, err
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) > 2 {
			if err := bad(t.Lines, line, fmt.Errorf("%d fields, want <id> [destination]", len(f))); err != nil {
				return nil, err
			}
			continue
		}
		key, seq, err := msgid.SplitLimit(f[0], limit)
		if err != nil {
			if err := bad(t.Lines, line, err); err != nil {
				return nil, err
			}
			continue
		}
		dest := ""
		if len(f) == 2 {
			dest = f[1]
		}
		rec := Record{Line: t.Lines, Dest: intern(dests, &t.Dests, dest), Key: intern(t.keyIndex, &t.Keys, key), Seq: seq}
		sk := [2]uint32{rec.Dest, rec.Key}
		s, ok := t.streams[sk]
		if !ok {
			s = uint32(len(t.streamKey))
			t.streams[sk] = s
			t.streamKey = append(t.streamKey, sk)
		}
		rec.Stream = s
		if len(t.Records) == maxRecords {
			return nil, fmt.Errorf("%w: more than %d message ids", ErrTooLarge, maxRecords)
		}
		t.Records = append(t.Records, rec)
	}
	return t, nil
}

// ctxReader reads r on a goroutine, one Read call at a time, and returns
// ctx's error as soon as ctx is done, even while that call blocks. The
// call then finishes into ctxReader's own buffer, which nothing reads.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
	buf []byte
	res chan ctxRead // buffered: an abandoned call's goroutine never blocks
}

type ctxRead struct {
	n   int
	err error
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	if len(c.buf) < len(p) {
		c.buf = make([]byte, len(p))
	}
	buf := c.buf[:len(p)]
	go func() {
		n, err := c.r.Read(buf)
		c.res <- ctxRead{n, err}
	}()
	select {
	case r := <-c.res:
		return copy(p, buf[:r.n]), r.err
	case <-c.ctx.Done():
		return 0, c.ctx.Err()
	}
}
