package redact_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/idempotency"
	_ "github.com/acemq/msgaudit/idempotency/mysqlstore"
	"github.com/acemq/msgaudit/idempotency/redisstore"
	"github.com/acemq/msgaudit/metadata"
	_ "github.com/acemq/msgaudit/metadata/mysqlmeta"
)

// TestMalformedEscapeNeverQuoted: a secret holding a '%' that starts no
// valid escape, in the userinfo, in password= or in sentinel_password=,
// for every scheme redisstore.Open, idempotency.Open and metadata.Open
// take, yields an error that quotes no part of it and says which part of
// the URL is malformed.
func TestMalformedEscapeNeverQuoted(t *testing.T) {
	const head, tail = "JQVW", "ZZZZ" // the secret is head + escape + tail
	escapes := []string{"%Kx", "%K", "%", "%4", "%g0", "%%"}
	type input struct{ url, says string }
	var inputs []input
	add := func(scheme, path string) {
		for _, e := range escapes {
			pw := head + e + tail
			inputs = append(inputs,
				input{scheme + "://user:" + pw + "@127.0.0.1:1" + path, "the password has an invalid %-escape"},
				input{scheme + "://127.0.0.1:1" + path + "?password=" + pw, "the value of query parameter 1 has an invalid %-escape"},
				input{scheme + "://127.0.0.1:1" + path + "?max_retries=-1&password=" + pw + "&x=1", "the value of query parameter 2 has an invalid %-escape"})
			if strings.Contains(scheme, "sentinel") {
				inputs = append(inputs, input{scheme + "://127.0.0.1:1" + path + "?max_retries=-1&sentinel_password=" + pw, "the value of query parameter 2 has an invalid %-escape"})
			}
		}
	}
	for _, s := range []string{"redis", "rediss"} {
		add(s, "/0")
	}
	for _, s := range []string{"redis+cluster", "rediss+cluster"} {
		add(s, "")
	}
	for _, s := range []string{"redis+sentinel", "rediss+sentinel"} {
		add(s, "/mymaster")
	}
	for _, s := range []string{"postgres", "postgresql", "mysql"} {
		add(s, "/test")
	}
	ctx := context.Background()
	for _, in := range inputs {
		t.Run(in.url, func(t *testing.T) {
			var errs []error
			if strings.HasPrefix(in.url, "redis") {
				_, err := redisstore.Open(ctx, in.url, redisstore.Options{})
				errs = append(errs, err)
			}
			_, err := idempotency.Open(ctx, in.url, idempotency.Options{})
			errs = append(errs, err)
			_, err = metadata.Open(ctx, in.url)
			errs = append(errs, err)
			for _, err := range errs {
				if err == nil {
					t.Fatal("opened")
				}
				texts := append(errorTexts(err), fmt.Sprintf("%#v", err))
				for _, s := range texts {
					for _, frag := range []string{head, tail, "%K", "%g", `escape "`, `escape \"`} {
						if strings.Contains(s, frag) {
							t.Errorf("%q in %q", frag, s)
						}
					}
				}
				if !strings.Contains(err.Error(), in.says) {
					t.Errorf("%v: want it to say %q", err, in.says)
				}
			}
		})
	}
}
