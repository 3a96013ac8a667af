// Package apitest holds the test that records the exported API of every
// public package of the module in api/, one line per identifier with its
// signature, the way Go's own api/ files do. The test fails when the code
// and the files disagree, so every change of the public surface shows in
// review as a change of an api/ file. After an intended change, rewrite the
// files with
//
//	go test ./internal/testkit/apitest -update
//
// It has no code of its own.
package apitest
