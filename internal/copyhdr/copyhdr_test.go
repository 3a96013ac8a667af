package copyhdr

import "testing"

// TestDeadLetter: the dead-lettered copy keeps the delivery's headers and
// adds the reason, the attempt count and the key (none without a key).
func TestDeadLetter(t *testing.T) {
	in := map[string]string{"a": "b"}
	hd := DeadLetter(in, "ID:p:1", "max-attempts", 2)
	if hd["a"] != "b" || hd[DeadLetterReason] != "max-attempts" || hd[Attempts] != "2" || hd[OriginalKey] != "ID:p:1" {
		t.Fatalf("headers %v", hd)
	}
	if len(in) != 1 {
		t.Fatalf("the delivery's headers were changed: %v", in)
	}
	if _, ok := DeadLetter(nil, "", "missing-key", 1)[OriginalKey]; ok {
		t.Fatal("a copy without a key carries x-original-key")
	}
}
