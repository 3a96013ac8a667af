package connaudit

// The default table caps, for the external tests.
const (
	DefaultMaxDestinations = defaultMaxDestinations
	DefaultMaxConsumers    = defaultMaxConsumers
)
