// Package audit is msgaudit's message audit: ActiveMQ Classic's client-side
// duplicate detection (ActiveMQMessageAudit and ActiveMQMessageAuditNoSync)
// without its holes; docs/activemq-compatibility.md in the repository lists
// every difference from ActiveMQ and the test that pins it. It keeps an LRU
// of producer keys (a map and a list threaded through the entries, with
// golang-lru simplelru's semantics; see below), each with a sliding window of
// sequence numbers (bitsetbin.Bin). An id is "<producer key>:<sequence>"
// (msgid.Split); checking it returns FirstSeen, Duplicate or TooOld in O(1),
// and allocates nothing for a producer already tracked.
//
// # Concurrency
//
// Three types share one method set:
//
//   - Audit is unsynchronized: one goroutine at a time (like simplelru.LRU
//     and bitset.BitSet). Its counters are plain integers.
//   - Locked wraps an Audit in one sync.Mutex; every method, reads included,
//     holds it (ActiveMQ leaves rollback(String), getLastSeqId and clear
//     unlocked).
//   - Sharded places producers in independently locked shards, one per
//     shard while shards outnumber producers, so checks of different
//     producers run in parallel; see Sharded for how its LRU order differs.
//
// Locked and Sharded call Options.OnEvict after releasing their locks (the
// evictions are buffered under the lock, as golang-lru does); Audit calls it
// before the method returns. Stats of Locked and Sharded is a consistent
// snapshot.
//
// # The LRU
//
// The producers are kept least recently used first, as golang-lru's
// simplelru keeps them (the audit's first version used simplelru): a check,
// a rollback or IsInOrder refreshes a producer; LastSeq does not. The list
// is the audit's own so that an entry carries its links (simplelru's
// separate 80-byte element put the memory per producer above depth/8+256
// bytes) and so that, until the cap is first reached, a check only stamps
// the producer instead of relinking it; the order is derived from the
// stamps when it is needed. The eviction order is exactly simplelru's.
//
// # Differences from ActiveMQ
//
//   - Malformed ids (no colon, empty key or sequence, signs, spaces, leading
//     zeros, overflow) and ids longer than MaxIDLength are errors, counted,
//     and create no producer entry, so garbage cannot evict real producers
//     (ActiveMQ creates the entry, then throws or answers "not a
//     duplicate").
//   - TooOld is its own sighting; IsDuplicate reports only Duplicate as true,
//     which fails open like ActiveMQ.
//   - Rollback never creates a producer and never slides a window (ActiveMQ's
//     rollback of a sequence above the window slides it and wipes its
//     history); LastSeq is the true highest recorded sequence and a pure
//     read.
//   - SetDepth resizes the windows of existing producers without clearing
//     them (ActiveMQ's setAuditDepth applies only to producers seen
//     afterwards); SetMaxProducers keeps the most recently used producers
//     when shrinking, as ActiveMQ does since AMQ-4233.
//   - MaxProducers 0 means the default (64), not "track nothing".
//   - Evictions are counted, and evictions of recently active producers
//     separately (RecentEvictions), so a producer-key flood is visible.
//   - MarshalBinary/UnmarshalBinary snapshot the whole audit (producers in
//     LRU order with their windows) in a versioned, checksummed format; a
//     corrupt snapshot is an error wrapping ErrCorrupt and changes nothing.
//
// # Naming
//
// A check answers a Sighting (FirstSeen, Duplicate or TooOld), the same
// type and values as bitsetbin's; "verdict" is the receiver's word for its
// decision (Accept, Reject, Defer). Stats.FirstSeen counts FirstSeen.
package audit
