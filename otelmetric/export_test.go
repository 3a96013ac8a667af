package otelmetric

// BacklogAt is Backlog with the clock its cache reads.
var BacklogAt = backlog
