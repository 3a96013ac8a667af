package msgid_test

import (
	"fmt"
	"testing"

	"github.com/acemq/msgaudit/msgid"
)

var (
	sinkKey string
	sinkSeq uint64
)

func BenchmarkSplit(b *testing.B) {
	for _, id := range []string{"p:7", "ID:host-41234-1700000000000-1:1:1:1:42", "ID:host-41234-1700000000000-1:1:1:1:18446744073709551615"} {
		b.Run(fmt.Sprintf("len=%d", len(id)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				k, s, err := msgid.Split(id)
				if err != nil {
					b.Fatal(err)
				}
				sinkKey, sinkSeq = k, s
			}
		})
	}
}

func BenchmarkProducer(b *testing.B) {
	p := msgid.NewGenerator(msgid.GeneratorOptions{Host: "host", Port: 41234}).NewProducer()
	b.Run("op=Next", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sinkKey = p.Next()
		}
	})
	b.Run("op=AppendNext", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 64)
		for b.Loop() {
			buf = p.AppendNext(buf[:0])
		}
	})
}
