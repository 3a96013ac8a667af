package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/claimkit"
)

var _ idempotency.BatchStore = (*Store)(nil)

// TryClaimBatch try-claims every key in one pipeline of the TryClaim script
// (one round trip; a second one, EVAL, only for scripts the server's cache
// lost). Each script call still takes exactly one key, so a batch is
// Cluster-safe whatever slots its keys hash to: a cluster client splits the
// pipeline per node and follows redirects itself.
//
// A key repeated in the batch is sent once; its later occurrences get the
// answer TryClaim would give right after the first: InProgress when the
// first claimed it, otherwise the first's answer (its error included).
//
// A key the store cannot use gets ErrInvalidKey in its result without I/O.
// When the server answers some keys and not others (a cluster node down, a
// connection cut mid-pipeline) each unanswered key carries its own error
// and the answered ones their verdicts; only when no key got an answer is
// the error returned for the whole batch. As with TryClaim, a key the
// server claimed but whose answer was lost stays claimed, by a token nobody
// holds, until the claim TTL ends; and when go-redis resends a pipeline
// whose answers it lost, a resent try-claim answers InProgress and a
// resent confirm or release ErrClaimLost: errors on the safe side (nothing
// is acknowledged), never a false Claimed or AlreadyConfirmed.
func (s *Store) TryClaimBatch(ctx context.Context, keys []idempotency.Key, res []idempotency.ClaimResult) error {
	if len(res) != len(keys) {
		return fmt.Errorf("idempotency: redis try-claim batch: %d results for %d keys", len(res), len(keys))
	}
	if err := s.g.Begin(ctx); err != nil {
		return err
	}
	var b batch
	tokens := make([]string, len(keys))
	sks := make([]string, len(keys))
	dupOf := make([]int, len(keys)) // index of the key's first occurrence, or -1
	var first map[string]int        // from 16 keys on: storage key → first index
	for i, k := range keys {
		res[i] = idempotency.ClaimResult{}
		dupOf[i] = -1
		sk, err := s.g.StorageKey(k)
		if err != nil {
			res[i].Err = err
			continue
		}
		sks[i] = sk
		if j := firstIndex(sks[:i], sk, &first); j >= 0 {
			dupOf[i] = j
			continue
		}
		tokens[i] = claimkit.NewToken()
		b.add(i, sk, redisClaimPrefix+tokens[i], s.claimMS)
	}
	start := time.Now()
	if err := b.run(ctx, s, "try-claim", redisTryClaim); err != nil {
		return err // no key got an answer
	}
	for n, i := range b.idx {
		if b.errs[n] != nil {
			res[i].Err = b.errs[n]
			continue
		}
		switch b.res[n] {
		case redisResClaimed:
			res[i].Outcome = idempotency.Claimed
			res[i].Claim = idempotency.Claim{Key: keys[i], Token: tokens[i], Expires: start.Add(s.o.ClaimTTL)}
		case redisResConfirmed:
			res[i].Outcome = idempotency.AlreadyConfirmed
		case redisResInProgress:
			res[i].Outcome = idempotency.InProgress
		default:
			res[i].Err = fmt.Errorf("idempotency: redis try-claim: unexpected script result %d", b.res[n])
		}
	}
	for i, j := range dupOf {
		if j < 0 {
			continue
		}
		switch {
		case res[j].Err != nil:
			res[i].Err = res[j].Err
		case res[j].Outcome == idempotency.Claimed:
			res[i].Outcome = idempotency.InProgress
		default:
			res[i].Outcome = res[j].Outcome
		}
	}
	return nil
}

// ConfirmBatch confirms every claim in one pipeline of the Confirm script;
// errs[i] is what Confirm would return for claims[i] (ErrClaimLost when
// the key no longer holds it). Claims of a key that occurs more than once
// go in order, one pipeline per occurrence, so the second confirm of a key
// sees what the first did. Partial answers are reported per claim, as in
// TryClaimBatch.
func (s *Store) ConfirmBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	return s.ownerBatch(ctx, "confirm", redisConfirm, claims, errs, s.retainMS)
}

// ReleaseBatch releases every claim in one pipeline of the Release script,
// as ConfirmBatch confirms them.
func (s *Store) ReleaseBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	return s.ownerBatch(ctx, "release", redisRelease, claims, errs, 0)
}

// ownerBatch runs one of the owner-checking scripts for every claim: the
// first occurrence of each key in one pipeline, the second occurrences in
// the next, and so on, so that the calls on one key keep slice order.
func (s *Store) ownerBatch(ctx context.Context, op string, script *redis.Script, claims []idempotency.Claim, errs []error, ms int64) error {
	if len(errs) != len(claims) {
		return fmt.Errorf("idempotency: redis %s batch: %d errors for %d claims", op, len(errs), len(claims))
	}
	if err := s.g.Begin(ctx); err != nil {
		return err
	}
	// round[i] is the occurrence number of claims[i]'s key (0 for the
	// first), -1 for a claim answered without I/O.
	round := make([]int, len(claims))
	keys := make([]string, len(claims))
	var seen map[string]int // made at the first repeated key only
	rounds := 0
	for i, c := range claims {
		errs[i] = nil
		round[i] = -1
		sk, err := s.g.StorageKey(c.Key)
		if err != nil {
			errs[i] = err
			continue
		}
		if c.Token == "" {
			errs[i] = idempotency.ErrClaimLost
			continue
		}
		keys[i] = sk
		round[i] = occurrence(keys[:i], round[:i], sk, &seen)
		rounds = max(rounds, round[i]+1)
	}
	sent, failed := 0, 0
	var firstErr error
	for r := range rounds {
		var b batch
		for i, c := range claims {
			if round[i] == r {
				b.add(i, keys[i], redisClaimPrefix+c.Token, ms)
			}
		}
		err := b.run(ctx, s, op, script)
		for n, i := range b.idx {
			sent++
			switch {
			case b.errs[n] != nil:
				errs[i] = b.errs[n]
				failed++
			case b.res[n] != 1:
				errs[i] = idempotency.ErrClaimLost
			}
		}
		firstErr = cmpOr(firstErr, err)
	}
	if sent > 0 && failed == sent {
		return firstErr // no claim got an answer: the batch failed as a whole
	}
	return nil
}

// firstIndex returns the index in sks of the first element equal to sk
// (empty elements are keys not sent and never match), or -1, and records
// sk as seen at index len(sks). Small batches compare directly; from 16
// keys on, first indexes are kept in *first.
func firstIndex(sks []string, sk string, first *map[string]int) int {
	if *first == nil && len(sks) < 16 {
		for j, k := range sks {
			if k == sk {
				return j
			}
		}
		return -1
	}
	if *first == nil {
		*first = make(map[string]int, 2*len(sks))
		for j, k := range sks {
			if _, ok := (*first)[k]; !ok && k != "" {
				(*first)[k] = j
			}
		}
	}
	if j, ok := (*first)[sk]; ok {
		return j
	}
	(*first)[sk] = len(sks)
	return -1
}

// occurrence returns how many of keys (the storage keys before this one,
// with their rounds; round -1 marks a claim not sent) equal sk. Small
// batches compare directly; from 16 keys on, counts are kept in *seen.
func occurrence(keys []string, round []int, sk string, seen *map[string]int) int {
	if *seen == nil && len(keys) < 16 {
		n := 0
		for j, k := range keys {
			if round[j] >= 0 && k == sk {
				n++
			}
		}
		return n
	}
	if *seen == nil {
		*seen = make(map[string]int, 2*len(keys))
		for j, k := range keys {
			if round[j] >= 0 {
				(*seen)[k]++
			}
		}
	}
	n := (*seen)[sk]
	(*seen)[sk] = n + 1
	return n
}

// cmpOr returns a unless it is nil, else b.
func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// batch is one pipeline of calls of one script, each on one key with a
// claim value and a millisecond argument.
type batch struct {
	idx  []int // idx[n]: the caller's index of call n
	keys []string
	args []string
	ms   []int64
	// Results of run, by call: the script's integer answer, or the call's
	// own error.
	res  []int64
	errs []error
}

// add queues a call on storage key sk for the caller's index i.
func (b *batch) add(i int, sk, arg string, ms int64) {
	b.idx = append(b.idx, i)
	b.keys = append(b.keys, sk)
	b.args = append(b.args, arg)
	b.ms = append(b.ms, ms)
}

// run sends every queued call in one pipeline of EVALSHA and fills res and
// errs. Calls answered NOSCRIPT (the server's script cache was emptied, or
// a cluster node never saw the script) did not run; they are sent again
// with EVAL in a second pipeline. Within one batch every key is distinct,
// so that second pipeline cannot reorder two calls on one key. run returns
// an error when no call got an answer (the first call's error, wrapped as
// opError wraps it); it is also in errs.
func (b *batch) run(ctx context.Context, s *Store, op string, script *redis.Script) error {
	n := len(b.idx)
	if n == 0 {
		return nil
	}
	b.res = make([]int64, n)
	b.errs = make([]error, n)
	cmds := make([]*redis.Cmd, n)
	keyArgs := make([][1]string, n)
	ms := make([]any, n) // boxed once: the calls of a batch mostly share one value
	pipe := s.client.Pipeline()
	for k := range n {
		keyArgs[k][0] = b.keys[k]
		if k > 0 && b.ms[k] == b.ms[k-1] {
			ms[k] = ms[k-1]
		} else {
			ms[k] = b.ms[k]
		}
		cmds[k] = script.EvalSha(ctx, pipe, keyArgs[k][:], b.args[k], ms[k])
	}
	_, _ = pipe.Exec(ctx) // each command's error is read below
	var retry []int
	for k, c := range cmds {
		if err := c.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			retry = append(retry, k)
		}
	}
	if len(retry) > 0 {
		pipe = s.client.Pipeline()
		for _, k := range retry {
			cmds[k] = script.Eval(ctx, pipe, keyArgs[k][:], b.args[k], ms[k])
		}
		_, _ = pipe.Exec(ctx)
	}
	answered := 0
	var firstErr error
	for k, c := range cmds {
		v, err := c.Int64()
		if err != nil {
			b.errs[k] = s.g.Error(ctx, op, err)
			firstErr = cmpOr(firstErr, b.errs[k])
			continue
		}
		b.res[k] = v
		answered++
	}
	if answered == 0 {
		return firstErr
	}
	return nil
}
