package rabbitconsumer

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// FuzzRedaction: whatever the password, it appears neither in a Config's
// printed form nor in an error or log text passed through the redactor.
func FuzzRedaction(f *testing.F) {
	for _, s := range []string{"guest", "p@ss:w/rd", "%zz", "s3cret?x=1#frag", "ünïcødé", "a b\tc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pw string) {
		if len(pw) < 4 {
			return // short strings occur in the output by chance
		}
		mk := func(p string) Config {
			u := url.URL{Scheme: "amqps", User: url.UserPassword("app", p), Host: "rabbit:5671", Path: "/v"}
			return Config{URL: u.String(), Queue: "q"}
		}
		baseline := fmt.Sprintf("%v", mk("PLACEHOLDER"))
		if strings.Contains(baseline, pw) || strings.Contains("PLACEHOLDER", pw) {
			return
		}
		cfg := mk(pw)
		for _, out := range []string{fmt.Sprintf("%v", cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg), cfg.String()} {
			if strings.Contains(out, pw) || strings.Contains(out, url.QueryEscape(pw)) || strings.Contains(out, url.PathEscape(pw)) {
				t.Fatalf("password %q printed: %s", pw, out)
			}
		}
		red := newRedactor(cfg.URL)
		err := red.Error(errors.New("dial " + cfg.URL + " with " + pw))
		if strings.Contains(err.Error(), pw) {
			t.Fatalf("password %q in error: %v", pw, err)
		}
	})
}
