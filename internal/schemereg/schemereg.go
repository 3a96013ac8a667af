// Package schemereg is the URL-scheme registry behind idempotency.Open and
// metadata.Open: backend packages register an opener for their schemes
// from init, the way database/sql drivers do, and Open looks the scheme up.
// A scheme this module serves but the program did not import is reported
// with the package to import.
package schemereg

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Registry maps lower-case URL schemes to openers of type O. The zero value
// is not usable: build one with New.
type Registry[O any] struct {
	name     string            // the package whose registry this is, for messages
	packages map[string]string // scheme → the backend package serving it
	builtin  string            // the scheme the package serves itself ("memory")

	mu sync.RWMutex
	m  map[string]O
}

// New returns an empty registry for the package name (used in panics and
// errors), with packages naming the backend package of each scheme this
// module serves and builtin the scheme the package opens itself.
func New[O any](name, builtin string, packages map[string]string) *Registry[O] {
	return &Registry[O]{name: name, packages: packages, builtin: builtin, m: map[string]O{}}
}

// Scheme returns rawURL's scheme, lower-cased, and the rest after ':'.
func Scheme(rawURL string) (scheme, rest string) {
	scheme, rest, _ = strings.Cut(rawURL, ":")
	return strings.ToLower(scheme), rest
}

// Register adds opener for scheme (matched case-insensitively). It panics
// when scheme is empty, the builtin one or holds ':' or '/', when isNil
// reports opener nil, or when the scheme is already registered: all are
// programming errors found at start.
func (r *Registry[O]) Register(scheme string, opener O, isNil bool) {
	s := strings.ToLower(scheme)
	if s == "" || s == r.builtin || strings.ContainsAny(s, ":/") {
		panic(fmt.Sprintf("%s: Register: invalid scheme %q", r.name, scheme))
	}
	if isNil {
		panic(r.name + ": Register: nil Opener for scheme " + s)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.m[s]; dup {
		panic(r.name + ": Register called twice for scheme " + s)
	}
	r.m[s] = opener
}

// Schemes returns the registered schemes and the builtin one, sorted.
func (r *Registry[O]) Schemes() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := []string{r.builtin}
	for s := range r.m {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Lookup returns the opener registered for the lower-case scheme. Without
// one it returns an error wrapping unsupported that names the package to
// import when this module serves the scheme; shown is how the error names
// the URL (redacted, or the scheme alone), and want, when not empty, lists
// the schemes to choose from for a scheme nobody serves.
func (r *Registry[O]) Lookup(scheme, shown, want string, unsupported error) (O, error) {
	r.mu.RLock()
	opener, ok := r.m[scheme]
	r.mu.RUnlock()
	if ok {
		return opener, nil
	}
	var zero O
	if pkg, ok := r.packages[scheme]; ok {
		return zero, fmt.Errorf("%w: no backend for %q; import _ %q", unsupported, shown, pkg)
	}
	if want != "" {
		return zero, fmt.Errorf("%w: %q (want %s)", unsupported, shown, want)
	}
	return zero, fmt.Errorf("%w: %q", unsupported, shown)
}

// Swap replaces the registered openers with m and returns a function that
// puts the previous ones back, for tests of the registry's users.
func (r *Registry[O]) Swap(m map[string]O) (restore func()) {
	r.mu.Lock()
	saved := r.m
	r.m = m
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.m = saved
		r.mu.Unlock()
	}
}
