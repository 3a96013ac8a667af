// Package benchreport is the report of one "msgaudit bench" run, the JSON
// document its --json flag writes: the command prints and judges it, and
// the chart command (cmd/msgaudit/benchchart, a module of its own so that
// the msgaudit command links no plotting library) draws it.
package benchreport

import "time"

// The main cell: the depth (the default audit depth) and the producer count
// (ActiveMQ's default producer cap) that the depth and producer sweeps
// cross at.
const (
	MainDepth     = 2048
	MainProducers = 64
)

// Report is everything one "msgaudit bench" run measured; it is also
// the JSON document "msgaudit bench --json" writes and the chart command
// (cmd/msgaudit/benchchart) reads.
type Report struct {
	Started    time.Time `json:"started"`
	Profile    string    `json:"profile"`
	BenchTime  string    `json:"benchtime"`
	Rounds     int       `json:"rounds"`
	GoVersion  string    `json:"go_version"`
	GOOS       string    `json:"goos"`
	GOARCH     string    `json:"goarch"`
	CPU        string    `json:"cpu"`
	GOMAXPROCS int       `json:"gomaxprocs"`
	Results    []Row     `json:"results"`
	Memory     []MemRow  `json:"memory"`
	Java       []JavaRow `json:"java,omitempty"`
	JavaError  string    `json:"java_error,omitempty"`
	Seconds    float64   `json:"seconds"`
	Targets    []Target  `json:"targets"`
	// Note says where a report came from when it was not written by
	// --json (a report rebuilt from a saved table); printed when set.
	Note string `json:"note,omitempty"`
}

// Row is one measured case: a workload, a cell (depth, producers), an
// implementation and, for the concurrent audits, a goroutine count.
type Row struct {
	Name        string  `json:"name"`
	Impl        string  `json:"impl"`
	Kind        string  `json:"kind"`
	Workload    string  `json:"workload"`
	Depth       int     `json:"depth"`
	Producers   int     `json:"producers"`
	Goroutines  int     `json:"goroutines,omitempty"`
	N           int     `json:"n"`
	NsPerOp     float64 `json:"ns_per_op"`
	AllocsPerOp int64   `json:"allocs_per_op"`
	BytesPerOp  int64   `json:"bytes_per_op"`
	// XFloor is ns/op divided by the floor-map's (cost multiple of the
	// producer-lookup-plus-bit floor); MapSpeedup and JavaSpeedup are the
	// map baseline's and ActiveMQ's ns/op divided by this one's.
	XFloor        float64  `json:"x_floor,omitempty"`
	MapSpeedup    float64  `json:"map_speedup,omitempty"`
	JavaSpeedup   float64  `json:"java_speedup,omitempty"`
	BytesProducer *float64 `json:"bytes_per_producer,omitempty"`
	Error         string   `json:"error,omitempty"`
}

// MemRow is one heap measurement: the bytes an implementation retains
// after filling a cell.
type MemRow struct {
	Name             string  `json:"name"`
	Impl             string  `json:"impl"`
	Depth            int     `json:"depth"`
	Producers        int     `json:"producers"`
	Fill             int     `json:"ids_per_producer"`
	Bytes            int64   `json:"bytes"`
	BytesPerProducer float64 `json:"bytes_per_producer"`
	BytesPerID       float64 `json:"bytes_per_id"`
	Error            string  `json:"error,omitempty"`
}

// JavaRow is one measurement of ActiveMQ's Java audit on the same
// workload.
type JavaRow struct {
	Name          string  `json:"name"`
	Impl          string  `json:"impl"`
	Workload      string  `json:"workload"`
	Depth         int     `json:"depth"`
	Producers     int     `json:"producers"`
	N             int     `json:"n"`
	NsPerOp       float64 `json:"ns_per_op"`
	MedianNsPerOp float64 `json:"median_ns_per_op"`
	BytesPerOp    float64 `json:"bytes_per_op"`
	Duplicates    int     `json:"duplicates"`
	Expected      int     `json:"expected_duplicates"`
}

// Target is one performance target judged on one run: Target says what
// is required, Value what the run measured.
type Target struct {
	Target string `json:"target"`
	Value  string `json:"value"`
	Met    bool   `json:"met"`
}
