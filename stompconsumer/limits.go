package stompconsumer

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"sync"
)

// go-stomp v3.1.3 has no frame size limits: its reader grows a header line
// without bound, allocates content-length bytes up front and reads a body
// without content-length up to the NUL however long it is. limitReader sits
// between the socket and go-stomp and enforces MaxHeaderBytes and
// MaxBodyBytes on every frame the broker sends, holding at most one
// frame's allowed bytes itself.
//
// A frame over a limit is not passed through: it is rewritten into the
// same frame with only the headers needed to acknowledge it (message-id,
// ack, subscription, destination, …), content-length 0 and an empty body,
// and the rest of it is discarded as it streams in. The rewritten
// delivery's ack id is recorded with the reason, so the consumer knows
// (without trusting any header a producer could set) that the delivery was
// cut. The consumer then dead-letters a record of it (the kept headers, an
// empty body marked as omitted, the reason) and settles the original: a
// persistent one with NACK once the record is committed (ActiveMQ then
// dead-letters it in full), a non-persistent one with an ACK in the
// record's transaction (ActiveMQ discards a non-persistent message on a
// NACK). Killing the connection instead would make the broker redeliver
// the same frame forever.

// essentialHeaders are kept when a frame is cut.
var essentialHeaders = []string{
	"message-id", "ack", "subscription", "destination", "persistent",
	"redelivered", "receipt-id", "message", "content-type", "x-original-key", "x-attempts",
}

const (
	maxKeptLine    = 1024     // longest header line kept when a frame is cut
	maxKeptHeaders = 8 * 1024 // bytes of headers kept when a frame is cut
	minHeaderBytes = 1024     // smallest MaxHeaderBytes honoured
)

type limState uint8

const (
	limIdle        limState = iota // between frames (heart-beat EOLs pass)
	limHeader                      // buffering command and headers
	limOverflow                    // header block too large: keeping essentials
	limBodyLen                     // passing content-length body bytes
	limTerminator                  // passing the NUL after a content-length body
	limBodyNUL                     // buffering a body that ends at NUL
	limDiscardLen                  // discarding a cut body of known length (+ NUL)
	limDiscardTerm                 // discarding the NUL after a cut body of known length
	limDiscardNUL                  // discarding a cut body up to NUL
)

// limitReader enforces frame limits; see above. It is used by one reader
// goroutine; cut() is safe for concurrent use.
type limitReader struct {
	src       io.Reader
	maxHeader int
	maxBody   int
	extraKeep [][]byte // additional header names to keep (e.g. the key header)

	buf    []byte // read buffer
	out    []byte // bytes ready for the caller
	outOff int
	err    error

	state  limState
	framed bool   // a frame has begun: EOLs before the first one are dropped
	hdr    []byte // command + header block (≤ maxHeader+1)
	lineAt int    // start of the current line in hdr
	kept   []byte // limOverflow: command + essential header lines
	line   []byte // limOverflow: current line (≤ maxKeptLine)
	lineOK bool   // limOverflow: current line fits maxKeptLine
	ovCL   int64  // limOverflow: the first content-length, if ovHas
	ovHas  bool   // limOverflow: a usable content-length was seen
	ovSeen bool   // limOverflow: a content-length header was seen
	body   []byte // limBodyNUL
	remain int64  // limBodyLen / limDiscardLen

	mu   sync.Mutex
	cuts map[string]string // ack id → reason, for cut deliveries not yet taken
}

func newLimitReader(src io.Reader, maxHeader, maxBody int) *limitReader {
	if maxHeader <= 0 {
		maxHeader = defaultMaxHeaderBytes
	}
	if maxHeader < minHeaderBytes {
		maxHeader = minHeaderBytes
	}
	if maxBody <= 0 {
		maxBody = defaultMaxBodyBytes
	}
	return &limitReader{src: src, maxHeader: maxHeader, maxBody: maxBody, buf: make([]byte, 16<<10)}
}

// keepHeader adds a header name kept when a frame is cut.
func (l *limitReader) keepHeader(name string) {
	if name != "" {
		l.extraKeep = append(l.extraKeep, []byte(name))
	}
}

// takeCut reports (and forgets) whether the delivery with this ack id was
// cut, and why.
func (l *limitReader) takeCut(ack string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.cuts[ack]
	if ok {
		delete(l.cuts, ack)
	}
	return r, ok
}

func (l *limitReader) Read(p []byte) (int, error) {
	for l.outOff == len(l.out) {
		l.out, l.outOff = l.out[:0], 0
		if l.err != nil {
			return 0, l.err
		}
		n, err := l.src.Read(l.buf)
		l.feed(l.buf[:n])
		if err != nil && l.err == nil {
			l.err = err
			l.flush()
		}
	}
	n := copy(p, l.out[l.outOff:])
	l.outOff += n
	return n, nil
}

// feed runs the state machine over data, appending what may pass to out.
func (l *limitReader) feed(data []byte) {
	for len(data) > 0 {
		switch l.state {
		case limIdle:
			b := data[0]
			if b == '\n' || b == '\r' {
				// A heart-beat. One before the first frame is dropped:
				// a broker can send a heart-beat ahead of CONNECTED
				// (ActiveMQ did, on a loaded machine), and go-stomp
				// v3.1.3 takes an empty first frame for a failed CONNECT.
				if l.framed {
					l.out = append(l.out, b)
				}
				data = data[1:]
				continue
			}
			l.state, l.hdr, l.lineAt, l.framed = limHeader, l.hdr[:0], 0, true
		case limHeader:
			i := bytes.IndexByte(data, '\n')
			chunk := data
			if i >= 0 {
				chunk = data[:i+1]
			}
			if len(l.hdr)+len(chunk) > l.maxHeader {
				if l.lineAt == 0 {
					// The command line alone is over the limit: this is no
					// STOMP frame, and nothing of it can be kept.
					l.err = fmt.Errorf("%w: command line longer than %d bytes", ErrFrameTooLarge, l.maxHeader)
					return
				}
				l.startOverflow()
				continue
			}
			l.hdr = append(l.hdr, chunk...)
			data = data[len(chunk):]
			if i < 0 {
				continue
			}
			start := l.lineAt
			l.lineAt = len(l.hdr)
			line := bytes.TrimSuffix(l.hdr[start:len(l.hdr)-1], []byte{'\r'})
			if len(line) == 0 && start > 0 {
				l.endHeader()
			}
		case limOverflow:
			i := bytes.IndexByte(data, '\n')
			chunk := data
			if i >= 0 {
				chunk = data[:i]
			}
			if l.lineOK && len(l.line)+len(chunk) <= maxKeptLine {
				l.line = append(l.line, chunk...)
			} else {
				l.lineOK = false
			}
			if i < 0 {
				data = data[len(data):]
				continue
			}
			data = data[i+1:]
			line := bytes.TrimSuffix(l.line, []byte{'\r'})
			if l.lineOK && len(line) == 0 {
				l.cutHeader()
				continue
			}
			if l.lineOK {
				l.noteContentLength(line)
			}
			if l.lineOK && l.keep(line) && len(l.kept)+len(line)+1 <= maxKeptHeaders {
				l.kept = append(append(l.kept, line...), '\n')
			}
			l.line, l.lineOK = l.line[:0], true
		case limBodyLen:
			n := int64(len(data))
			if n > l.remain {
				n = l.remain
			}
			l.out = append(l.out, data[:n]...)
			data = data[n:]
			l.remain -= n
			if l.remain == 0 {
				l.state = limTerminator
			}
		case limTerminator:
			// go-stomp checks that this byte is a NUL.
			l.out = append(l.out, data[0])
			data = data[1:]
			l.state = limIdle
		case limBodyNUL:
			i := bytes.IndexByte(data, 0)
			chunk := data
			if i >= 0 {
				chunk = data[:i]
			}
			if len(l.body)+len(chunk) > l.maxBody {
				l.emitCut(l.hdr, "oversized: body (no content-length) over MaxBodyBytes ("+strconv.Itoa(l.maxBody)+" bytes)")
				l.body = l.body[:0]
				l.state = limDiscardNUL
				continue
			}
			l.body = append(l.body, chunk...)
			if i < 0 {
				data = data[len(data):]
				continue
			}
			data = data[i+1:]
			l.out = append(l.out, l.hdr...)
			l.out = append(l.out, l.body...)
			l.out = append(l.out, 0)
			l.body = l.body[:0]
			l.state = limIdle
		case limDiscardLen:
			n := int64(len(data))
			if n > l.remain {
				n = l.remain
			}
			data = data[n:]
			l.remain -= n
			if l.remain == 0 {
				l.state = limDiscardTerm
			}
		case limDiscardTerm:
			data = data[1:]
			l.state = limIdle
		case limDiscardNUL:
			i := bytes.IndexByte(data, 0)
			if i < 0 {
				data = data[len(data):]
				continue
			}
			data = data[i+1:]
			l.state = limIdle
		}
	}
}

// flush passes on a partial frame held back when the stream ends, so the
// reader sees the same truncated input it would have seen without the
// limiter (and reports the same error).
func (l *limitReader) flush() {
	switch l.state {
	case limHeader:
		l.out = append(l.out, l.hdr...)
	case limBodyNUL:
		l.out = append(l.out, l.hdr...)
		l.out = append(l.out, l.body...)
	}
	l.hdr, l.body = l.hdr[:0], l.body[:0]
	l.state = limIdle
}

// endHeader handles the end of a header block that fit maxHeader.
func (l *limitReader) endHeader() {
	cl, ok, bad := contentLength(l.hdr)
	switch {
	case bad:
		// Let go-stomp reject the malformed content-length (the connection
		// then fails: the frame is not a valid STOMP frame).
		l.out = append(l.out, l.hdr...)
		l.state = limIdle
	case ok && cl > int64(l.maxBody):
		l.emitCut(l.hdr, "oversized: body of "+strconv.FormatInt(cl, 10)+" bytes over MaxBodyBytes ("+strconv.Itoa(l.maxBody)+" bytes)")
		l.remain, l.state = cl, limDiscardLen
	case ok:
		l.out = append(l.out, l.hdr...)
		l.remain, l.state = cl, limBodyLen
		if cl == 0 {
			l.state = limTerminator
		}
	default:
		l.body, l.state = l.body[:0], limBodyNUL
	}
}

// startOverflow switches to keeping only essential headers: the lines
// complete so far are filtered, the partial one continues in l.line.
func (l *limitReader) startOverflow() {
	l.kept = l.kept[:0]
	l.ovCL, l.ovHas, l.ovSeen = 0, false, false
	first := true
	rest := l.hdr[:l.lineAt]
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		line := bytes.TrimSuffix(rest[:i], []byte{'\r'})
		rest = rest[i+1:]
		if !first {
			l.noteContentLength(line)
		}
		if first || (len(line) <= maxKeptLine && l.keep(line) && len(l.kept)+len(line)+1 <= maxKeptHeaders) {
			l.kept = append(append(l.kept, line...), '\n')
		}
		first = false
	}
	partial := l.hdr[l.lineAt:]
	l.line, l.lineOK = append(l.line[:0], partial...), len(partial) <= maxKeptLine
	if !l.lineOK {
		l.line = l.line[:0]
	}
	l.hdr = l.hdr[:0]
	l.state = limOverflow
}

// cutHeader ends an oversized header block: emit the cut frame, then skip
// the body.
func (l *limitReader) cutHeader() {
	cl, ok := l.ovCL, l.ovHas
	reason := "oversized: header block over MaxHeaderBytes (" + strconv.Itoa(l.maxHeader) + " bytes)"
	if ok {
		reason += ", body of " + strconv.FormatInt(cl, 10) + " bytes"
	}
	l.emitCut(l.kept, reason)
	l.line, l.lineOK = l.line[:0], true
	switch {
	case ok && cl == 0:
		l.state = limDiscardTerm
	case ok:
		l.remain, l.state = cl, limDiscardLen
	default:
		l.state = limDiscardNUL
	}
}

// noteContentLength remembers the first content-length header of an
// oversized header block (it is not kept on the cut frame, but it says how
// much body to skip). An unparseable value counts as none: the body is
// then skipped up to the next NUL.
func (l *limitReader) noteContentLength(line []byte) {
	if l.ovSeen {
		return
	}
	if v, found := bytes.CutPrefix(line, []byte("content-length:")); found {
		l.ovSeen = true
		// go-stomp's own rule: an unsigned 32-bit decimal.
		if n, err := strconv.ParseUint(string(v), 10, 32); err == nil {
			l.ovCL, l.ovHas = int64(n), true
		}
	}
}

// keep reports whether a header line is one of the essential headers.
func (l *limitReader) keep(line []byte) bool {
	c := bytes.IndexByte(line, ':')
	if c <= 0 {
		return false
	}
	name := line[:c]
	for _, h := range essentialHeaders {
		if string(name) == h {
			return true
		}
	}
	for _, h := range l.extraKeep {
		if bytes.Equal(name, h) {
			return true
		}
	}
	return false
}

// emitCut writes the cut version of a frame: its command line and kept
// essential headers (hdr is a header block, possibly without its closing
// empty line), content-length:0, an empty body. The ack id is recorded.
func (l *limitReader) emitCut(hdr []byte, reason string) {
	first := true
	var ack string
	rest := hdr
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			i = len(rest)
		}
		line := bytes.TrimSuffix(rest[:i], []byte{'\r'})
		if i < len(rest) {
			rest = rest[i+1:]
		} else {
			rest = nil
		}
		if len(line) == 0 {
			break
		}
		if first || l.keep(line) {
			l.out = append(append(l.out, line...), '\n')
			if !first && bytes.HasPrefix(line, []byte("ack:")) && ack == "" {
				ack = unescapeHeader(string(line[4:]))
			}
		}
		first = false
	}
	l.out = append(l.out, "content-length:0\n\n\x00"...)
	l.mu.Lock()
	if ack != "" {
		if l.cuts == nil {
			l.cuts = make(map[string]string)
		}
		l.cuts[ack] = reason
	}
	l.mu.Unlock()
}

// contentLength finds the first content-length header in a header block.
// bad reports a present but unparseable value.
func contentLength(hdr []byte) (n int64, ok, bad bool) {
	rest := hdr
	first := true
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			i = len(rest)
		}
		line := bytes.TrimSuffix(rest[:i], []byte{'\r'})
		if i < len(rest) {
			rest = rest[i+1:]
		} else {
			rest = nil
		}
		if first {
			first = false
			continue
		}
		if v, found := bytes.CutPrefix(line, []byte("content-length:")); found {
			// go-stomp's own rule: an unsigned 32-bit decimal.
			n, err := strconv.ParseUint(string(v), 10, 32)
			if err != nil {
				return 0, true, true
			}
			return int64(n), true, false
		}
	}
	return 0, false, false
}

// unescapeHeader decodes STOMP 1.2 header escapes (\\, \c, \n, \r).
func unescapeHeader(s string) string {
	if !bytes.ContainsRune([]byte(s), '\\') {
		return s
	}
	var b []byte
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b = append(b, s[i])
			continue
		}
		i++
		switch s[i] {
		case 'c':
			b = append(b, ':')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		default:
			b = append(b, s[i])
		}
	}
	return string(b)
}
