// Package snapframe is the framing shared by msgaudit's snapshots: a magic
// string, a version byte, a body of uvarints and byte strings, and a
// CRC-32C of everything before it. Reader is a bounds-checked cursor over a
// body whose errors wrap the caller's corruption sentinel, so a crafted
// snapshot is an error, never a panic or an allocation it did not pay for.
package snapframe

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Begin appends the magic and the version byte to dst.
func Begin(dst []byte, magic string, version byte) []byte {
	return append(append(dst, magic...), version)
}

// Seal appends the CRC-32C of dst[start:] (the frame begun at start).
func Seal(dst []byte, start int) []byte {
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// Open checks data's magic, version and checksum and returns a Reader over
// its body. data shorter than minLen, or failing a check, is an error
// wrapping corrupt.
func Open(data []byte, magic string, version byte, minLen int, corrupt error) (*Reader, error) {
	minLen = max(minLen, len(magic)+1+4)
	if len(data) < minLen {
		return nil, fmt.Errorf("%w: %d bytes, shorter than a header", corrupt, len(data))
	}
	if string(data[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: bad magic", corrupt)
	}
	if v := data[len(magic)]; v != version {
		return nil, fmt.Errorf("%w: unknown version %d", corrupt, v)
	}
	body := data[:len(data)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(data[len(body):]) {
		return nil, fmt.Errorf("%w: checksum mismatch", corrupt)
	}
	return &Reader{B: body[len(magic)+1:], corrupt: corrupt}, nil
}

// Reader is a bounds-checked cursor over a snapshot body. After the first
// failure every call returns a zero value and Err keeps that failure.
type Reader struct {
	// B is what is left to read.
	B []byte
	// Err is the first failure, wrapping the sentinel given to Open.
	Err     error
	corrupt error
}

// Fail records a failure (the first one wins).
func (r *Reader) Fail(format string, args ...any) {
	if r.Err == nil {
		r.Err = fmt.Errorf("%w: "+format, append([]any{r.corrupt}, args...)...)
	}
}

// Wrap records err, wrapped in the corruption sentinel, as the failure.
func (r *Reader) Wrap(err error) {
	if r.Err == nil {
		r.Err = fmt.Errorf("%w: %w", r.corrupt, err)
	}
}

// Uvarint reads one uvarint; what names it in the error.
func (r *Reader) Uvarint(what string) uint64 {
	if r.Err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.B)
	if n <= 0 {
		r.Fail("bad %s", what)
		return 0
	}
	r.B = r.B[n:]
	return v
}

// Byte reads one byte.
func (r *Reader) Byte(what string) byte {
	if r.Err != nil {
		return 0
	}
	if len(r.B) == 0 {
		r.Fail("missing %s", what)
		return 0
	}
	c := r.B[0]
	r.B = r.B[1:]
	return c
}

// Bytes reads n bytes (a sub-slice of the input, not a copy), failing when
// fewer are left.
func (r *Reader) Bytes(n uint64, what string) []byte {
	if r.Err != nil {
		return nil
	}
	if n > uint64(len(r.B)) {
		r.Fail("%s of %d bytes, only %d left", what, n, len(r.B))
		return nil
	}
	p := r.B[:n]
	r.B = r.B[n:]
	return p
}
