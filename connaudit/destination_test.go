package connaudit_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/connaudit"
)

func TestParseDestination(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    connaudit.Destination
		wantErr bool
		str     string // String() of the result; "" means in
	}{
		{in: "/queue/a", want: connaudit.Destination{Kind: connaudit.Queue, Name: "a"}},
		{in: "/topic/b", want: connaudit.Destination{Kind: connaudit.Topic, Name: "b"}},
		{in: "/temp-queue/c", want: connaudit.Destination{Kind: connaudit.TempQueue, Name: "c"}},
		{in: "/temp-topic/d", want: connaudit.Destination{Kind: connaudit.TempTopic, Name: "d"}},
		{in: "/queue/orders/eu.west", want: connaudit.Destination{Kind: connaudit.Queue, Name: "orders/eu.west"}},
		{in: "/queue/ID:host-1-2-3:1:1", want: connaudit.Destination{Kind: connaudit.Queue, Name: "ID:host-1-2-3:1:1"}},
		{in: "/remote-temp-queue/ID:x:1:1", want: connaudit.Destination{Kind: connaudit.TempQueue, Name: "ID:x:1:1"}, str: "/temp-queue/ID:x:1:1"},
		{in: "/remote-temp-topic/ID:x:1:2", want: connaudit.Destination{Kind: connaudit.TempTopic, Name: "ID:x:1:2"}, str: "/temp-topic/ID:x:1:2"},
		{in: "", wantErr: true},
		{in: "/queue/", wantErr: true},
		{in: "/topic/", wantErr: true},
		{in: "/temp-queue/", wantErr: true},
		{in: "queue/a", wantErr: true},
		{in: "/queue", wantErr: true},
		{in: "/Queue/a", wantErr: true},
		{in: "/exchange/a", wantErr: true},
		{in: "/amq/queue/a", wantErr: true},
		{in: "a", wantErr: true},
		{in: " /queue/a", wantErr: true},
		{in: "/" + strings.Repeat("x", 500), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := connaudit.ParseDestination(tc.in)
			if tc.wantErr {
				if !errors.Is(err, connaudit.ErrDestination) {
					t.Fatalf("ParseDestination(%q) = %v, %v; want ErrDestination", tc.in, got, err)
				}
				if len(err.Error()) > 200 {
					t.Errorf("error not truncated: %d bytes", len(err.Error()))
				}
				if got != (connaudit.Destination{}) {
					t.Errorf("got %+v with an error, want zero", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseDestination(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
			wantStr := tc.str
			if wantStr == "" {
				wantStr = tc.in
			}
			if s := got.String(); s != wantStr {
				t.Errorf("String() = %q, want %q", s, wantStr)
			}
			back, err := connaudit.ParseDestination(got.String())
			if err != nil || back != got {
				t.Errorf("round trip: %+v, %v", back, err)
			}
		})
	}
}

func TestDestinationIsQueue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		k    connaudit.Kind
		want bool
		name string
	}{
		{connaudit.Queue, true, "queue"},
		{connaudit.TempQueue, true, "temp-queue"},
		{connaudit.Topic, false, "topic"},
		{connaudit.TempTopic, false, "temp-topic"},
		{connaudit.Kind(0), false, "kind(0)"},
		{connaudit.Kind(9), false, "kind(9)"},
	} {
		d := connaudit.Destination{Kind: tc.k, Name: "x"}
		if got := d.IsQueue(); got != tc.want {
			t.Errorf("%v.IsQueue() = %v, want %v", tc.k, got, tc.want)
		}
		if got := tc.k.String(); got != tc.name {
			t.Errorf("Kind(%d).String() = %q, want %q", uint8(tc.k), got, tc.name)
		}
		if got := tc.k.Valid(); got != (tc.name[0] != 'k') {
			t.Errorf("Kind(%d).Valid() = %v", uint8(tc.k), got)
		}
	}
	if !(connaudit.Destination{}).IsZero() || (connaudit.Destination{Kind: connaudit.Queue, Name: "a"}).IsZero() {
		t.Error("IsZero wrong")
	}
	if s := (connaudit.Destination{}).String(); s != "" {
		t.Errorf("zero String() = %q", s)
	}
}

func FuzzParseDestination(f *testing.F) {
	for _, s := range []string{"/queue/a", "/topic/b", "/temp-queue/c", "/temp-topic/d", "/queue/", "", "/remote-temp-queue/x", "/queue//"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := connaudit.ParseDestination(s)
		if err != nil {
			if !errors.Is(err, connaudit.ErrDestination) {
				t.Fatalf("error %v does not wrap ErrDestination", err)
			}
			return
		}
		if d.Name == "" || !d.Kind.Valid() {
			t.Fatalf("accepted %q as %+v", s, d)
		}
		back, err := connaudit.ParseDestination(d.String())
		if err != nil || back != d {
			t.Fatalf("round trip of %q: %+v, %v", s, back, err)
		}
	})
}
