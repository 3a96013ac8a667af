package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	t.Parallel()
	// The common forms (userinfo, password= and sslpassword=, bad ports
	// and escapes, libpq quoting, opaque, host-less and scheme-less
	// strings) are tabled by TestURLStoreForms
	// through its wrapper; these are the cases it does not cover.
	tests := []struct{ in, want string }{
		{"", ""},
		{"postgres://h/db?token=s3cret", "postgres://h/db?token=xxxxx"},
		// Any parameter whose name contains "pass" is a secret (stricter
		// than a fixed list; rabbitconsumer's former rule).
		{"amqp://h/v?passphrase=s3cret", "amqp://h/v?passphrase=xxxxx"},
		{"amqp://h/v?Key_Pass=s3cret&x=1", "amqp://h/v?Key_Pass=xxxxx&x=1"},
		{"host=h passfile=/p sslmode=disable", "host=h passfile=xxxxx sslmode=disable"},
		// An unchanged URL comes back byte for byte, odd encoding and all.
		{"amqp://h/v?b=1&a=%41", "amqp://h/v?b=1&a=%41"},
		// A password holding '@' (url.Parse splits at the last '@').
		{"tcp://u:sec@ret@h:1", "tcp://u:xxxxx@h:1"},
		// A query url.ParseQuery rejects is masked textually.
		{"postgres://h/db?password=s3%zzcret&x=1", "postgres://h/db?password=xxxxx&x=1"},
		{"amqp://h/v?x=%zz&secret=s3cret", "amqp://h/v?x=%zz&secret=xxxxx"},
		// A known scheme then userinfo without ':': the "scheme" may be
		// the user of the password that follows.
		{"postgres:s3cret@h", "postgres:xxxxx@h"},
		{"redis:s3cret@h:6379/0?x=1", "redis:xxxxx@h:6379/0?x=1"},
		{"redis:@h", "redis:@h"},
		// A raw '#' in a query password starts a fragment: masked with it.
		{"redis+sentinel://h:1/m?sentinel_password=AB#JJJJ&x=1", "redis+sentinel://h:1/m?sentinel_password=xxxxx#xxxxx"},
		{"redis://u:pw@h/0#rest", "redis://u:xxxxx@h/0#xxxxx"},
		{"redis://h/0?x=1#frag", "redis://h/0?x=1#frag"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			if got := URL(tt.in); got != tt.want {
				t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestStrict(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"redis://user:s3cret@127.0.0.1:6379/0", "redis://user:xxxxx@127.0.0.1:6379/0"},
		{"postgres://u@h/db?password=s3cret", "postgres://u@h/db?password=xxxxx"},
		{"tcp://u:sec@ret@h:1", "tcp://u:xxxxx@h:1"},
		{"tcp://h:1", "tcp://h:1"},
		{"h:1", "h:1"},
		{"memory", "memory"},
		// An opaque part holding userinfo shows nothing but the scheme.
		{"u:s3cret@h/x y", "u:(redacted)"},
		{"redis:u:s3cret@h:6379", "redis:(redacted)"},
		{"redis:h:6379", "redis:h:6379"},
		// What url.Parse rejects falls back to URL's textual masking.
		{"redis://u:s3cret@host:notaport", "redis://u:xxxxx@host:notaport"},
	}
	for _, tt := range tests {
		if got := Strict(tt.in); got != tt.want {
			t.Errorf("Strict(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestIsSecretParam(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"password": true, "PASSWORD": true, "pass": true, "passwd": true, "sslpassword": true,
		"secret": true, "token": true, "passphrase": true, "x_pass": true,
		"sslmode": false, "user": false, "host": false, "tokens": false, "": false,
	} {
		if got := IsSecretParam(name); got != want {
			t.Errorf("IsSecretParam(%q) = %t, want %t", name, got, want)
		}
	}
}

// FuzzURL checks that a password placed in the userinfo or in a password=
// parameter never survives URL or Strict, whatever surrounds it, and that
// neither ParseURL's nor ParseQuery's error quotes any part of it. The
// password is tried as is and holding each malformed %-escape of
// badEscapes, so no fragment of it (either side of the escape) may show.
func FuzzURL(f *testing.F) {
	f.Add("redis", "user", "host:6379", "/0")
	f.Add("postgres", "postgres", "127.0.0.1:5432", "/test?sslmode=disable")
	f.Add("rediss", "", "h:1", "")
	f.Add("postgres", "u", "h:notaport", "/db")
	f.Add("tcp", "admin", "h:61613", "")
	f.Add("redis+sentinel", "", "h:26379", "/mymaster?x=%zz")
	f.Add("mysql", "root", "h", "/db?a=1")
	badEscapes := []string{"", "%", "%K", "%Kx", "%4", "%%", "%g0", "%4%"}
	f.Fuzz(func(t *testing.T, scheme, user, host, rest string) {
		const head, tail = "Zq7SEC", "RETpw9"
		if strings.ContainsAny(user+host, "/") || strings.ContainsAny(user+host+rest, "@ \t&;?=#") || strings.Contains(scheme+user+host+rest, "SEC") || strings.Contains(scheme+user+host+rest, "RET") {
			return // the secret's boundaries become ambiguous; covered by the tables
		}
		for _, esc := range badEscapes {
			pw := head + esc + tail
			leaks := func(s string) bool {
				return strings.Contains(s, head) || strings.Contains(s, tail) || esc != "" && strings.Contains(s, esc+"R")
			}
			for _, in := range []string{
				scheme + "://" + user + ":" + pw + "@" + host + rest,
				scheme + "://" + host + rest + "?password=" + pw,
				scheme + "://" + host + "/db?x=1&password=" + pw + "&y=2",
				scheme + "://" + host + "/m?x=1&sentinel_password=" + pw,
				scheme + ":" + user + ":" + pw + "@" + host + rest,
				"//" + user + ":" + pw + "@" + host + rest,
				user + ":" + pw + "@" + host + rest,
				scheme + ":/" + user + ":" + pw + "@" + host + rest,
			} {
				for name, fn := range map[string]func(string) string{"URL": URL, "Strict": Strict} {
					if got := fn(in); leaks(got) {
						t.Fatalf("%s(%q) = %q keeps the password", name, in, got)
					}
				}
				if _, err := ParseURL(in); err != nil && leaks(err.Error()) {
					t.Fatalf("ParseURL(%q): %v quotes the password", in, err)
				}
				if _, query, ok := strings.Cut(in, "?"); ok {
					if _, err := ParseQuery(query); err != nil && leaks(err.Error()) {
						t.Fatalf("ParseQuery(%q): %v quotes the password", query, err)
					}
				}
			}
			if !strings.ContainsAny(user, `'\`) {
				in := "host=" + host + " password='" + user + " " + pw + "' user=u"
				if got := URL(in); leaks(got) {
					t.Fatalf("URL(%q) = %q keeps the password", in, got)
				}
			}
		}
	})
}
