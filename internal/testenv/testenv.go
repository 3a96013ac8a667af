// Package testenv holds the one rule msgaudit's tests follow for the real
// services they need (Redis, PostgreSQL, RabbitMQ, ActiveMQ, a redis-server
// binary): outside CI a missing service skips the test with a message that
// says how to get it; under CI=true it fails the test, never a silent skip.
package testenv

import (
	"os"
	"testing"
)

// InCI reports whether the tests run in CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Require does nothing when ok; otherwise it fails t under CI=true and
// skips it elsewhere, saying what is missing and how to get it.
func Require(t testing.TB, ok bool, missing, how string) {
	t.Helper()
	if ok {
		return
	}
	if InCI() {
		t.Fatalf("%s (CI=true: it is required)", missing)
		return
	}
	t.Skipf("%s: skipping (%s)", missing, how)
}

// Getenv returns the environment variable name, or skips (fails in CI) the
// test when it is unset; what names the service it points to.
func Getenv(t testing.TB, name, what string) string {
	t.Helper()
	v := os.Getenv(name)
	Require(t, v != "", name+" is not set ("+what+")",
		"scripts/test exports it from a services kit; see the README")
	return v
}
