// Package tune sizes a message audit from traffic: it replays a trace of
// message ids through audit.Audit over a grid of window depth × producer
// cap, compares every verdict with an exact set of the ids seen, and
// recommends the smallest setting that catches every duplicate of the
// trace (or a given fraction), with a margin. It also writes synthetic
// traces whose answer is known by construction (Generate).
//
// A trace is text, one message per line: the message id
// ("<producer key>:<sequence>", see msgid.Split), optionally followed by
// whitespace and a destination. With destinations, each destination gets
// its own audit, as ActiveMQ's connection audit does for queues; the
// producer cap and the exact set are per destination. Blank lines and
// lines starting with '#' are skipped. Other unparsable lines are counted
// and reported with their line numbers (Trace.Bad, Trace.BadLines), and
// are fatal only with ReadOptions.Strict.
//
// A duplicate is an id seen before on the same destination. The replay
// classifies every duplicate the audit lets through: TooOld (the sequence
// had fallen below the producer's window, or below where the window was
// anchored) or Evicted (the producer was evicted since the id's previous
// sighting, so its window was lost; audit.Options.OnEvict tells which).
// An audit verdict Duplicate on an id not seen before is a false
// duplicate; the audit never makes one, and Replay reports it if it did.
//
// Concurrency: the functions are safe for concurrent use; a Trace is
// read-only once Read returns and may be replayed by several goroutines.
// Replay itself replays the grid cells on at most GOMAXPROCS goroutines.
// Read, Generate and Replay stop with the context's error when it is done;
// Read does so even while its reader blocks.
//
// Limits: a trace holds at most 2^31-1 message ids (ErrTooLarge); Replay
// accepts a margin in [1, 1000] and at most 64 depths and 64 caps
// (ErrOptions), and clamps its recommendation to bitsetbin.MaxDepth and
// audit.MaxProducersLimit. Memory follows the trace's size, not its number
// of destinations: a cell replays the destinations one after the other
// through one audit, so Read and Replay hold about 5 times the trace's
// text (for a trace whose every line brings a new producer and
// destination; less for a usual one) plus, per worker, the audit of the
// largest destination: up to its producers (at most the cap) times the
// depth/8 bytes of a window. Generate holds 8 bytes per producer that
// has sent.
package tune
