// Package connaudit is ActiveMQ's ConnectionAudit for one connection: it
// routes each delivered message to a message audit (package audit) by
// destination. docs/activemq-compatibility.md in the repository lists every
// difference from ActiveMQ and the test that pins it.
//
//   - Queues and temporary queues have one audit per destination, shared by
//     every consumer of the connection: a queue message redelivered to
//     another consumer is still a duplicate.
//   - Topics and temporary topics have one audit per (consumer,
//     destination): subscriber B receiving what A already got is not a
//     duplicate. A consumer subscribed to several topics has one audit per
//     topic. RemoveConsumer drops them.
//
// Each kind of audit lives in a map capped at 1000 entries by default
// (MaxDestinations, MaxConsumers) with least-recently-used eviction.
// Destinations are STOMP names (ParseDestination) or Destination values.
// A message without destination or id is not a duplicate (and is counted);
// with checking disabled nothing is recorded. Depth and producer cap changes
// apply to existing audits (resized without clearing) and to new ones.
//
// # Concurrency
//
// An Audit is safe for concurrent use and does not serialise unrelated
// destinations behind one lock (the complaint of apache/activemq #2187):
// the destination maps are copy-on-write behind atomic pointers, so finding
// a destination's audit takes no lock, and each destination's audit has its
// own mutex (audit.Locked, or audit.Sharded with Options.Shards for a busy
// queue with many producers). Creating or dropping an audit copies its map
// under a mutex (O(audits), once per destination or subscription);
// configuration changes and snapshots hold those mutexes too, so they apply
// to every audit created afterwards. The LRU order of the maps is by
// epochs: audits used since the same audit creation tie.
//
// A check that races with the eviction of its destination's audit may be
// recorded in the evicted audit (as if it had come just before the
// eviction).
//
// # Differences from ActiveMQ
//
// Checks return audit.FirstSeen / Duplicate / TooOld, not a boolean
// (IsDuplicate gives the boolean). There is one switch (Options.Disabled,
// SetEnabled), on by default, instead of ActiveMQ's two, which leave
// checking off on plain tcp:// connections. The connection audit can be
// snapshotted and restored (MarshalBinary, UnmarshalBinary); a snapshot
// restores state within the receiving audit's options and never raises
// them, so a crafted snapshot costs no more than the options allow.
package connaudit
