package redact_test

import (
	"context"
	"fmt"
	"github.com/acemq/msgaudit/internal/testkit/logbuf"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/pgstore"
	"github.com/acemq/msgaudit/idempotency/redisstore"
	_ "github.com/acemq/msgaudit/idempotency/sqlitestore"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/metadata"
	_ "github.com/acemq/msgaudit/metadata/pgmeta"
	_ "github.com/acemq/msgaudit/metadata/redismeta"
	_ "github.com/acemq/msgaudit/metadata/sqlitemeta"
	"github.com/acemq/msgaudit/rabbitconsumer"
	"github.com/acemq/msgaudit/receiver"
	"github.com/acemq/msgaudit/stompconsumer"
	"pgregory.net/rapid"
)

// wordLetters build the recognisable words of a generated password; no
// message template, host or scheme holds four of them in a row.
const wordLetters = "JKQVWXZ"

// password draws a password of printable ASCII: words of 4 to 8
// wordLetters between runs of 1 to 3 other printable bytes (every one of
// them: '/', '?', '#', '@', ':', '%', quotes, backslashes, spaces). It
// returns the password and its words, which no output may contain: a word
// in an error is a fragment of the password.
func password(t *rapid.T) (string, []string) {
	var b strings.Builder
	var words []string
	n := rapid.IntRange(1, 4).Draw(t, "words")
	sep := rapid.SampledFrom(separators()).Draw
	for i := range n {
		if i > 0 || rapid.Bool().Draw(t, "leading separator") {
			for range rapid.IntRange(1, 3).Draw(t, "separator length") {
				b.WriteString(sep(t, "separator"))
			}
		}
		w := rapid.StringOfN(rapid.SampledFrom([]rune(wordLetters)), 4, 8, -1).Draw(t, "word")
		words = append(words, w)
		b.WriteString(w)
	}
	if rapid.Bool().Draw(t, "trailing separator") {
		b.WriteString(sep(t, "separator"))
	}
	return b.String(), words
}

// separators are the printable ASCII bytes other than wordLetters.
func separators() []string {
	var out []string
	for c := byte(' '); c <= '~'; c++ {
		if !strings.ContainsRune(wordLetters, rune(c)) {
			out = append(out, string(c))
		}
	}
	return out
}

// dsnQuote quotes a libpq key=value value.
func dsnQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// userinfo returns the forms a password takes in a URL's userinfo: as
// typed, percent-encoded as url.UserPassword does, and fully escaped.
func userinfo(user, pw string) []string {
	return []string{user + ":" + pw, url.UserPassword(user, pw).String(), user + ":" + url.QueryEscape(pw)}
}

// errorTexts returns the message of err and of every error it wraps, each
// also as %+v and %#v print it.
func errorTexts(err error) []string {
	if err == nil {
		return nil
	}
	out := []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		out = append(out, errorTexts(u.Unwrap())...)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			out = append(out, errorTexts(e)...)
		}
	}
	return out
}

// closed is an address where nothing listens: connections are refused.
const closed = "127.0.0.1:1"

// TestPasswordNeverLeaks is a property test: for any printable password,
// raw or escaped, in every URL form each backend accepts (redis, rediss,
// Redis Cluster and Sentinel, postgres URL and key=value DSN, amqp, STOMP
// addresses and passcode), no
// error (nor any error it wraps), no log line and no %v / %+v / %#v / %s of
// an exported type holds a fragment of it. Each check draws a password and
// one of the inputs. Connections go to a closed port on loopback, so what
// is checked is the parse, connect and retry paths.
func TestPasswordNeverLeaks(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pw, words := password(t)
		var outs []string
		add := func(what string, s ...string) {
			for _, x := range s {
				outs = append(outs, what+": "+x)
			}
		}
		// Each connection attempt gets its own deadline: a refused
		// connection fails at once, so the deadline only stops a retry
		// loop.
		ctx := func() context.Context {
			c, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			t.Cleanup(cancel)
			return c
		}

		var urls []string
		for _, scheme := range []string{"redis", "rediss"} {
			for _, ui := range userinfo("user", pw) {
				urls = append(urls, scheme+"://"+ui+"@"+closed+"/0?max_retries=-1")
			}
			urls = append(urls, scheme+"://:"+url.QueryEscape(pw)+"@"+closed+"/0?max_retries=-1",
				scheme+"://"+closed+"/0?max_retries=-1&password="+url.QueryEscape(pw))
		}
		for _, scheme := range []string{"postgres", "postgresql"} {
			for _, ui := range userinfo("postgres", pw) {
				urls = append(urls, scheme+"://"+ui+"@"+closed+"/test?connect_timeout=1")
			}
			urls = append(urls, scheme+"://postgres@"+closed+"/test?connect_timeout=1&password="+url.QueryEscape(pw))
		}
		dsns := []string{
			"host=127.0.0.1 port=1 user=postgres password=" + dsnQuote(pw) + " dbname=test connect_timeout=abc",
			"host=127.0.0.1 port=1 user=postgres password=" + dsnQuote(pw) + " dbname=test connect_timeout=1",
			"password = " + dsnQuote(pw) + " host=127.0.0.1 port=1 sslmode=bogus",
		}
		h := func(context.Context, *receiver.Message) error { return nil }
		var logs logbuf.Buffer
		logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		// Every check tries one input, drawn from all of them.
		var cases []func()
		for _, u := range urls {
			cases = append(cases, func() {
				s, err := idempotency.Open(ctx(), u, idempotency.Options{})
				if err == nil {
					_ = s.Close()
					t.Fatalf("%s opened", redact.URL(u))
				}
				add("idempotency.Open", errorTexts(err)...)
				m, err := metadata.Open(ctx(), u)
				if err == nil {
					_ = m.Close()
					t.Fatalf("%s opened", redact.URL(u))
				}
				add("metadata.Open", errorTexts(err)...)
				add("RedactURL", redact.URL(u), redact.Strict(u))
			})
		}
		for _, d := range dsns {
			cases = append(cases, func() {
				s, err := pgstore.Open(ctx(), d, pgstore.Options{})
				if err == nil {
					_ = s.Close()
					t.Fatal("DSN opened")
				}
				add("pgstore.Open(DSN)", errorTexts(err)...)
				add("RedactURL(DSN)", redact.URL(d))
			})
		}
		// Redis Cluster and Sentinel: the data nodes' password in the
		// userinfo, the Sentinels' in sentinel_password, each also next to
		// a query parameter go-redis refuses (its error names the
		// parameter).
		var multi []string
		for _, scheme := range []string{"redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"} {
			path := ""
			if strings.Contains(scheme, "sentinel") {
				path = "/mymaster"
			}
			for _, ui := range userinfo("user", pw) {
				for _, q := range []string{"?max_retries=-1", "?max_retries=-1&bogus=1"} {
					multi = append(multi, scheme+"://"+ui+"@"+closed+",127.0.0.1:2"+path+q)
				}
			}
			if path != "" {
				// Escaped, and escaped but for a raw '#', which starts a
				// fragment holding the rest of the password.
				for _, enc := range []string{url.QueryEscape(pw), strings.ReplaceAll(url.QueryEscape(pw), "%23", "#")} {
					for _, q := range []string{"?max_retries=-1", "?bogus=1"} {
						multi = append(multi, scheme+"://"+closed+path+q+"&sentinel_password="+enc)
					}
				}
			}
		}
		for _, u := range multi {
			cases = append(cases, func() {
				s, err := idempotency.Open(ctx(), u, idempotency.Options{})
				if err == nil {
					_ = s.Close()
					t.Fatalf("%s opened", redact.URL(u))
				}
				add("idempotency.Open", errorTexts(err)...)
				m, err := metadata.Open(ctx(), u)
				if err == nil {
					_ = m.Close()
					t.Fatalf("%s opened", redact.URL(u))
				}
				add("metadata.Open", errorTexts(err)...)
				add("RedactURL", redact.URL(u), redact.Strict(u))
			})
		}
		// RabbitMQ: the broker URL.
		for _, ui := range userinfo("guest", pw) {
			for _, u := range []string{"amqp://" + ui + "@" + closed + "/", "amqps://" + ui + "@" + closed + "/"} {
				cases = append(cases, func() {
					cfg := rabbitconsumer.Config{URL: u, Queue: "q", Handler: h, Pipeline: receiver.Config{Logger: logger}, ConnectRetries: 1,
						ConnectTimeout: time.Second, ReconnectBackoff: receiver.Backoff{Initial: time.Millisecond, Max: time.Millisecond}}
					add("rabbitconsumer.Config", fmt.Sprintf("%v|%+v|%#v|%s", cfg, cfg, cfg, cfg))
					c, err := rabbitconsumer.New(cfg)
					if err != nil {
						add("rabbitconsumer.New", errorTexts(err)...)
						return
					}
					add("rabbitconsumer.Consumer", fmt.Sprintf("%v|%+v|%#v|%s", c, c, c, c))
					add("rabbitconsumer.Run", errorTexts(c.Run(ctx()))...)
				})
			}
		}
		// STOMP: the passcode, and the password of an address's userinfo.
		addrs := [][]string{{"tcp://" + closed}, {"ssl://" + closed}}
		for _, ui := range userinfo("user", pw) {
			addrs = append(addrs, []string{"tcp://" + ui + "@" + closed}, []string{"stomp+ssl://" + ui + "@" + closed})
		}
		for _, a := range addrs {
			cases = append(cases, func() {
				cfg := stompconsumer.Config{Addresses: a, Login: "user", Passcode: pw, Pipeline: receiver.Config{Logger: logger},
					Subscriptions:  []stompconsumer.Subscription{{Destination: "/queue/q", Handler: h}},
					ConnectRetries: 1, ConnectTimeout: time.Second,
					ReconnectBackoff: receiver.Backoff{Initial: time.Millisecond, Max: time.Millisecond}}
				add("stompconsumer.Config", fmt.Sprintf("%v|%+v|%#v|%s", cfg, cfg, cfg, cfg))
				c, err := stompconsumer.New(cfg)
				if err != nil {
					add("stompconsumer.New", errorTexts(err)...)
					return
				}
				add("stompconsumer.Consumer", fmt.Sprintf("%v|%+v|%#v|%s", c, c, c, c))
				add("stompconsumer.Run", errorTexts(c.Run(ctx()))...)
			})
		}
		cases[rapid.IntRange(0, len(cases)-1).Draw(t, "input")]()
		add("log", logs.String())

		for _, o := range outs {
			for _, w := range words {
				if strings.Contains(o, w) {
					t.Fatalf("password %q: fragment %q in %s", pw, w, o)
				}
			}
		}
	})
}

// TestPasswordLeakProbe pins the cases found by hand, each a fixed input.
func TestPasswordLeakProbe(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct{ name, url, secret string }{
		{"slash in a redis password", "redis://user:TopQ/SecretQ@127.0.0.1:1/0", "TopQ"},
		{"hash in a redis password", "redis://user:TopQ#SecretQ@127.0.0.1:1/0", "TopQ"},
		{"question mark in a redis password", "redis://user:TopQ?SecretQ@127.0.0.1:1/0", "TopQ"},
		{"hash in a cluster password", "redis+cluster://user:TopQ#SecretQ@127.0.0.1:1,127.0.0.1:2", "TopQ"},
		{"question mark in a cluster password", "redis+cluster://user:TopQ?SecretQ@127.0.0.1:1?bogus=1", "SecretQ"},
		{"slash in a sentinel password", "redis+sentinel://user:TopQ/SecretQ@127.0.0.1:1/mymaster", "SecretQ"},
		{"hash in a sentinel password", "redis+sentinel://user:TopQ#SecretQ@127.0.0.1:1/mymaster", "TopQ"},
		{"space and at in a postgres password", "postgres://postgres:TopQ@ SecretQ@127.0.0.1:1/test", "SecretQ"},
		{"quoted DSN password", `host=127.0.0.1 port=1 password='TopQ\' SecretQ' connect_timeout=abc`, "SecretQ"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if strings.HasPrefix(c.url, "redis") {
				_, err = redisstore.Open(ctx, c.url, redisstore.Options{})
			} else {
				_, err = pgstore.Open(ctx, c.url, pgstore.Options{})
			}
			if err == nil {
				t.Fatal("opened")
			}
			for _, s := range errorTexts(err) {
				if strings.Contains(s, c.secret) {
					t.Fatalf("%q in %q", c.secret, s)
				}
			}
			t.Log(err)
		})
	}
}
