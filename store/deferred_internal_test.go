package store

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sagad/sagad/capsule"
)

// decodeDeferredSplit is DecodeDeferred as it was before it cut entries
// off one at a time (strings.Split): the reference the new one must equal,
// refusals and their messages included.
func decodeDeferredSplit(v string) ([]Deferred, error) {
	if v == "" {
		return nil, nil
	}
	parts := strings.Split(v, ",")
	if len(parts) > maxDeferred {
		return nil, fmt.Errorf("%w: %d entries", ErrBadDeferred, len(parts))
	}
	out := make([]Deferred, 0, len(parts))
	for _, part := range parts {
		ph, at, ok := strings.Cut(part, ":")
		n, err := strconv.Atoi(ph)
		if !ok || err != nil || strconv.Itoa(n) != ph || n <= int(capsule.Reception) || n >= int(capsule.Handoff) {
			return nil, fmt.Errorf("%w: phase %q", ErrBadDeferred, PrintableKey(ph))
		}
		ns, err := strconv.ParseInt(at, 10, 64)
		if err != nil || ns <= 0 || strconv.FormatInt(ns, 10) != at {
			return nil, fmt.Errorf("%w: time %q", ErrBadDeferred, PrintableKey(at))
		}
		if len(out) > 0 && capsule.Phase(n) <= out[len(out)-1].Phase {
			return nil, fmt.Errorf("%w: phases not ascending", ErrBadDeferred)
		}
		out = append(out, Deferred{Phase: capsule.Phase(n), At: time.Unix(0, ns).UTC()})
	}
	return out, nil
}

// sameDecode fails t unless DecodeDeferred and the Split reference agree on
// v: the same entries, or the same refusal with the same message.
func sameDecode(t *testing.T, v string) {
	t.Helper()
	got, gotErr := DecodeDeferred(v)
	want, wantErr := decodeDeferredSplit(v)
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Fatalf("%q: error %v, the Split decoder's %v", v, gotErr, wantErr)
	}
	if len(got) != 0 || len(want) != 0 {
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: %+v, the Split decoder's %+v", v, got, want)
		}
	}
}

// TestDecodeDeferredAsSplit holds the entry-by-entry decoder to the Split
// one it replaced on the headers where they could part: too many entries
// (counted right, refused before any is judged), around the bound, and
// malformed entries before and after it.
func TestDecodeDeferredAsSplit(t *testing.T) {
	t.Parallel()
	for _, v := range []string{
		"", ",", ",,", "2:5", "1:1,2:1,3:1,4:1,5:1",
		"1:1,2:1,3:1,4:1,5:1,5:1",     // one past the bound
		"1:1,2:1,3:1,4:1,5:1,6:1,7:1", // two past: seven entries
		"1:1,2:1,3:1,4:1,5:1,x,y,z",   // eight
		"x,2:1,3:1,4:1,5:1,6:1",       // too many, a bad first entry
		"1:1,1:1,3:1,4:1,5:1,6:1",     // too many, not ascending
		"1:1,2:1,3:1,4:1,5:1,",        // a trailing comma past the bound
		",,,,,,,,,,",                  // eleven empty entries
		"1:1,2:1,3:1,4:1,5:1," + strings.Repeat(",", 300),
	} {
		sameDecode(t, v)
	}
}

// FuzzDecodeDeferredAsSplit: on any header, the decoder and the Split one
// it replaced accept the same entries or refuse with the same message.
func FuzzDecodeDeferredAsSplit(f *testing.F) {
	for _, s := range []string{"", "2:5,3:6", "1:1,2:1,3:1,4:1,5:1", "1:1,2:1,3:1,4:1,5:1,6:1,7:1", "x,2:1,3:1,4:1,5:1,6:1", ",,,,,,"} {
		f.Add(s)
	}
	f.Fuzz(sameDecode)
}
