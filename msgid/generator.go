package msgid

import (
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// GeneratorOptions configures a Generator. The zero value is usable.
type GeneratorOptions struct {
	// Host is the host name in every key; empty means os.Hostname(), or
	// "localhost" if that fails. Characters ≥ 127 are stripped, as ActiveMQ
	// does (AMQ-2505); a name left empty becomes "localhost".
	Host string
	// Port is the number after the host; ≤ 0 picks a random one in
	// 1024..65535 (ActiveMQ binds a throw-away server socket instead).
	Port int
	// Clock gives the time whose Unix milliseconds go in every key; nil
	// means time.Now. It is read once, by NewGenerator.
	Clock func() time.Time
	// Instance is the instance number in every key. ActiveMQ takes it from
	// a JVM-wide counter; msgaudit has no globals, so a process that builds
	// several generators with the same host and port in one millisecond
	// must number them itself. Default 0.
	Instance uint64
}

// Generator hands out producers whose keys are unique: the OpenWire shape
// "ID:<host>-<port>-<millis>-<instance>:<n>", with n counting the producers
// of this generator from 1. It is a value the caller creates (there is no
// package-level generator) and is safe for concurrent use.
type Generator struct {
	prefix    string // "ID:<host>-<port>-<millis>-<instance>:"
	producers atomic.Uint64
}

// NewGenerator returns a generator for opts.
func NewGenerator(opts GeneratorOptions) *Generator {
	host := opts.Host
	if host == "" {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	host = SanitizeHost(host)
	if host == "" {
		host = "localhost"
	}
	port := opts.Port
	if port <= 0 {
		port = 1024 + rand.IntN(65536-1024)
	}
	clock := opts.Clock
	if clock == nil {
		clock = time.Now
	}
	millis := clock().UnixMilli()
	var b strings.Builder
	b.WriteString("ID:")
	b.WriteString(host)
	b.WriteByte('-')
	b.WriteString(strconv.Itoa(port))
	b.WriteByte('-')
	b.WriteString(strconv.FormatInt(millis, 10))
	b.WriteByte('-')
	b.WriteString(strconv.FormatUint(opts.Instance, 10))
	b.WriteByte(':')
	return &Generator{prefix: b.String()}
}

// SanitizeHost strips every byte ≥ 127 from a host name, as ActiveMQ's
// IdGenerator strips characters ≥ 127: non-ASCII letters vanish whole.
func SanitizeHost(host string) string {
	clean := true
	for i := 0; i < len(host); i++ {
		if host[i] >= 127 {
			clean = false
			break
		}
	}
	if clean {
		return host
	}
	b := make([]byte, 0, len(host))
	for i := 0; i < len(host); i++ {
		if host[i] < 127 {
			b = append(b, host[i])
		}
	}
	return string(b)
}

// NewProducer returns a producer with the next key of this generator.
func (g *Generator) NewProducer() *Producer {
	n := g.producers.Add(1)
	return &Producer{key: g.prefix + strconv.FormatUint(n, 10)}
}

// Producer hands out the ids of one producer: "<key>:<seq>" with seq
// counting from 1. It is safe for concurrent use.
type Producer struct {
	key string
	seq atomic.Uint64
}

// Key returns the producer key, the part of every id before the last ':'.
func (p *Producer) Key() string { return p.key }

// Next returns the next id, "<key>:<seq>".
func (p *Producer) Next() string {
	var digits [20]byte
	d := strconv.AppendUint(digits[:0], p.seq.Add(1), 10)
	var b strings.Builder
	b.Grow(len(p.key) + 1 + len(d))
	b.WriteString(p.key)
	b.WriteByte(':')
	b.Write(d)
	return b.String()
}

// AppendNext appends the next id to dst and returns the extended slice; it
// allocates only if dst lacks capacity.
func (p *Producer) AppendNext(dst []byte) []byte {
	return ID{Key: p.key, Seq: p.seq.Add(1)}.AppendTo(dst)
}
