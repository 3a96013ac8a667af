// Package storetestkit holds the test helpers the PostgreSQL and Redis
// stores' tests share: random names, a closed port, a server that accepts
// and never answers, a throwaway PKI, the remote-store benchmarks, and the
// cleanup of a test's Redis keys. Only tests and the test harnesses
// (crash, failover) import it.
package storetestkit

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// Hex returns n random bytes as hex, for test prefixes and names.
func Hex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// DeleteRedisPrefix removes every key under prefix from the Redis server
// at url (a redis:// URL), reporting failures as cleanup errors of t.
func DeleteRedisPrefix(t testing.TB, url, prefix string) {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("cleanup: scan %s*: %v", prefix, err)
		return
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := c.Del(ctx, keys[:n]...).Err(); err != nil {
			t.Errorf("cleanup: del: %v", err)
			return
		}
		keys = keys[n:]
	}
}

// ClosedAddr returns a loopback address nothing listens on: a port that was
// just bound and released.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// WithQuery appends a query parameter to rawURL.
func WithQuery(rawURL, param string) string {
	if strings.Contains(rawURL, "?") {
		return rawURL + "&" + param
	}
	return rawURL + "?" + param
}

// PKI is a throwaway certificate authority with a server certificate for
// 127.0.0.1 and a client certificate, as PEM files in a temporary directory.
type PKI struct {
	CAFile, CertFile, KeyFile string
	Roots                     *x509.CertPool
	Client                    tls.Certificate
}

func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "msgaudit test CA " + Hex(4)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(serial int64, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: "localhost"},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			DNSNames:     []string{"localhost"},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	writePEM := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	p := &PKI{Roots: x509.NewCertPool()}
	p.Roots.AddCert(caCert)
	p.CAFile = writePEM("ca.pem", "CERTIFICATE", caDER)
	srvDER, srvKey := issue(2, x509.ExtKeyUsageServerAuth)
	p.CertFile = writePEM("server.pem", "CERTIFICATE", srvDER)
	p.KeyFile = writePEM("server-key.pem", "EC PRIVATE KEY", keyDER(srvKey))
	cliDER, cliKey := issue(3, x509.ExtKeyUsageClientAuth)
	p.Client = tls.Certificate{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}
	return p
}

// SilentServer accepts connections on a loopback port and never answers:
// the shape of a hung server. It returns the address.
func SilentServer(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		conns  []net.Conn
		closed bool // set at cleanup: a connection accepted later is closed at once
		wg     sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				_ = c.Close()
			}
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		testwait.Group(t, &wg, testwait.Long, "the end of the silent server's accept loop and readers after its listener and connections closed")
	})
	return l.Addr().String()
}

// BenchPairs measures TryClaim + Confirm pairs on s from goroutines
// goroutines (1: a plain loop; more: RunParallel with enough parallelism
// for at least that many), each pair on a new key. It reports pairs/s and
// round-trips/op, where roundTrips counts what the store sent.
func BenchPairs(b *testing.B, s idempotency.Store, goroutines int, roundTrips func() int64) {
	ctx := context.Background()
	var next atomic.Uint64
	pair := func(id []byte) {
		n := next.Add(1)
		id = strconv.AppendUint(id[:0], n, 10)
		out, c, err := s.TryClaim(ctx, idempotency.Key{Namespace: "bench", ID: string(id)})
		if err != nil || out != idempotency.Claimed {
			b.Fatalf("TryClaim = %v, %v", out, err)
		}
		if err := s.Confirm(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
	// Warm up connections and statement/script caches outside the timer,
	// with as many goroutines as the measurement so the pool grows now.
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 4 {
				pair(nil)
			}
		}()
	}
	testwait.Group(b, &wg, time.Minute, "the end of the warm-up goroutines")
	b.ReportAllocs()
	before := roundTrips()
	b.ResetTimer()
	if goroutines == 1 {
		var id []byte
		for range b.N {
			pair(id)
		}
	} else {
		procs := runtime.GOMAXPROCS(0)
		b.SetParallelism((goroutines + procs - 1) / procs)
		b.RunParallel(func(pb *testing.PB) {
			var id []byte
			for pb.Next() {
				pair(id)
			}
		})
	}
	b.StopTimer()
	if sec := b.Elapsed().Seconds(); sec > 0 {
		b.ReportMetric(float64(b.N)/sec, "pairs/s")
	}
	b.ReportMetric(float64(roundTrips()-before)/float64(b.N), "round-trips/op")
}

// BenchDuplicate measures TryClaim on an already confirmed key (the
// redelivery path) on s, from one goroutine.
func BenchDuplicate(b *testing.B, s idempotency.Store, roundTrips func() int64) {
	ctx := context.Background()
	key := idempotency.Key{Namespace: "bench", ID: "duplicate"}
	_, c, err := s.TryClaim(ctx, key)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Confirm(ctx, c); err != nil {
		b.Fatal(err)
	}
	for range 4 {
		if _, _, err := s.TryClaim(ctx, key); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	before := roundTrips()
	b.ResetTimer()
	for range b.N {
		out, _, err := s.TryClaim(ctx, key)
		if err != nil || out != idempotency.AlreadyConfirmed {
			b.Fatalf("TryClaim = %v, %v", out, err)
		}
	}
	b.StopTimer()
	if sec := b.Elapsed().Seconds(); sec > 0 {
		b.ReportMetric(float64(b.N)/sec, "checks/s")
	}
	b.ReportMetric(float64(roundTrips()-before)/float64(b.N), "round-trips/op")
}
