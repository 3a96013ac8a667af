package main

import (
	"context"
	"os"
	"testing"
)

// TestMain lets the test binary stand in for msgaudit as the demo's consumer
// process: the demo starts os.Executable() with demoChildEnv set.
func TestMain(m *testing.M) {
	if path := os.Getenv(demoChildEnv); path != "" {
		os.Exit(runDemoChild(context.Background(), path, os.Stderr))
	}
	os.Exit(m.Run())
}
