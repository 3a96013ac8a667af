package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Report is the result of Run: every sample and one summary row per
// variant.
type Report struct {
	// Date is when the run started.
	Date time.Time `json:"date"`
	// The run's parameters.
	Messages    int `json:"messages"`
	Rounds      int `json:"rounds"`
	BodyBytes   int `json:"body_bytes"`
	Concurrency int `json:"concurrency"`
	Prefetch    int `json:"prefetch"`
	// InFlight is the consumers' pipeline depth: Options.InFlight, or the
	// consumers' default for Concurrency and Prefetch.
	InFlight int `json:"in_flight"`
	// StoreBatch and StoreLinger are Options.StoreBatch and StoreLinger
	// (0: the receiver's defaults).
	StoreBatch  int           `json:"store_batch,omitempty"`
	StoreLinger time.Duration `json:"store_linger_ns,omitempty"`
	// InboxBatch and InboxLinger are Options.InboxBatch and InboxLinger
	// (0: the inbox's defaults).
	InboxBatch  int           `json:"inbox_batch,omitempty"`
	InboxLinger time.Duration `json:"inbox_linger_ns,omitempty"`
	// Rate is Options.Rate: the offered msgs/s of latency mode, 0 for
	// throughput mode.
	Rate float64 `json:"offered_msgs_per_s,omitempty"`
	// Outbox is Options.Outbox: the outbox measurement run, "" for the
	// consumers' variants.
	Outbox string `json:"outbox,omitempty"`
	// CPUProfile names the file a CPU profile of the whole run went to
	// ("" for none); the caller that profiled the run sets it. Profiling
	// adds to the client's CPU time.
	CPUProfile string `json:"cpu_profile,omitempty"`
	// The machine: logical CPUs, the CPU model (from /proc/cpuinfo, "" where
	// unknown) and the Go version.
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model"`
	GoVersion string `json:"go_version"`
	// Samples are the measurements in the order they ran.
	Samples []Sample `json:"samples"`
	// Rows summarise the samples per variant, in Variants order.
	Rows []Row `json:"rows"`
}

// Row summarises one variant over the rounds.
type Row struct {
	Broker  string `json:"broker"`
	Variant string `json:"variant"`
	// Rounds is the number of samples summarised.
	Rounds int `json:"rounds"`
	// Median, Min and Max are msgs/s over the rounds.
	Median float64 `json:"median_msgs_per_s"`
	Min    float64 `json:"min_msgs_per_s"`
	Max    float64 `json:"max_msgs_per_s"`
	// Ratio is the median over the rounds of this variant's rate divided by
	// the rate of the same broker's bare client in the same round (0 when
	// no round has both).
	Ratio float64 `json:"ratio_to_bare"`
	// CPUMicros is the median client CPU time per message, µs.
	CPUMicros float64 `json:"cpu_us_per_msg"`
	// Machine is the median over the rounds of each field of the samples'
	// MachineCPU (Store over the rounds that have it); nil when no sample
	// has one.
	Machine *MachineCPU `json:"machine_cpu,omitempty"`
	// EffectRatio, for the effect variants other than bare-effect-* (the
	// bare client with a hand-written inbox row, and msgaudit's audit,
	// stores and inboxes with the same INSERT), is the median over the
	// rounds of the rate divided by that of the bare client committing the
	// same effect to the same database (bare-effect-<db>) in the same
	// round; 0 otherwise.
	EffectRatio float64 `json:"ratio_to_bare_effect,omitempty"`
	// P50Millis and P99Millis are, in latency mode, the medians over the
	// rounds of the samples' P50Millis and P99Millis.
	P50Millis float64 `json:"p50_ms,omitempty"`
	P99Millis float64 `json:"p99_ms,omitempty"`
	// Tail is the median over the rounds of each field of the samples'
	// Tail; nil when none has one.
	Tail *Tail `json:"tail,omitempty"`
}

func newReport(p *plan) *Report {
	return &Report{
		Date:        time.Now().UTC(),
		Messages:    p.Messages,
		Rounds:      p.Rounds,
		BodyBytes:   p.BodyBytes,
		Concurrency: p.Concurrency,
		Prefetch:    p.Prefetch,
		InFlight:    p.inFlight(),
		StoreBatch:  p.StoreBatch,
		StoreLinger: p.StoreLinger,
		InboxBatch:  p.InboxBatch,
		InboxLinger: p.InboxLinger,
		Rate:        p.Rate,
		Outbox:      p.Outbox,
		CPUs:        runtime.NumCPU(),
		CPUModel:    cpuModel(),
		GoVersion:   runtime.Version(),
	}
}

// inFlight is the consumers' effective InFlight (their default when
// Options.InFlight is 0).
func (p *plan) inFlight() int {
	switch {
	case p.InFlight > 0:
		return p.InFlight
	case p.Concurrency > 1:
		return max(p.Prefetch, p.Concurrency)
	}
	return 1
}

// cpuModel reads the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// median returns the median of xs (the mean of the middle two for an even
// count), 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// summarize fills Rows from Samples.
func (r *Report) summarize() {
	type key struct {
		broker string
		round  int
	}
	type anchorKey struct {
		broker, variant string
		round           int
	}
	anchorRate := map[anchorKey]float64{}      // every sample's rate, by variant
	effectRate := map[key]map[string]float64{} // bare-effect-DB rates
	for _, s := range r.Samples {
		anchorRate[anchorKey{s.Broker, s.Variant, s.Round}] = s.Rate
		if db, ok := strings.CutPrefix(s.Variant, "bare-effect-"); ok {
			k := key{s.Broker, s.Round}
			if effectRate[k] == nil {
				effectRate[k] = map[string]float64{}
			}
			effectRate[k][db] = s.Rate
		}
	}
	r.Rows = r.Rows[:0]
	for _, v := range reportVariants {
		var rates, ratios, effectRatios, cpus, p50s, p99s []float64
		var machine []*MachineCPU
		var tails []*Tail
		for _, s := range r.Samples {
			if s.Broker != v.broker || s.Variant != v.name {
				continue
			}
			rates = append(rates, s.Rate)
			cpus = append(cpus, s.CPUMicros)
			if s.P50Millis > 0 {
				p50s, p99s = append(p50s, s.P50Millis), append(p99s, s.P99Millis)
			}
			if s.Machine != nil {
				machine = append(machine, s.Machine)
			}
			if s.Tail != nil {
				tails = append(tails, s.Tail)
			}
			if b := anchorRate[anchorKey{s.Broker, v.kind.anchor(), s.Round}]; b > 0 {
				ratios = append(ratios, s.Rate/b)
			}
			if db := v.kind.effectDB(); db != "" && !v.kind.isBareEffect() {
				if b := effectRate[key{s.Broker, s.Round}][db]; b > 0 {
					effectRatios = append(effectRatios, s.Rate/b)
				}
			}
		}
		if len(rates) == 0 {
			continue
		}
		r.Rows = append(r.Rows, Row{
			Broker:  v.broker,
			Variant: v.name,
			Rounds:  len(rates),
			Median:  median(rates),
			Min:     slices.Min(rates),
			Max:     slices.Max(rates),
			Ratio:   median(ratios),
			EffectRatio: func() float64 {
				if len(effectRatios) == 0 {
					return 0
				}
				return median(effectRatios)
			}(),
			CPUMicros: median(cpus),
			Machine:   medianMachine(machine),
			P50Millis: medianOrZero(p50s),
			P99Millis: medianOrZero(p99s),
			Tail:      medianTail(tails),
		})
	}
}

// medianTail is the median of each field of ts; nil for none.
func medianTail(ts []*Tail) *Tail {
	if len(ts) == 0 {
		return nil
	}
	field := func(f func(*Tail) float64) float64 {
		xs := make([]float64, len(ts))
		for i, t := range ts {
			xs[i] = f(t)
		}
		return median(xs)
	}
	return &Tail{
		Arrive:  field(func(t *Tail) float64 { return t.Arrive }),
		Select:  field(func(t *Tail) float64 { return t.Select }),
		Handler: field(func(t *Tail) float64 { return t.Handler }),
		Settle:  field(func(t *Tail) float64 { return t.Settle }),
	}
}

// medianOrZero is the median of xs, 0 for none.
func medianOrZero(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return median(xs)
}

// medianMachine returns the median of each field of ms but the per-sample
// details (Store over those that have it), nil for none.
func medianMachine(ms []*MachineCPU) *MachineCPU {
	if len(ms) == 0 {
		return nil
	}
	var broker, store, other, busy []float64
	for _, m := range ms {
		broker, other, busy = append(broker, m.Broker), append(other, m.Other), append(busy, m.BusyPct)
		if m.Store != nil {
			store = append(store, *m.Store)
		}
	}
	out := &MachineCPU{Broker: median(broker), Other: median(other), BusyPct: median(busy)}
	if len(store) > 0 {
		x := median(store)
		out.Store = &x
	}
	return out
}

// brokerTitle names a broker in the table.
func brokerTitle(b string) string {
	switch b {
	case STOMP:
		return "ActiveMQ (STOMP)"
	case NATS:
		return "NATS JetStream"
	}
	return "RabbitMQ (AMQP)"
}

// variantTitle describes a variant in the table.
func variantTitle(b, v string) string {
	switch v {
	case "bare":
		switch b {
		case STOMP:
			return "bare go-stomp client, ack:client-individual"
		case NATS:
			return "bare nats.go jetstream pull client, explicit ack"
		}
		return "bare amqp091-go client, manual ack"
	case "audit":
		return "msgaudit, audit only (no store)"
	case "memory":
		return "msgaudit, memory store"
	case "redis":
		return "msgaudit, Redis store"
	case "postgres":
		return "msgaudit, PostgreSQL store"
	case "sqlite":
		return "msgaudit, SQLite store, synchronous=NORMAL"
	case "sqlite-full":
		return "msgaudit, SQLite store, synchronous=FULL"
	case "inbox-sqlite":
		return "msgaudit, inbox on SQLite"
	case "inbox-postgres":
		return "msgaudit, inbox on PostgreSQL"
	case "bare-effect-postgres":
		return "bare client + INSERT into PostgreSQL (autocommit, Concurrency workers, ack after the commit)"
	case "bare-inbox-postgres":
		return "bare client + the same INSERT and a hand-written inbox row in one PostgreSQL transaction (Concurrency workers, ack after the commit)"
	case "inbox-effect-postgres":
		return "msgaudit, inbox on PostgreSQL + the same INSERT in its transaction"
	case "bare-effect-mysql":
		return "bare client + INSERT into MariaDB (autocommit, Concurrency workers, ack after the commit)"
	case "bare-inbox-mysql":
		return "bare client + the same INSERT and a hand-written inbox row in one MariaDB transaction (Concurrency workers, ack after the commit)"
	case "inbox-effect-mysql":
		return "msgaudit, inbox on MariaDB + the same INSERT in its transaction"
	case "audit-effect-postgres":
		return "msgaudit, audit only (no store) + the same INSERT into PostgreSQL (autocommit)"
	case "redis-effect-postgres":
		return "msgaudit, Redis store + the same INSERT into PostgreSQL (autocommit)"
	case "postgres-effect-postgres":
		return "msgaudit, PostgreSQL store + the same INSERT into PostgreSQL (autocommit)"
	case "pgxinbox-effect-postgres":
		return "msgaudit, pgx inbox (inbox/pgxinbox) on PostgreSQL + the same INSERT in its transaction"
	case "bare-effect-sqlite":
		return "bare client + INSERT into an SQLite file, synchronous=FULL (autocommit, Concurrency workers, ack after the commit)"
	case "inbox-effect-sqlite":
		return "msgaudit, inbox on SQLite, synchronous=FULL + the same INSERT in its transaction"
	case "bare-send-postgres":
		switch b {
		case STOMP:
			return "bare go-stomp client: INSERT (autocommit), SEND persistent with receipt, ACK (Concurrency workers)"
		case NATS:
			return "bare nats.go client: INSERT (autocommit), JetStream Publish awaiting the PubAck, Ack (Concurrency workers)"
		}
		return "bare amqp091-go client: INSERT (autocommit), publish in confirm mode awaiting the confirm, ack (Concurrency workers)"
	case "outbox-send-postgres":
		return "msgaudit, inbox on PostgreSQL + the same INSERT and an outbox Send in its transaction, Config.Outbox relaying"
	case "bare-drain":
		switch b {
		case STOMP:
			return fmt.Sprintf("bare go-stomp client: SEND persistent with receipt, %d goroutines on one connection", DrainConcurrency)
		case NATS:
			return fmt.Sprintf("bare nats.go client: JetStream Publish awaiting the PubAck, %d goroutines", DrainConcurrency)
		}
		return fmt.Sprintf("bare amqp091-go client: publish awaiting its confirm, %d goroutines on one confirm-mode channel", DrainConcurrency)
	case "outbox-drain":
		return "msgaudit, outbox.Run with the transport's Publisher (Concurrency 32)"
	case "bare-latency":
		return "bare client: INSERT (autocommit), then a confirmed publish"
	case "outbox-latency":
		return "msgaudit, outbox Send and COMMIT, the relay in this process"
	}
	return v
}

// Markdown writes the summary as a Markdown table, preceded by a line with
// the parameters and the machine.
func (r *Report) Markdown(w io.Writer) error {
	var b strings.Builder
	extra := ""
	if r.StoreBatch != 0 {
		extra += fmt.Sprintf(", StoreBatch %d", r.StoreBatch)
	}
	if r.StoreLinger != 0 {
		extra += fmt.Sprintf(", StoreLinger %v", r.StoreLinger)
	}
	if r.InboxBatch != 0 {
		extra += fmt.Sprintf(", inbox MaxBatch %d", r.InboxBatch)
	}
	if r.InboxLinger != 0 {
		extra += fmt.Sprintf(", inbox Linger %v", r.InboxLinger)
	}
	loaded := "persistent messages"
	if r.Rate > 0 {
		loaded = fmt.Sprintf("persistent messages sent at %s msgs/s while the consumer ran (latency mode: p50/p99 from send to settlement)", thousands(r.Rate))
	}
	machineLine := fmt.Sprintf("%d CPUs (%s), %s, %s.", r.CPUs, orUnknown(r.CPUModel), r.GoVersion, r.Date.Format("2006-01-02 15:04 MST"))
	switch r.Outbox {
	case OutboxSend:
		fmt.Fprintf(&b, "Outbox, consumer sends: %d persistent messages of %d bytes per variant and round, %d round(s) interleaved; each one INSERTs a row into PostgreSQL and sends one message to a second queue (subject) with the broker's confirmation; the clock stops when every input is acknowledged and every output confirmed (msgaudit: the outbox's Backlog holds none), and the output then holds one message per input. msgaudit: Concurrency %d, Prefetch %d, InFlight %d%s, relay Concurrency 32; bare clients: prefetch %d, Concurrency workers. %s",
			r.Messages, r.BodyBytes, r.Rounds, r.Concurrency, r.Prefetch, r.InFlight, extra, r.Prefetch, machineLine)
	case OutboxDrain:
		fmt.Fprintf(&b, "Outbox, drain: a backlog of %d messages of %d bytes per variant and round, %d round(s) interleaved: msgaudit's relay drains %d pending outbox rows until the outbox's Backlog holds none; the bare client publishes as many from memory, %d at once, each confirmed by the broker. %s",
			r.Messages, r.BodyBytes, r.Rounds, r.Messages, DrainConcurrency, machineLine)
	case OutboxLatency:
		fmt.Fprintf(&b, "Outbox, latency: %d transactions per variant and round at %s/s, %d round(s) interleaved, each sending one message of %d bytes; p50/p99 from the COMMIT's return (bare: the INSERT's, autocommit) to the message's arrival at a consumer of the output queue (subject); msgaudit's relay runs in the senders' process. %s",
			r.Messages, thousands(r.Rate), r.Rounds, r.BodyBytes, machineLine)
	default:
		fmt.Fprintf(&b, "%d %s of %d bytes per variant and round, %d round(s) interleaved; msgaudit: Concurrency %d, Prefetch %d, InFlight %d%s; bare clients: prefetch %d, one goroutine (with an effect: Concurrency workers). %s",
			r.Messages, loaded, r.BodyBytes, r.Rounds, r.Concurrency, r.Prefetch, r.InFlight, extra, r.Prefetch, machineLine)
	}
	if r.CPUProfile != "" {
		fmt.Fprintf(&b, " CPU profile of the run: %s.", r.CPUProfile)
	}
	b.WriteString("\n\n")
	machine := slices.ContainsFunc(r.Rows, func(row Row) bool { return row.Machine != nil })
	latency := slices.ContainsFunc(r.Rows, func(row Row) bool { return row.P50Millis > 0 })
	head, rule := "| Broker | Variant | msgs/s (median) | min–max | × bare (median) | client CPU µs/msg |", "|---|---|---:|---:|---:|---:|"
	if machine {
		head += " broker µs/msg | store µs/msg | other µs/msg | machine busy |"
		rule += "---:|---:|---:|---:|"
	}
	if latency {
		head += " p50 ms | p99 ms |"
		rule += "---:|---:|"
	}
	b.WriteString(head + "\n" + rule + "\n")
	for _, row := range r.Rows {
		title := variantTitle(row.Broker, row.Variant)
		if row.EffectRatio > 0 {
			title += fmt.Sprintf(" (**%.2f×** the bare client with the same effect)", row.EffectRatio)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s–%s | %.2f | %.1f |",
			brokerTitle(row.Broker), title,
			thousands(row.Median), thousands(row.Min), thousands(row.Max), row.Ratio, row.CPUMicros)
		if m := row.Machine; m != nil {
			st := "–"
			if m.Store != nil {
				st = fmt.Sprintf("%.1f", *m.Store)
			}
			fmt.Fprintf(&b, " %.1f | %s | %.1f | %.0f%% |", m.Broker, st, m.Other, m.BusyPct)
		} else if machine {
			b.WriteString(" | | | |")
		}
		if latency {
			fmt.Fprintf(&b, " %.2f | %.2f |", row.P50Millis, row.P99Millis)
		}
		b.WriteString("\n")
	}
	if sent := r.sentChecked(); sent > 0 {
		fmt.Fprintf(&b, "\nOutput check: after each of the %d runs, exactly %d messages had reached the output queue (stream), one per message sent; a run that loses or repeats one fails.\n", sent, r.Messages)
	}
	if checked := r.effectChecked(); checked > 0 {
		fmt.Fprintf(&b, "\nEffect check: after each of the %d runs of an effect variant, its table held exactly one row per message (COUNT(*) and COUNT(DISTINCT key) both %d; the key is the primary key); a run that loses or repeats an effect fails.\n", checked, r.Messages)
	}
	if slices.ContainsFunc(r.Rows, func(row Row) bool { return row.Tail != nil }) {
		b.WriteString("\nWhere msgaudit's slowest 1 % waited, in ms (medians): arrive is send to the start of Process (broker, network, the consumer's buffers); select the selectors' decision (the inbox's wait for a lane, its BEGIN or SAVEPOINT and INSERT; a store's claim); handler the wait for a handler slot and the handler; settle the inbox member's wait for its batch's COMMIT, or a store's confirm.\n\n")
		b.WriteString("| Broker | Variant | p99 ms | arrive | select | handler | settle |\n|---|---|---:|---:|---:|---:|---:|\n")
		for _, row := range r.Rows {
			if t := row.Tail; t != nil {
				fmt.Fprintf(&b, "| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n", brokerTitle(row.Broker), variantTitle(row.Broker, row.Variant),
					row.P99Millis, t.Arrive, t.Select, t.Handler, t.Settle)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// effectChecked is the number of samples whose effect table was checked.
func (r *Report) effectChecked() int {
	n := 0
	for _, s := range r.Samples {
		if s.EffectRows > 0 {
			n++
		}
	}
	return n
}

// sentChecked is the number of samples whose output was counted.
func (r *Report) sentChecked() int {
	n := 0
	for _, s := range r.Samples {
		if s.Sent > 0 {
			n++
		}
	}
	return n
}

// JSON writes the whole report, samples included, as indented JSON.
func (r *Report) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func orUnknown(s string) string {
	if s == "" {
		return "CPU model unknown"
	}
	return s
}

// thousands formats a rate rounded to an integer with comma separators.
func thousands(x float64) string {
	s := fmt.Sprintf("%.0f", x)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
