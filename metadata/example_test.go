package metadata_test

import (
	"context"
	"fmt"

	"github.com/acemq/msgaudit/metadata"
)

// A file tailer remembers the last line it processed per file and moves
// the mark forward with compare-and-set, so two tailers never both claim
// the same lines.
func ExampleStore() {
	ctx := context.Background()
	s := metadata.NewMemory()
	defer s.Close()

	_, stored, _ := s.PutIfAbsent(ctx, "orders.csv", "10")
	fmt.Println("first mark stored:", stored)

	prev, stored, _ := s.PutIfAbsent(ctx, "orders.csv", "12")
	fmt.Println("second put stored:", stored, "prev:", prev)

	ok, _ := s.Replace(ctx, "orders.csv", "10", "12")
	fmt.Println("10 -> 12:", ok)
	ok, _ = s.Replace(ctx, "orders.csv", "10", "11") // stale: someone moved it
	fmt.Println("10 -> 11:", ok)

	v, _, _ := s.Get(ctx, "orders.csv")
	fmt.Println("mark:", v)
	// Output:
	// first mark stored: true
	// second put stored: false prev: 10
	// 10 -> 12: true
	// 10 -> 11: false
	// mark: 12
}

// Open picks the backend from a URL; the same code runs on memory, an
// SQLite file, Redis or PostgreSQL.
func ExampleOpen() {
	ctx := context.Background()
	s, err := metadata.Open(ctx, "memory") // or "sqlite:/var/lib/app/meta.db", "redis://…", "postgres://…"
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	_, stored, _ := s.PutIfAbsent(ctx, "k", "v")
	fmt.Println(stored)
	// Output:
	// true
}
