package bitsetbin_test

import (
	"testing"

	"github.com/acemq/msgaudit/bitsetbin"
)

// snapshot returns b's encoding, to compare states.
func snapshot(t testing.TB, b *bitsetbin.Bin) []byte {
	t.Helper()
	p, err := b.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
