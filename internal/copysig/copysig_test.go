package copysig

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestSignVerify(t *testing.T) {
	secret := bytes.Repeat([]byte("s"), 32)
	a, err := New(secret)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New(secret)
	other, _ := New(nil)
	sig := a.Sign("ID:k-1", "2", []byte("body"))
	cases := []struct {
		name          string
		s             *Signer
		sig, key, att string
		body          string
		want          bool
	}{
		{"same signer", a, sig, "ID:k-1", "2", "body", true},
		{"same secret", b, sig, "ID:k-1", "2", "body", true},
		{"other secret", other, sig, "ID:k-1", "2", "body", false},
		{"other key", a, sig, "ID:k-2", "2", "body", false},
		{"other attempts", a, sig, "ID:k-1", "3", "body", false},
		{"other body", a, sig, "ID:k-1", "2", "bodY", false},
		{"key and attempts shifted", a, a.Sign("ID:k-1", "2", nil), "ID:k-", "12", "", false},
		{"empty", a, "", "ID:k-1", "2", "body", false},
		{"garbage", a, "v1.!!!!", "ID:k-1", "2", "body", false},
		{"other version", a, "v2" + strings.TrimPrefix(sig, "v1"), "ID:k-1", "2", "body", false},
	}
	for _, c := range cases {
		if got := c.s.Verify(c.sig, c.key, c.att, []byte(c.body)); got != c.want {
			t.Errorf("%s: Verify = %t, want %t", c.name, got, c.want)
		}
	}
}

// TestFieldsInjective: a signature verifies only for the fields it was
// made for, however the bytes of key and attempts are split.
func TestFieldsInjective(t *testing.T) {
	s, _ := New(nil)
	rapid.Check(t, func(t *rapid.T) {
		k := rapid.String().Draw(t, "key")
		a := rapid.String().Draw(t, "attempts")
		sig := s.Sign(k, a, nil)
		all := k + a
		for i := 0; i <= len(all); i++ {
			if i != len(k) && s.Verify(sig, all[:i], all[i:], nil) {
				t.Fatalf("signature of (%q, %q) verifies for (%q, %q)", k, a, all[:i], all[i:])
			}
		}
	})
}

func TestNewRefusesShortSecret(t *testing.T) {
	_, err := New([]byte("short-secret"))
	if err == nil || !strings.Contains(err.Error(), "12 bytes; at least 16") {
		t.Fatalf("New(12 bytes) error %v, want one naming the length", err)
	}
	if strings.Contains(fmt.Sprint(err), "short-secret") {
		t.Fatal("the error shows the secret")
	}
}

func TestPrintHidesSecret(t *testing.T) {
	secret := []byte("very-secret-value-0123456789")
	s, _ := New(secret)
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(f, s); strings.Contains(out, "very-secret") || strings.Contains(out, fmt.Sprint(secret[:4])) {
			t.Errorf("%s shows the secret: %s", f, out)
		}
	}
	secret[0] = 'X' // the Signer holds its own copy
	t2, _ := New([]byte("very-secret-value-0123456789"))
	if !t2.Verify(s.Sign("k", "1", nil), "k", "1", nil) {
		t.Fatal("changing the caller's secret changed the Signer's")
	}
}
