package redact

import "testing"

// TestURLStoreForms tables the store URL forms URL masks (it was the
// test of idempotency.RedactURL); the fuzz target is FuzzURL.
func TestURLStoreForms(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{"memory", "memory"},
		{"sqlite:/tmp/x.db", "sqlite:/tmp/x.db"},
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"redis://:s3cret@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
		{"rediss://user:s3cret@host:6380", "rediss://user:xxxxx@host:6380"},
		{"redis://user@host", "redis://user@host"},
		{"postgres://postgres:s3cret@127.0.0.1:5432/test?sslmode=disable", "postgres://postgres:xxxxx@127.0.0.1:5432/test?sslmode=disable"},
		{"postgres://h/db?password=s3cret&sslmode=disable", "postgres://h/db?password=xxxxx&sslmode=disable"},
		{"postgres://h/db?sslpassword=s3cret", "postgres://h/db?sslpassword=xxxxx"},
		// Unparseable (bad port, bad escape): masked textually.
		{"redis://u:s3cret@host:notaport", "redis://u:xxxxx@host:notaport"},
		{"postgres://u:s3%zzcret@h/db", "postgres://u:xxxxx@h/db"},
		{"host=h password=s3cret user=u", "host=h password=xxxxx user=u"},
		// libpq key/value strings: spaces around '=', quotes, escapes.
		{"host=h password='s3 cret' user=u", "host=h password=xxxxx user=u"},
		{"host=h password = s3cret user=u", "host=h password = xxxxx user=u"},
		{`password=s3\ cret host=h`, "password=xxxxx host=h"},
		{`password='s3\'c ret' host=h`, "password=xxxxx host=h"},
		{"host=h password='s3 cret", "host=h password=xxxxx"},
		{"host=h sslmode=disable", "host=h sslmode=disable"},
		// Opaque forms (no "//"): url.Parse puts the userinfo in Opaque.
		{"redis:u:s3cret@h:6379", "redis:u:xxxxx@h:6379"},
		{"redis::s3cret@h:6379/0", "redis::xxxxx@h:6379/0"},
		{"REDISS:u:s3:cret@h", "REDISS:u:xxxxx@h"},
		{"postgres:u:s3cret@h/db?sslmode=disable", "postgres:u:xxxxx@h/db?sslmode=disable"},
		{"redis:u:s3cret@h?password=s3cret", "redis:u:xxxxx@h?password=xxxxx"},
		{"redis:h:6379", "redis:h:6379"},
		// An unknown scheme without "//" may be a user: mask from its colon.
		{"foo:s3cret@h", "foo:xxxxx@h"},
		{"mailto:joe@example.com", "mailto:xxxxx@example.com"},
		// Userinfo-like text in a path with no host.
		{"redis:/u:s3cret@h:6379", "redis:/u:xxxxx@h:6379"},
		{"redis:///u:s3cret@h:6379", "redis:///u:xxxxx@h:6379"},
		{"redis://h:6379/0", "redis://h:6379/0"},
		// No scheme at all.
		{"//u:s3cret@h:6379", "//u:xxxxx@h:6379"},
		{"u:s3cret@h:6379", "u:xxxxx@h:6379"},
		{"u:s3:cret@h:6379", "u:xxxxx@h:6379"},
		{"h:6379", "h:6379"},
		// An invalid scheme token is not skipped: mask from the first colon.
		{"my_db://u:s3cret@h", "my_db:xxxxx@h"},
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
