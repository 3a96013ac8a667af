package stompconsumer

import (
	"io"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// repeatReader serves the same stream forever.
type repeatReader struct {
	data []byte
	off  int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := copy(p, r.data[r.off:])
	r.off = (r.off + n) % len(r.data)
	return n, nil
}

// BenchmarkLimitReader measures the limiter's cost per byte on frames
// within the limits (the pass-through path every delivery takes).
func BenchmarkLimitReader(b *testing.B) {
	for _, size := range []int{128, 4 << 10, 256 << 10} {
		for _, cl := range []bool{true, false} {
			frame := []byte(msgFrame(essentials+"x-custom:v\n", strings.Repeat("x", size), cl))
			b.Run("body="+byteSize(size)+"/content-length="+map[bool]string{true: "yes", false: "no"}[cl], func(b *testing.B) {
				l := newLimitReader(&repeatReader{data: frame}, defaultMaxHeaderBytes, defaultMaxBodyBytes)
				buf := make([]byte, 16<<10)
				b.SetBytes(int64(len(frame)))
				b.ReportAllocs()
				b.ResetTimer()
				total := 0
				for total < b.N*len(frame) {
					n, err := l.Read(buf)
					if err != nil {
						b.Fatal(err)
					}
					total += n
				}
			})
		}
	}
}

func byteSize(n int) string {
	if n >= 1<<10 && n%(1<<10) == 0 {
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// TestLimitReaderNoAllocs: frames within the limits pass through without
// allocating once the buffers have grown.
func TestLimitReaderNoAllocs(t *testing.T) {
	frame := []byte(msgFrame(essentials, strings.Repeat("x", 3000), false) + msgFrame(essentials, "abc", true))
	l := newLimitReader(&repeatReader{data: frame}, defaultMaxHeaderBytes, defaultMaxBodyBytes)
	buf := make([]byte, 1024)
	for range 100 { // warm up: buffers reach their working size
		if _, err := l.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	if a := testing.AllocsPerRun(1000, func() { _, _ = l.Read(buf) }); a != 0 {
		t.Errorf("Read allocates %.1f times per call", a)
	}
}

// TestFIFOModel checks the delivery queue against a slice model: pushes
// and pops in any order keep FIFO order, close drops what is queued and
// stops everything.
func TestFIFOModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		q := newFIFO()
		var model []*delivery
		closed := false
		for i := range rapid.IntRange(0, 200).Draw(t, "ops") {
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
			case op < 5:
				d := &delivery{cut: strconv.Itoa(i)}
				if ok := q.push(d); ok == closed {
					t.Fatalf("push on closed=%v returned %v", closed, ok)
				}
				if !closed {
					model = append(model, d)
				}
			case op < 9:
				if len(model) == 0 {
					continue // pop would block
				}
				d, ok := q.pop()
				if !ok || d != model[0] {
					t.Fatalf("pop = %v, %v; want %v", d, ok, model[0])
				}
				model = model[1:]
			default:
				if n := q.close(); n != len(model) && !closed {
					t.Fatalf("close dropped %d, model holds %d", n, len(model))
				}
				closed, model = true, nil
				if _, ok := q.pop(); ok {
					t.Fatal("pop after close returned a delivery")
				}
			}
		}
	})
}

var _ io.Reader = (*limitReader)(nil)
