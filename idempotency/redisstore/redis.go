package redisstore

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/claimkit"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/internal/redisconn"
	"github.com/acemq/msgaudit/internal/storeconn"
)

// Values stored under a Redis key. A claim is "h:" followed by the owner
// token, so it can never equal the confirmation marker.
const (
	redisConfirmed   = "c"
	redisClaimPrefix = "h:"
)

// defaultPrefix is the key prefix when neither Options.Prefix nor the URL
// names one.
const defaultPrefix = "msgaudit:idempotency:"

// Options configures a Redis store. The zero value means every default.
type Options struct {
	// Options are the settings every store shares. MaxKeyLength must not
	// exceed MaxKeyLength.
	idempotency.Options
	// Prefix starts every key the store writes (for example
	// "orders:idempotency:"), so its keys never mix with what else the
	// database holds. Empty means the URL's msgaudit_prefix parameter,
	// else "msgaudit:idempotency:"; when both are set they must agree.
	Prefix string
	// TLS, for Open only, turns TLS on even for redis:// (for a custom CA
	// or a client certificate); when its ServerName is empty the host of
	// the URL's first address is used. New refuses it: TLS is the
	// client's.
	TLS *tls.Config
}

// redisPrefixParam is the query parameter of a redis:// URL that sets the
// key prefix. It is removed before the URL reaches go-redis, which rejects
// options it does not know.
const redisPrefixParam = "msgaudit_prefix"

// Script results of redisTryClaim.
const (
	redisResClaimed    = 0
	redisResConfirmed  = 1
	redisResInProgress = 2
)

// redisTryClaim answers TryClaim in one round trip: a confirmed key is
// finished work, any claim value is a live claim (an expired one is already
// gone: Redis deletes keys whose PX passed), and a free key is claimed.
//
// KEYS[1] storage key; ARGV[1] claim value "h:<token>"; ARGV[2] claim TTL ms.
var redisTryClaim = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 0
end
if v == 'c' then
  return 1
end
if string.sub(v, 1, 2) == 'h:' then
  return 2
end
return redis.error_reply('msgaudit: unexpected value under idempotency key')
`)

// redisConfirm turns the caller's claim into a confirmation retained for
// ARGV[2] ms. It changes nothing and returns 0 unless the key holds the
// caller's claim value ARGV[1].
var redisConfirm = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], 'c', 'PX', ARGV[2])
  return 1
end
return 0
`)

// redisRelease deletes the caller's claim; 0 (nothing changed) unless the key
// holds the caller's claim value ARGV[1].
var redisRelease = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`)

// redisRenew sets the caller's claim to expire ARGV[2] ms from now; 0
// (nothing changed) unless the key holds the caller's claim value ARGV[1].
var redisRenew = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// Store is an idempotency.Store on a Redis server (or cluster) through go-redis v9. Every
// key is one Redis string: "h:<owner token>" while claimed, "c" once
// confirmed. The server keeps time: a claim is written with PX claim TTL and
// a confirmation with PX retention, so Redis forgets both by itself and the
// Options clock is not used.
//
// Claim.Expires is the local time just before the call plus the claim TTL:
// the server's lease ends no earlier than that, clock skew aside. The lease
// itself is only the server's.
//
// Round trips: TryClaim, Confirm, Release and Renew each run one Lua script
// (EVALSHA; the first call after the server's script cache was emptied costs
// a second round trip for EVAL), Claim is one SET NX PX and IsConfirmed one
// GET.
//
// A Store is safe for concurrent use. It owns its client only when it was
// opened by URL (Open); a store made with New leaves the
// client to its caller, and Close does not close it.
type Store struct {
	client     redis.UniversalClient
	prefix     string
	o          idempotency.Options
	claimMS    int64
	retainMS   int64
	ownsClient bool
	g          *claimkit.Guard
}

// MaxKeyLength is the largest Options.MaxKeyLength the Redis store
// accepts: Redis itself takes keys up to 512 MiB, but every stored key is
// sent and kept whole, so longer keys are hashed well before that.
const MaxKeyLength = 64 << 10

// New returns a store that keeps its keys under opts.Prefix in client.
// The caller keeps ownership of client:
// Close leaves it open. New does no I/O; the first operation reports a
// server that cannot be reached. Every operation checks its context before
// sending; a context deadline also bounds a command in flight only when the
// client was made with ContextTimeoutEnabled (otherwise its read and write
// timeouts do).
func New(ctx context.Context, client redis.UniversalClient, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if client == nil {
		return nil, errors.New("idempotency: redisstore.New: nil client")
	}
	if opts.TLS != nil {
		return nil, fmt.Errorf("%w: redisstore.New: Options.TLS is for Open; configure TLS on the client", idempotency.ErrOptions)
	}
	return newStore(client, cmp.Or(opts.Prefix, defaultPrefix), opts.Options)
}

// newStore is New with the prefix settled.
func newStore(client redis.UniversalClient, prefix string, o idempotency.Options) (*Store, error) {
	o, err := claimkit.Normalize(o)
	if err != nil {
		return nil, err
	}
	if o.MaxKeyLength > MaxKeyLength {
		return nil, fmt.Errorf("%w: MaxKeyLength %d above the Redis store's %d", idempotency.ErrOptions, o.MaxKeyLength, MaxKeyLength)
	}
	return &Store{
		client:   client,
		prefix:   prefix,
		o:        o,
		claimMS:  durationMS(o.ClaimTTL),
		retainMS: durationMS(o.Retention),
		g:        &claimkit.Guard{Name: "redis", Prefix: prefix, MaxKeyLength: o.MaxKeyLength},
	}, nil
}

// Open connects to the Redis deployment named by rawURL and pings it once.
// For one server the URL is what go-redis's ParseURL accepts:
// redis://[user][:password]@host:port/db (user is an ACL user), rediss://
// for TLS with the system roots, unix://, plus go-redis options as query
// parameters (dial_timeout, pool_size, ...). Redis Cluster and Sentinel
// take the forms the package documentation describes:
//
//	redis+cluster://[user:pass@]host:port[,host:port…][?opts]
//	redis+sentinel://[user:pass@]host:port[,host:port…]/MASTER[/db][?opts]
//
// (rediss+cluster://, rediss+sentinel:// for TLS). The query parameter
// msgaudit_prefix sets the key prefix in every form, as Options.Prefix
// does; an empty one is an error.
//
// rediss://…?skip_verify=true (any TLS form) turns off the verification of the server's
// certificate; the store then logs a warning to Options.Logger once.
//
// A non-nil opts.TLS turns TLS on even for redis://.
//
// The client it creates honours context deadlines (go-redis's
// ContextTimeoutEnabled), and the store owns it: Close closes it. Errors
// name the URL with its password redacted; the password never appears in
// them.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o := opts.Options
	red := redact.URL(rawURL)
	if _, err := redact.ParseURL(redisconn.OneHost(rawURL)); err != nil {
		return nil, fmt.Errorf("idempotency: redis: %w", err)
	}
	clean, prefix, found, err := storeconn.CutQueryParam(rawURL, redisPrefixParam)
	if err != nil {
		return nil, storeconn.RedactError(fmt.Errorf("idempotency: redis URL %s: %w", red, err), rawURL)
	}
	switch {
	case found && prefix == "":
		return nil, fmt.Errorf("%w: redis URL %s: empty %s", idempotency.ErrOptions, red, redisPrefixParam)
	case found && opts.Prefix != "" && prefix != opts.Prefix:
		return nil, fmt.Errorf("%w: redis URL %s: %s=%q, but Options.Prefix is %q", idempotency.ErrOptions, red, redisPrefixParam, prefix, opts.Prefix)
	case !found:
		prefix = cmp.Or(opts.Prefix, defaultPrefix)
	}
	cfg, err := redisconn.Parse(clean)
	if err != nil {
		return nil, storeconn.RedactError(fmt.Errorf("idempotency: redis URL %s: %w", red, storeconn.UnwrapURLError(err)), rawURL)
	}
	cfg.SetTLS(opts.TLS)
	logRedisTLS(ctx, o.Logger, cfg.TLS(), red)
	// Honour the deadlines of the contexts passed to the store's methods,
	// not only the client's fixed read and write timeouts.
	cfg.EnableContextTimeout()
	client := cfg.NewClient()
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		err = claimkit.CtxCause(ctx, err)
		return nil, storeconn.RedactError(fmt.Errorf("idempotency: redis %s: ping: %w", red, err), rawURL)
	}
	s, err := newStore(client, prefix, o)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	s.ownsClient = true
	return s, nil
}

// openRedisURL is Open's entry for every Redis scheme.
func openRedisURL(ctx context.Context, rawURL string, o idempotency.Options) (idempotency.Store, error) {
	s, err := Open(ctx, rawURL, Options{Options: o})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// claim takes the key with SET NX PX claim TTL (the atomic two-state claim,
// for claimkit.TryClaim and the tests). ok is false when the key is
// claimed or confirmed.
func (s *Store) claim(ctx context.Context, key idempotency.Key) (idempotency.Claim, bool, error) {
	if err := s.g.Begin(ctx); err != nil {
		return idempotency.Claim{}, false, err
	}
	sk, err := s.g.StorageKey(key)
	if err != nil {
		return idempotency.Claim{}, false, err
	}
	token := claimkit.NewToken()
	start := time.Now()
	ok, err := s.client.SetNX(ctx, sk, redisClaimPrefix+token, time.Duration(s.claimMS)*time.Millisecond).Result()
	if err != nil {
		return idempotency.Claim{}, false, s.g.Error(ctx, "claim", err)
	}
	if !ok {
		return idempotency.Claim{}, false, nil
	}
	return idempotency.Claim{Key: key, Token: token, Expires: start.Add(s.o.ClaimTTL)}, true, nil
}

// TryClaim claims key, or tells a confirmed key from a claimed one, in one
// script run.
func (s *Store) TryClaim(ctx context.Context, key idempotency.Key) (idempotency.Outcome, idempotency.Claim, error) {
	if err := s.g.Begin(ctx); err != nil {
		return 0, idempotency.Claim{}, err
	}
	sk, err := s.g.StorageKey(key)
	if err != nil {
		return 0, idempotency.Claim{}, err
	}
	token := claimkit.NewToken()
	start := time.Now()
	res, err := redisTryClaim.Run(ctx, s.client, []string{sk}, redisClaimPrefix+token, s.claimMS).Int64()
	if err != nil {
		return 0, idempotency.Claim{}, s.g.Error(ctx, "try-claim", err)
	}
	switch res {
	case redisResClaimed:
		return idempotency.Claimed, idempotency.Claim{Key: key, Token: token, Expires: start.Add(s.o.ClaimTTL)}, nil
	case redisResConfirmed:
		return idempotency.AlreadyConfirmed, idempotency.Claim{}, nil
	case redisResInProgress:
		return idempotency.InProgress, idempotency.Claim{}, nil
	}
	return 0, idempotency.Claim{}, fmt.Errorf("idempotency: redis try-claim: unexpected script result %d", res)
}

// Confirm replaces the caller's claim with a confirmation retained for the
// retention period. ErrClaimLost when the key no longer holds the claim.
func (s *Store) Confirm(ctx context.Context, c idempotency.Claim) error {
	_, err := s.ownerScript(ctx, "confirm", redisConfirm, c, s.retainMS)
	return err
}

// Release deletes the caller's claim. ErrClaimLost when the key no longer
// holds it (expired, taken over or already released).
func (s *Store) Release(ctx context.Context, c idempotency.Claim) error {
	_, err := s.ownerScript(ctx, "release", redisRelease, c, 0)
	return err
}

// Renew extends the caller's claim to a full claim TTL from now. ErrClaimLost
// when the key no longer holds it.
func (s *Store) Renew(ctx context.Context, c idempotency.Claim) (idempotency.Claim, error) {
	start, err := s.ownerScript(ctx, "renew", redisRenew, c, s.claimMS)
	if err != nil {
		return idempotency.Claim{}, err
	}
	c.Expires = start.Add(s.o.ClaimTTL)
	return c, nil
}

// IsConfirmed reports whether key holds a retained confirmation (one GET).
func (s *Store) IsConfirmed(ctx context.Context, key idempotency.Key) (bool, error) {
	if err := s.g.Begin(ctx); err != nil {
		return false, err
	}
	sk, err := s.g.StorageKey(key)
	if err != nil {
		return false, err
	}
	v, err := s.client.Get(ctx, sk).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, s.g.Error(ctx, "is-confirmed", err)
	}
	return v == redisConfirmed, nil
}

// Close marks the store closed (later calls return ErrClosed) and closes
// the client if the store created it (Open); a client passed to
// New stays open.
func (s *Store) Close() error {
	if !s.g.Close() || !s.ownsClient {
		return nil
	}
	return s.client.Close()
}

// ownerScript runs one of the owner-checking scripts for c with the
// millisecond argument ms and returns the local time taken just before the
// call (the base of a renewed expiry). A script answering 0 means the key
// does not hold c's claim: ErrClaimLost, nothing changed.
func (s *Store) ownerScript(ctx context.Context, op string, script *redis.Script, c idempotency.Claim, ms int64) (time.Time, error) {
	sk, err := s.g.Owner(ctx, c)
	if err != nil {
		return time.Time{}, err
	}
	start := time.Now()
	res, err := script.Run(ctx, s.client, []string{sk}, redisClaimPrefix+c.Token, ms).Int64()
	if err != nil {
		return time.Time{}, s.g.Error(ctx, op, err)
	}
	if res != 1 {
		return time.Time{}, idempotency.ErrClaimLost
	}
	return start, nil
}

// durationMS converts d to whole milliseconds for PX and PEXPIRE, rounding
// up so a sub-millisecond remainder never shortens a lease, and at least 1.
func durationMS(d time.Duration) int64 {
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	if ms < 1 {
		ms = 1
	}
	return ms
}
