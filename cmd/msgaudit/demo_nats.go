package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/tcpproxy"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/schollz/progressbar/v3"
)

// ---- real NATS JetStream ----

// demoStreamName is the stream of a -queue on NATS: "/queue/a.b" gives
// "a_b" (a stream name holds no '.', '/', '*' or '>'), and the stream
// captures the subject of the same name.
func demoStreamName(queue string) string {
	return strings.NewReplacer(".", "_", "/", "_", "*", "_", ">", "_", " ", "_").Replace(strings.TrimPrefix(queue, "/queue/"))
}

func (d *demoRun) runNATS(ctx context.Context, rep *demoReport, bar *progressbar.ProgressBar) error {
	rep.mode = "NATS JetStream at " + demoRedactNATS(d.cfg.nats)
	stream := demoStreamName(d.cfg.queue)
	dlq := stream + "_dlq"
	nc, err := nats.Connect(d.cfg.nats, nats.Timeout(10*time.Second))
	if err != nil {
		return fmt.Errorf("-nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// A work queue: a message stays in the stream until it is
	// acknowledged, so the stream's depth is what is left to do.
	for _, sc := range []jetstream.StreamConfig{
		{Name: stream, Subjects: []string{stream}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage},
		{Name: dlq, Subjects: []string{dlq}, Storage: jetstream.FileStorage},
	} {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			return fmt.Errorf("-nats: create stream %s: %w", sc.Name, err)
		}
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := js.DeleteStream(dctx, sc.Name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				fmt.Fprintf(d.stderr, "msgaudit demo: delete stream %s: %v\n", sc.Name, err)
			}
		}()
	}
	// The consumer connects through a TCP proxy the demo can cut.
	host, err := demoNATSHost(d.cfg.nats)
	if err != nil {
		return err
	}
	px, err := tcpproxy.New(host, tcpproxy.Options{})
	if err != nil {
		return err
	}
	defer px.Close()
	d.proc.base.NATS = strings.Replace(demoFirstURL(d.cfg.nats), host, px.Addr(), 1)
	d.proc.base.DLQ = dlq

	perr := make(chan error, d.cfg.producers)
	var pwg sync.WaitGroup
	for p := range d.cfg.producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			if err := d.produceNATS(ctx, js, stream, p); err != nil {
				perr <- err
			}
		}()
	}
	defer pwg.Wait()
	depth := func(name string) (uint64, error) {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return 0, err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return 0, err
		}
		return info.State.Msgs, nil
	}
	quiet := d.quiet(time.Second, 10*time.Second)
	err = d.drive(ctx, rep, bar,
		func() { d.cuts.Add(uint64(px.Cut())) },
		func() {},
		func() int64 { return int64(d.proc.totals().DeadLettered) },
		func(all bool) bool {
			if !quiet(all) {
				return false
			}
			n, err := depth(stream)
			return err == nil && (n == 0 || !all)
		})
	select {
	case e := <-perr:
		if err == nil {
			err = e
		}
	default:
	}
	if err == nil {
		d.dlq, err = demoNATSKeys(d.sig, js, dlq)
	}
	if err == nil {
		var left map[string]bool
		left, err = demoNATSKeys(d.sig, js, stream)
		rep.leftOnBroker = len(left)
	}
	return err
}

// produceNATS publishes producer p's share of the messages, counting each
// once JetStream has acknowledged it.
func (d *demoRun) produceNATS(ctx context.Context, js jetstream.JetStream, subject string, p int) error {
	var pending []jetstream.PubAckFuture
	wait := func() error {
		for _, f := range pending {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return fmt.Errorf("producer %d: %w", p, err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		d.sent.Add(uint64(len(pending)))
		pending = pending[:0]
		return nil
	}
	for i := p; i < d.cfg.n && ctx.Err() == nil; i += d.cfg.producers {
		key := demoKey(p, i)
		m := nats.NewMsg(subject)
		m.Header.Set(demoKeyHeader, key)
		m.Data = []byte("payload of " + key)
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			return fmt.Errorf("producer %d: %w", p, err)
		}
		if pending = append(pending, f); len(pending) == 100 {
			if err := wait(); err != nil {
				return err
			}
		}
	}
	return wait()
}

// demoNATSKeys returns the demo keys of the messages stream holds.
func demoNATSKeys(ctx context.Context, js jetstream.JetStream, stream string) (map[string]bool, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	if info.State.Msgs == 0 {
		return out, nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // acknowledged out of order: a work queue removed it
		}
		if err != nil {
			return out, err
		}
		out[m.Header.Get(demoKeyHeader)] = true
	}
	return out, nil
}

// demoFirstURL is the first server of a comma-separated NATS URL list.
func demoFirstURL(u string) string { return strings.TrimSpace(strings.Split(u, ",")[0]) }

// demoNATSHost is the host:port of the first server of -nats.
func demoNATSHost(u string) (string, error) {
	first := demoFirstURL(u)
	_, rest, ok := strings.Cut(first, "://")
	if !ok {
		return "", fmt.Errorf("-nats %q: want nats://host:port", demoRedactNATS(u))
	}
	if _, h, ok := strings.Cut(rest, "@"); ok {
		rest = h
	}
	rest, _, _ = strings.Cut(rest, "/")
	if !strings.Contains(rest, ":") {
		rest += ":4222"
	}
	return rest, nil
}

// demoRedactNATS hides the credentials of a NATS URL list.
func demoRedactNATS(u string) string {
	parts := strings.Split(u, ",")
	for i, p := range parts {
		if scheme, rest, ok := strings.Cut(strings.TrimSpace(p), "://"); ok {
			if _, h, ok := strings.Cut(rest, "@"); ok {
				parts[i] = scheme + "://xxxxx@" + h
			}
		}
	}
	return strings.Join(parts, ",")
}
