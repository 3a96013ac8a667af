//go:build !unix

package storetest

// processCPU is unavailable here; benchmarks then omit cpu-ns/op.
func processCPU() (int64, bool) { return 0, false }
