package console

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/store"
)

// Label is what makes a row recognisable: its task's title and kind, read
// from the capsule's kept bytes.
type Label struct {
	Title string `json:"title,omitempty"`
	Kind  string `json:"kind,omitempty"`
}

// maxLabels bounds the label cache; past it the cache starts over. A label
// is a few dozen bytes, so the bound is a few MB at most.
const maxLabels = 50_000

// labelReaders bounds the concurrent reads of capsule bytes for one page.
const labelReaders = 8

// maxTitle bounds a title as the console sends it with a row (the capsule
// page shows it whole).
const maxTitle = 200

// labels caches [Label]s by key and run. The index keeps none: a row per
// capsule in memory stays small, and only the rows a page shows (a list's
// page, the inbox's lists) need their labels, read once per run of a
// capsule.
type labels struct {
	mu sync.Mutex
	m  map[string]Label
}

func labelKey(r *Row) string { return r.Key + "#" + strconv.Itoa(r.Run) }

// of returns the labels of rows by key, reading those it lacks from st
// (at most labelReaders at once). A capsule whose bytes are gone or
// unreadable has no label; the row shows its id alone.
func (l *labels) of(ctx context.Context, st *store.Store, rows ...[]*Row) map[string]Label {
	out := map[string]Label{}
	var missing []*Row
	l.mu.Lock()
	for _, rs := range rows {
		for _, r := range rs {
			if lb, ok := l.m[labelKey(r)]; ok {
				out[r.Key] = lb
			} else if _, dup := out[r.Key]; !dup {
				missing = append(missing, r)
				out[r.Key] = Label{}
			}
		}
	}
	l.mu.Unlock()
	if len(missing) == 0 || st == nil {
		return out
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, labelReaders)
	for _, r := range missing {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, c, err := st.Raw(ctx, r.Key)
			var lb Label
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound):
				// The bytes are gone (retention): remembered as no label,
				// so the page does not ask again each time.
			case err != nil:
				return // tried again on the next read
			case c != nil:
				lb = Label{Title: truncate(c.Task.Title, maxTitle), Kind: truncate(c.Task.Kind, maxTitle)}
				mu.Lock()
				out[r.Key] = lb
				mu.Unlock()
			}
			l.mu.Lock()
			if l.m == nil || len(l.m) >= maxLabels {
				l.m = make(map[string]Label)
			}
			l.m[labelKey(r)] = lb
			l.mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// truncate cuts s to at most n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i] + "…"
}
