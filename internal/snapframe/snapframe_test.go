package snapframe_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/acemq/msgaudit/internal/snapframe"
)

var errCorrupt = errors.New("test: corrupt")

func frame(body []byte) []byte {
	dst := snapframe.Begin(nil, "TEST", 3)
	dst = append(dst, body...)
	return snapframe.Seal(dst, 0)
}

func TestOpen(t *testing.T) {
	body := binary.AppendUvarint(nil, 300)
	body = append(body, 'x', 'y', 'z')
	good := frame(body)
	r, err := snapframe.Open(good, "TEST", 3, 0, errCorrupt)
	if err != nil {
		t.Fatal(err)
	}
	if v := r.Uvarint("v"); v != 300 {
		t.Errorf("Uvarint = %d", v)
	}
	if b := r.Byte("b"); b != 'x' {
		t.Errorf("Byte = %q", b)
	}
	if p := r.Bytes(2, "p"); string(p) != "yz" || r.Err != nil || len(r.B) != 0 {
		t.Errorf("Bytes = %q, err %v, left %d", p, r.Err, len(r.B))
	}

	flip := func(i int) []byte { d := append([]byte(nil), good...); d[i] ^= 1; return d }
	for name, data := range map[string][]byte{
		"empty":       nil,
		"short":       good[:7],
		"bad magic":   flip(0),
		"bad version": flip(4),
		"bad body":    flip(5),
		"bad crc":     flip(len(good) - 1),
		"truncated":   good[:len(good)-1],
	} {
		if _, err := snapframe.Open(data, "TEST", 3, 0, errCorrupt); !errors.Is(err, errCorrupt) {
			t.Errorf("%s: Open = %v, want errCorrupt", name, err)
		}
	}
	if _, err := snapframe.Open(good, "TEST", 3, len(good)+1, errCorrupt); !errors.Is(err, errCorrupt) {
		t.Errorf("minLen not enforced: %v", err)
	}
}

func TestReaderBounds(t *testing.T) {
	r, err := snapframe.Open(frame([]byte{0xff}), "TEST", 3, 0, errCorrupt)
	if err != nil {
		t.Fatal(err)
	}
	if r.Uvarint("count"); !errors.Is(r.Err, errCorrupt) {
		t.Fatalf("truncated uvarint: %v", r.Err)
	}
	first := r.Err
	r.Fail("later failure")
	if r.Err != first || r.Bytes(0, "p") != nil || r.Byte("b") != 0 || r.Uvarint("v") != 0 {
		t.Errorf("calls after a failure must do nothing and keep the first error: %v", r.Err)
	}

	r, _ = snapframe.Open(frame([]byte{1, 2}), "TEST", 3, 0, errCorrupt)
	if p := r.Bytes(3, "name"); p != nil || !errors.Is(r.Err, errCorrupt) {
		t.Errorf("Bytes past the end = %q, %v", p, r.Err)
	}
	r, _ = snapframe.Open(frame(nil), "TEST", 3, 0, errCorrupt)
	if r.Byte("kind"); !errors.Is(r.Err, errCorrupt) {
		t.Errorf("Byte past the end: %v", r.Err)
	}
	r, _ = snapframe.Open(frame(nil), "TEST", 3, 0, errCorrupt)
	inner := errors.New("window")
	if r.Wrap(inner); !errors.Is(r.Err, errCorrupt) || !errors.Is(r.Err, inner) {
		t.Errorf("Wrap = %v", r.Err)
	}
}
