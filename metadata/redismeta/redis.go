package redismeta

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/acemq/msgaudit/metadata"
)

// defaultPrefix is the key prefix when Options.Prefix and the URL name
// none.
const defaultPrefix = "msgaudit:meta:"

// Options configures a Redis metadata store. The zero value means every
// default.
type Options struct {
	// Prefix starts every key the store writes, so the store never shares
	// keys with other data. Empty means "msgaudit:meta:".
	Prefix string
}

// Store is a metadata.Store in Redis: one string per key, under a prefix.
// PutIfAbsent and Replace are Lua scripts, so each is one atomic round trip
// (and each touches one key, so they work on Redis Cluster).
type Store struct {
	client redis.UniversalClient
	prefix string
	owned  bool // Close closes client
}

var _ metadata.StoreCloser = (*Store)(nil)

// putIfAbsentScript returns {1} when it stored ARGV[1], else {0, prev}.
var putIfAbsentScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then return {0, v} end
redis.call('SET', KEYS[1], ARGV[1])
return {1}
`)

// replaceScript sets KEYS[1] to ARGV[2] only if it holds exactly ARGV[1].
var replaceScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// removeScript deletes KEYS[1] only if it holds exactly ARGV[1].
var removeScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`)

// New returns a store that keeps its keys under opts.Prefix in client (a
// *redis.Client, *redis.ClusterClient or ring the application already has;
// Close leaves it open). New does no I/O.
func New(ctx context.Context, client redis.UniversalClient, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return newStore(client, cmp.Or(opts.Prefix, defaultPrefix))
}

// newStore is New with the prefix settled; an empty one (from a URL's
// msgaudit_prefix=) is refused.
func newStore(client redis.UniversalClient, prefix string) (*Store, error) {
	if client == nil {
		return nil, errors.New("metadata: redismeta.New: nil client")
	}
	if prefix == "" {
		return nil, fmt.Errorf("%w: empty Redis prefix", metadata.ErrInvalidName)
	}
	return &Store{client: client, prefix: prefix}, nil
}

// Get implements Store.
func (s *Store) Get(ctx context.Context, key string) (string, bool, error) {
	sk, err := check(ctx, key)
	if err != nil {
		return "", false, err
	}
	v, err := s.client.Get(ctx, s.prefix+sk).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("metadata: redis get: %w", err)
	}
	return v, true, nil
}

// PutIfAbsent implements Store.
func (s *Store) PutIfAbsent(ctx context.Context, key, value string) (string, bool, error) {
	sk, err := check(ctx, key, value)
	if err != nil {
		return "", false, err
	}
	res, err := putIfAbsentScript.Run(ctx, s.client, []string{s.prefix + sk}, value).Slice()
	if err != nil {
		return "", false, fmt.Errorf("metadata: redis put-if-absent: %w", err)
	}
	if len(res) == 1 {
		return "", true, nil
	}
	if len(res) != 2 {
		return "", false, fmt.Errorf("metadata: redis put-if-absent: unexpected reply %v", res)
	}
	prev, ok := res[1].(string)
	if !ok {
		return "", false, fmt.Errorf("metadata: redis put-if-absent: unexpected reply type %T", res[1])
	}
	return prev, false, nil
}

// Replace implements Store.
func (s *Store) Replace(ctx context.Context, key, old, new string) (bool, error) {
	sk, err := check(ctx, key, old, new)
	if err != nil {
		return false, err
	}
	n, err := replaceScript.Run(ctx, s.client, []string{s.prefix + sk}, old, new).Int()
	if err != nil {
		return false, fmt.Errorf("metadata: redis replace: %w", err)
	}
	return n == 1, nil
}

// Remove implements Remover.
func (s *Store) Remove(ctx context.Context, key, value string) (bool, error) {
	sk, err := check(ctx, key, value)
	if err != nil {
		return false, err
	}
	n, err := removeScript.Run(ctx, s.client, []string{s.prefix + sk}, value).Int()
	if err != nil {
		return false, fmt.Errorf("metadata: redis remove: %w", err)
	}
	return n == 1, nil
}

// Close closes the client if Open created it; a client passed to New
// is left open.
func (s *Store) Close() error {
	if s.owned {
		return s.client.Close()
	}
	return nil
}
