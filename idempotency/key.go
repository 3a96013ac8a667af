package idempotency

// Validate returns ErrInvalidKey when the key has an empty ID. An empty
// Namespace is allowed: a store serving a single consumer group may leave it
// empty, and the empty namespace is as separate from every other namespace
// as any two namespaces are.
func (k Key) Validate() error {
	if k.ID == "" {
		return ErrInvalidKey
	}
	return nil
}
