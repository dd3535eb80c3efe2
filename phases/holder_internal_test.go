package phases

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sagad/sagad/machine"
)

// holder records which of its methods were called.
type holder struct{ calls []string }

func (h *holder) Claim(context.Context) error {
	h.calls = append(h.calls, "claim")
	return nil
}

func (h *holder) Revalidate(context.Context) error {
	h.calls = append(h.calls, "revalidate")
	return nil
}

func (h *holder) RecordAttempt(context.Context, machine.RecordAttempt) error {
	h.calls = append(h.calls, "record")
	return nil
}

// TestHolderStandsInForTheFunctions: with a Holder the input's functions
// are not called; without one they are, and an unset one keeps its meaning
// (no claim, nothing to revalidate, no attempts recorded).
func TestHolderStandsInForTheFunctions(t *testing.T) {
	ctx, fail := context.Background(), errors.New("the function was called")
	funcs := Input{
		Claim:         func(context.Context) error { return fail },
		Revalidate:    func(context.Context) error { return fail },
		RecordAttempt: func(context.Context, machine.RecordAttempt) error { return fail },
	}
	h := &holder{}
	in := funcs
	in.Holder = h
	if !in.claims() || !in.recordsAttempts() || in.claim(ctx) != nil || in.revalidate(ctx) != nil || in.recordAttempt(ctx, machine.RecordAttempt{}) != nil {
		t.Fatal("with a Holder, a function of the input was called or a capability lost")
	}
	if want := "claim revalidate record"; strings.Join(h.calls, " ") != want {
		t.Fatalf("holder calls %q, want %q", strings.Join(h.calls, " "), want)
	}
	if !funcs.claims() || !funcs.recordsAttempts() || funcs.claim(ctx) != fail || funcs.revalidate(ctx) != fail || funcs.recordAttempt(ctx, machine.RecordAttempt{}) != fail {
		t.Fatal("without a Holder, the input's functions are not the ones called")
	}
	var none Input
	if none.claims() || none.recordsAttempts() || none.revalidate(ctx) != nil {
		t.Fatal("an input without either claims, records attempts or fails to revalidate")
	}
}
