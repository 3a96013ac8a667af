package sqlitestore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/sqlitestore"
)

// ExampleOpen opens a store whose commits survive a power loss
// (synchronous=full; the default, normal, survives a crash of the process)
// and claims and confirms two keys in one transaction.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "sqlitestore-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, filepath.Join(dir, "idem.db"), sqlitestore.Options{Synchronous: sqlitestore.SyncFull}) // or the path suffix "?synchronous=full"
	if err != nil {
		panic(err)
	}
	defer s.Close()

	keys := []idempotency.Key{{Namespace: "orders", ID: "m1"}, {Namespace: "orders", ID: "m1"}}
	res := make([]idempotency.ClaimResult, len(keys))
	if err := s.TryClaimBatch(ctx, keys, res); err != nil {
		panic(err)
	}
	fmt.Println(res[0].Outcome, res[1].Outcome)
	errs := make([]error, 1)
	if err := s.ConfirmBatch(ctx, []idempotency.Claim{res[0].Claim}, errs); err != nil || errs[0] != nil {
		panic(fmt.Sprint(err, errs[0]))
	}
	out, _, _ := s.TryClaim(ctx, keys[0])
	fmt.Println(s.Synchronous(), out)
	// Output:
	// claimed in-progress
	// full already-confirmed
}
