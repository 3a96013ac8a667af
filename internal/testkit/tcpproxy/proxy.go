package tcpproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// DefaultDialTimeout bounds a dial to the upstream when
// Options.DialTimeout is zero.
const DefaultDialTimeout = 5 * time.Second

// Options configures a Proxy. The zero value is a plain TCP proxy.
type Options struct {
	// TLS, if not nil, makes the proxy terminate TLS: clients speak TLS
	// to the proxy, which forwards plain bytes to the upstream.
	TLS *tls.Config
	// DialTimeout bounds each dial to the upstream (DefaultDialTimeout if
	// zero). A client whose upstream dial fails is disconnected.
	DialTimeout time.Duration
	// Logger receives debug records about failed dials and copies; nil
	// discards them.
	Logger *slog.Logger
	// Split and Filter let a test act on what clients send; set both or
	// neither. Split cuts each client's byte stream into frames, as for a
	// bufio.Scanner (bytes it skips are not forwarded). Filter gets every
	// frame in order and says whether it goes on to the upstream, is
	// dropped, or cuts the connection before it. Filter runs on every
	// connection's goroutine: it must be safe for concurrent use. Only
	// whole frames are forwarded; a frame over 64 MiB ends the connection.
	// Bytes from the upstream are never filtered.
	Split  bufio.SplitFunc
	Filter func(frame []byte) Verdict
}

// Verdict is what Options.Filter decides for one frame.
type Verdict int

const (
	// Forward sends the frame on to the upstream.
	Forward Verdict = iota
	// Drop leaves the frame out; the connection stays up.
	Drop
	// Cut closes both sides of the connection instead of forwarding the
	// frame: the upstream gets every frame before it and nothing after.
	Cut
)

// maxFrame bounds a frame that Options.Split cuts.
const maxFrame = 64 << 20

// errCut ends a filtered copy whose Filter said Cut.
var errCut = errors.New("tcpproxy: filter cut the connection")

// Proxy forwards TCP connections from a loopback listener to an upstream
// address. Create one with New.
type Proxy struct {
	ln       net.Listener
	upstream string
	opts     Options
	log      *slog.Logger
	ctx      context.Context // cancelled by Close: aborts dials in flight
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	mu     sync.Mutex
	pairs  map[*pair]struct{}
	down   bool
	closed bool
}

// pair is one forwarded connection: the client's side (raw is the TCP
// connection under a TLS one) and the upstream side.
type pair struct {
	client   net.Conn // what the pipes read and write (TLS or raw)
	raw      net.Conn // the accepted TCP connection
	upstream net.Conn
}

// close drops both sides at the TCP level; a TLS client sees the
// connection vanish without a close_notify, as with a real network fault.
func (c *pair) close() {
	c.raw.Close()
	c.upstream.Close()
}

// New listens on 127.0.0.1:0 and forwards every connection to upstream
// (host:port). The caller must Close the proxy.
func New(upstream string, opts Options) (*Proxy, error) {
	if (opts.Split == nil) != (opts.Filter == nil) {
		return nil, fmt.Errorf("tcpproxy: Options.Split and Options.Filter must be set together (Split %t, Filter %t)", opts.Split != nil, opts.Filter != nil)
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{ln: ln, upstream: upstream, opts: opts, log: log,
		ctx: ctx, cancel: cancel, pairs: make(map[*pair]struct{})}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the host:port clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	for {
		raw, err := p.ln.Accept()
		if err != nil {
			return // closed by Close
		}
		// Dial in a goroutine of its own so a slow upstream does not
		// hold up other clients.
		p.wg.Go(func() { p.connect(raw) })
	}
}

// connect dials the upstream for one accepted connection and starts the
// two pipes, unless the proxy is down or closed.
func (p *Proxy) connect(raw net.Conn) {
	if p.isDown() {
		raw.Close()
		return
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.opts.DialTimeout)
	var d net.Dialer
	up, err := d.DialContext(ctx, "tcp", p.upstream)
	cancel()
	if err != nil {
		p.log.Debug("tcpproxy: dial upstream", "upstream", p.upstream, "err", err)
		raw.Close()
		return
	}
	c := &pair{client: raw, raw: raw, upstream: up}
	if p.opts.TLS != nil {
		c.client = tls.Server(raw, p.opts.TLS)
	}
	p.mu.Lock()
	if p.closed || p.down {
		p.mu.Unlock()
		c.close()
		return
	}
	p.pairs[c] = struct{}{}
	// Added under mu while closed is false: Close, which sets closed
	// under mu before it waits, sees these goroutines.
	p.wg.Add(2)
	p.mu.Unlock()
	go p.pipe(c, c.upstream, c.client, p.opts.Filter != nil)
	go p.pipe(c, c.client, c.upstream, false)
}

// pipe copies src to dst, frame by frame through the filter if filter is
// set; when either direction ends, both sides close.
func (p *Proxy) pipe(c *pair, dst, src net.Conn, filter bool) {
	defer p.wg.Done()
	var err error
	if filter {
		err = p.filter(dst, src)
	} else {
		_, err = io.Copy(dst, src)
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		p.log.Debug("tcpproxy: copy", "err", err)
	}
	c.close()
	p.mu.Lock()
	delete(p.pairs, c)
	p.mu.Unlock()
}

// filter forwards src to dst one frame at a time, as Options.Filter says;
// it returns errCut when the filter cuts the connection.
func (p *Proxy) filter(dst io.Writer, src io.Reader) error {
	sc := bufio.NewScanner(src)
	sc.Buffer(nil, maxFrame)
	sc.Split(p.opts.Split)
	for sc.Scan() {
		switch p.opts.Filter(sc.Bytes()) {
		case Drop:
			continue
		case Cut:
			return errCut
		}
		if _, err := dst.Write(sc.Bytes()); err != nil {
			return err
		}
	}
	return sc.Err()
}

func (p *Proxy) isDown() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down || p.closed
}

// Cut closes both sides of every live connection and returns how many
// client connections it cut. The proxy keeps accepting new ones.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.pairs)
	for c := range p.pairs {
		c.close()
		delete(p.pairs, c)
	}
	return n
}

// Live returns how many client connections are being forwarded.
func (p *Proxy) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pairs)
}

// SetDown(true) makes the proxy accept and at once close every new
// connection, as a broker that is down would; live connections stay up
// (Cut them). SetDown(false) forwards new connections again.
func (p *Proxy) SetDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}

// Close stops listening, cuts every connection, aborts dials in flight and
// waits for every goroutine of the proxy to return.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.cancel()
	p.Cut()
	p.wg.Wait()
}
