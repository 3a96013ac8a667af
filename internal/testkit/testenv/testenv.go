// Package testenv holds the one rule msgaudit's tests follow for the real
// services they need (Redis, PostgreSQL, RabbitMQ, ActiveMQ, a redis-server
// binary): when services are required — under CI=true, and under
// scripts/test, which sets MSGAUDIT_REQUIRE_SERVICES=1 — a missing service
// fails the test; elsewhere (a plain go test) it skips the test with a
// message that says how to get the service.
package testenv

import (
	"os"
	"testing"
)

// How tells a reader how to get the services the tests use.
const How = `eval "$(./scripts/services)" starts them and exports the variables; CONTRIBUTING.md lists them`

// Strict reports whether a missing service is a test failure: CI=true or
// MSGAUDIT_REQUIRE_SERVICES=1.
func Strict() bool {
	return os.Getenv("CI") == "true" || os.Getenv("MSGAUDIT_REQUIRE_SERVICES") == "1"
}

// InCI reports whether missing services fail tests; it is Strict.
func InCI() bool { return Strict() }

// Require does nothing when ok; otherwise it fails t when Strict and skips
// it elsewhere, saying what is missing and how to get it.
func Require(t testing.TB, ok bool, missing, how string) {
	t.Helper()
	if ok {
		return
	}
	if Strict() {
		t.Fatalf("%s (services are required under CI=true and scripts/test; %s)", missing, how)
		return
	}
	t.Skipf("%s: skipping (%s)", missing, how)
}

// Getenv returns the environment variable name, or skips (fails when
// Strict) the test when it is unset; what names the service it points to.
func Getenv(t testing.TB, name, what string) string {
	t.Helper()
	v := os.Getenv(name)
	Require(t, v != "", name+" is not set ("+what+")", How)
	return v
}
