package stompconsumer

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/go-stomp/stomp/v3/frame"
)

// readAll pushes in through a limiter, read through r (an iotest reader
// wrapper or nil), and returns the output.
func limitAll(t testing.TB, in []byte, maxHeader, maxBody int, wrap func(io.Reader) io.Reader) ([]byte, *limitReader, error) {
	t.Helper()
	var src io.Reader = bytes.NewReader(in)
	if wrap != nil {
		src = wrap(src)
	}
	l := newLimitReader(src, maxHeader, maxBody)
	l.keepHeader("x-key")
	out, err := io.ReadAll(l)
	return out, l, err
}

// parseFrames parses a STOMP byte stream with go-stomp's own reader,
// skipping heart-beats.
func parseFrames(b []byte) ([]*frame.Frame, error) {
	r := frame.NewReader(bytes.NewReader(b))
	var fs []*frame.Frame
	for {
		f, err := r.Read()
		if err == io.EOF {
			return fs, nil
		}
		if err != nil {
			return fs, err
		}
		if f != nil {
			fs = append(fs, f)
		}
	}
}

func msgFrame(headers, body string, contentLength bool) string {
	var b strings.Builder
	b.WriteString("MESSAGE\n")
	b.WriteString(headers)
	if contentLength {
		b.WriteString("content-length:")
		b.WriteString(strconv.Itoa(len(body)))
		b.WriteString("\n")
	}
	b.WriteString("\n")
	b.WriteString(body)
	b.WriteString("\x00")
	return b.String()
}

const essentials = "subscription:s1\nmessage-id:ID\\cp-1\\c1\\c-1\\c1\\c7\ndestination:/queue/a\nack:ACK-7\n"

// TestLimitIdentity: frames within the limits pass unchanged, and so do
// the heart-beats between and after them, however the socket splits them;
// heart-beats before the first frame are dropped.
func TestLimitIdentity(t *testing.T) {
	t.Parallel()
	stream := "\n\r\n" + msgFrame(essentials+"x-custom:v\n", "hello\x00world", true) + "\n" +
		msgFrame(essentials, "text body", false) +
		"RECEIPT\r\nreceipt-id:77\r\n\r\n\x00" +
		msgFrame(essentials, "", true) + "\n\n"
	wraps := map[string]func(io.Reader) io.Reader{
		"plain": nil, "one-byte": iotest.OneByteReader, "half": iotest.HalfReader, "data-err": iotest.DataErrReader,
	}
	for name, w := range wraps {
		t.Run(name, func(t *testing.T) {
			out, l, err := limitAll(t, []byte(stream), 1024, 64, w)
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.TrimLeft(stream, "\r\n"); string(out) != want {
				t.Fatalf("output differs:\n got %q\nwant %q", out, want)
			}
			if _, cut := l.takeCut("ACK-7"); cut {
				t.Error("nothing should have been cut")
			}
		})
	}
}

func TestLimitCuts(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("B", 200)
	manyHeaders := strings.Repeat("x-pad:"+strings.Repeat("p", 100)+"\n", 30) // ~3 KiB
	next := msgFrame("subscription:s1\nmessage-id:next\nack:ACK-8\n", "ok", true)
	tests := []struct {
		name     string
		frame    string
		reason   string
		keepsKey bool
	}{
		{"body with content-length", msgFrame(essentials+"x-key:k1\nx-custom:v\n", big, true), "oversized: body of 200 bytes over MaxBodyBytes (64 bytes)", true},
		{"body without content-length", msgFrame(essentials+"x-key:k1\nx-custom:v\n", big, false), "oversized: body (no content-length) over MaxBodyBytes (64 bytes)", true},
		{"header block, essentials after the limit", "MESSAGE\n" + manyHeaders + essentials + "x-key:k1\nx-custom:v\ncontent-length:2\n\nhi\x00", "oversized: header block over MaxHeaderBytes (1024 bytes), body of 2 bytes", true},
		{"header block, essentials before the limit", "MESSAGE\n" + essentials + manyHeaders + "x-custom:v\n\nhi\x00", "header", false},
		{"header block and body", "MESSAGE\n" + essentials + manyHeaders + "x-custom:v\ncontent-length:200\n\n" + big + "\x00", "header", false},
		{"header block and binary body, content-length after the limit", "MESSAGE\n" + essentials + manyHeaders + "content-length:5\n\na\x00b\x00c\x00", "header", false},
		{"a huge header line", "MESSAGE\n" + essentials + "x-huge:" + strings.Repeat("h", 5000) + "\nx-key:k1\n\nhi\x00", "header", true},
	}
	for _, tt := range tests {
		for _, w := range []func(io.Reader) io.Reader{nil, iotest.OneByteReader} {
			t.Run(tt.name, func(t *testing.T) {
				out, l, err := limitAll(t, []byte(tt.frame+next), 1024, 64, w)
				if err != nil {
					t.Fatal(err)
				}
				fs, err := parseFrames(out)
				if err != nil {
					t.Fatalf("go-stomp cannot parse the output %q: %v", out, err)
				}
				if len(fs) != 2 {
					t.Fatalf("got %d frames, want the cut one and the next: %q", len(fs), out)
				}
				f := fs[0]
				if f.Command != "MESSAGE" || len(f.Body) != 0 || f.Header.Get("content-length") != "0" {
					t.Errorf("cut frame %v body %q", f, f.Body)
				}
				for _, h := range []string{"subscription", "message-id", "destination", "ack"} {
					if f.Header.Get(h) == "" {
						t.Errorf("cut frame lost %s: %v", h, f.Header)
					}
				}
				if got := f.Header.Get("message-id"); got != "ID:p-1:1:-1:1:7" {
					t.Errorf("message-id = %q", got)
				}
				if _, ok := f.Header.Contains("x-custom"); ok {
					t.Error("cut frame kept a non-essential header")
				}
				if _, ok := f.Header.Contains("x-key"); ok != tt.keepsKey {
					t.Errorf("key header kept = %v, want %v", ok, tt.keepsKey)
				}
				reason, cut := l.takeCut("ACK-7")
				if !cut || !strings.Contains(reason, tt.reason) {
					t.Errorf("takeCut = %q, %v; want a %s cut", reason, cut, tt.reason)
				}
				if _, again := l.takeCut("ACK-7"); again {
					t.Error("takeCut did not forget the entry")
				}
				if string(fs[1].Body) != "ok" || fs[1].Header.Get("message-id") != "next" {
					t.Errorf("the next frame was damaged: %v %q", fs[1], fs[1].Body)
				}
				if _, cut := l.takeCut("ACK-8"); cut {
					t.Error("the next frame was marked cut")
				}
			})
		}
	}
}

// TestLimitCommandTooLong: a first line longer than the header limit is
// not STOMP; the limiter fails the stream.
func TestLimitCommandTooLong(t *testing.T) {
	t.Parallel()
	_, _, err := limitAll(t, []byte(strings.Repeat("M", 3000)+"\n\n\x00"), 1024, 64, nil)
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("err = %v, want ErrFrameTooLarge", err)
	}
}

// TestLimitMemoryBound: a 4 MiB body and a 1 MiB header block stream
// through without the limiter holding more than its limits.
func TestLimitMemoryBound(t *testing.T) {
	t.Parallel()
	huge := msgFrame(essentials, strings.Repeat("x", 4<<20), false) +
		"MESSAGE\n" + essentials + strings.Repeat("x-h:"+strings.Repeat("v", 1000)+"\n", 1024) + "\nbody\x00"
	l := newLimitReader(iotest.HalfReader(bytes.NewReader([]byte(huge))), 4096, 1<<16)
	buf := make([]byte, 512)
	peak := 0
	for {
		_, err := l.Read(buf)
		if held := cap(l.hdr) + cap(l.body) + cap(l.kept) + cap(l.line); held > peak {
			peak = held
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if limit := 2*(4096+1<<16) + 2*(maxKeptHeaders+maxKeptLine); peak > limit {
		t.Errorf("limiter held %d bytes, bound %d", peak, limit)
	}
}

func TestUnescapeHeader(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`plain`: "plain", `a\cb`: "a:b", `a\\b`: `a\b`, `x\ny\rz`: "x\ny\rz", `end\`: `end\`,
	} {
		if got := unescapeHeader(in); got != want {
			t.Errorf("unescapeHeader(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzLimitReader: the limiter never panics, never holds more than its
// limits, is the identity when the limits exceed the input (but for the
// heart-beats before the first frame, which it drops), and otherwise
// turns a stream go-stomp can parse into one it parses into the same
// number of frames, each unchanged or cut (empty body, a subset of the
// headers).
func FuzzLimitReader(f *testing.F) {
	f.Add([]byte(msgFrame(essentials+"x-key:k\n", "body", true)+"\n"+msgFrame(essentials, "text", false)), uint16(1024), uint16(16))
	f.Add([]byte("MESSAGE\n"+essentials+strings.Repeat("x-p:0123456789\n", 100)+"\nxx\x00"), uint16(1024), uint16(8))
	f.Add([]byte("RECEIPT\nreceipt-id:1\n\n\x00\n\nERROR\nmessage:m\n\nbody\x00"), uint16(1024), uint16(2))
	f.Add([]byte("MESSAGE\ncontent-length:5\n\nab\x00cd\x00"), uint16(1024), uint16(4))
	f.Add([]byte("MESSAGE\ncontent-length:9223372036854775807\n\nab\x00"), uint16(1024), uint16(4))
	f.Fuzz(func(t *testing.T, in []byte, maxHeader, maxBody uint16) {
		mh, mb := int(maxHeader)%4096+1, int(maxBody)%4096+1
		l := newLimitReader(iotest.HalfReader(bytes.NewReader(in)), mh, mb)
		var out []byte
		buf := make([]byte, 97)
		for {
			n, err := l.Read(buf)
			out = append(out, buf[:n]...)
			if len(l.hdr) > max(mh, minHeaderBytes) || len(l.body) > mb || len(l.kept) > maxKeptHeaders+max(mh, minHeaderBytes) || len(l.line) > maxKeptLine {
				t.Fatalf("limiter holds hdr=%d body=%d kept=%d line=%d over limits %d/%d", len(l.hdr), len(l.body), len(l.kept), len(l.line), mh, mb)
			}
			if err != nil {
				break
			}
		}
		// Identity with limits above the input size.
		wide := newLimitReader(bytes.NewReader(in), len(in)+minHeaderBytes, len(in)+1)
		same, err := io.ReadAll(wide)
		if err == nil && !declaresOver(in, int64(len(in))) && !bytes.Equal(same, bytes.TrimLeft(in, "\r\n")) {
			t.Fatalf("limits above the input changed it:\n in %q\nout %q", in, same)
		}
		if declaresOver(in, 1<<20) {
			// go-stomp itself would allocate the declared length: the
			// very thing the limiter exists to prevent.
			return
		}
		inFrames, err := parseFrames(in)
		if err != nil {
			return
		}
		outFrames, err := parseFrames(out)
		if err != nil {
			t.Fatalf("input parses but the output does not (%v):\n in %q\nout %q", err, in, out)
		}
		// go-stomp reports a clean EOF for a truncated last frame, which the
		// limiter may already have cut (and completed): one extra cut frame
		// at the end is allowed.
		if len(outFrames) != len(inFrames) && len(outFrames) != len(inFrames)+1 {
			t.Fatalf("%d frames in, %d out", len(inFrames), len(outFrames))
		}
		for i, o := range outFrames {
			if i == len(inFrames) {
				if len(o.Body) != 0 || o.Header.Get("content-length") != "0" {
					t.Fatalf("extra frame %v %q is not a cut frame", o.Header, o.Body)
				}
				continue
			}
			g := inFrames[i]
			if o.Command != g.Command {
				t.Fatalf("frame %d: command %q → %q", i, g.Command, o.Command)
			}
			if bytes.Equal(o.Body, g.Body) && headersEqual(o.Header, g.Header) {
				continue
			}
			if len(o.Body) != 0 || o.Header.Get("content-length") != "0" {
				t.Fatalf("frame %d changed but is not a cut frame: %v %q → %v %q", i, g.Header, g.Body, o.Header, o.Body)
			}
		}
	})
}

func headersEqual(a, b *frame.Header) bool {
	if a.Len() != b.Len() {
		return false
	}
	for i := 0; i < a.Len(); i++ {
		ak, av := a.GetAt(i)
		bk, bv := b.GetAt(i)
		if ak != bk || av != bv {
			return false
		}
	}
	return true
}

// declaresOver reports a content-length header anywhere in b declaring
// more than limit bytes (or too large to parse).
func declaresOver(b []byte, limit int64) bool {
	for _, part := range bytes.Split(b, []byte("content-length:"))[1:] {
		end := bytes.IndexAny(part, "\r\n")
		if end < 0 {
			end = len(part)
		}
		n, err := strconv.ParseInt(string(part[:end]), 10, 64)
		if err == nil && n > limit {
			return true
		}
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return true
		}
	}
	return false
}
