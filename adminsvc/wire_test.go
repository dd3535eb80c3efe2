package adminsvc

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v5"
	"github.com/stretchr/testify/require"
)

// schemaFor names the schema of each verb's request.
var schemaFor = map[string]string{
	VerbPause: "pause-request", VerbResume: "resume-request", VerbCancel: "cancel-request", VerbDecide: "decide-request",
	VerbPhasePause: "phase-request", VerbPhaseResume: "phase-request", VerbPhaseList: "list-request", VerbPending: "list-request",
	VerbRules: "list-request", VerbReplay: "replay-request", VerbReplayPreview: "replay-request",
}

var (
	schemaOnce sync.Once
	schemaSet  map[string]*jsonschema.Schema
	schemaErr  error
)

// adminSchemas compiles schemas/admin/*.schema.json once.
func adminSchemas(t testing.TB) map[string]*jsonschema.Schema {
	t.Helper()
	schemaOnce.Do(func() {
		c := jsonschema.NewCompiler()
		c.Draft = jsonschema.Draft2020
		c.AssertFormat = true
		files, err := filepath.Glob(filepath.Join("..", "schemas", "admin", "*.schema.json"))
		if err != nil || len(files) == 0 {
			schemaErr = errors.Join(err, errors.New("no schemas in ../schemas/admin"))
			return
		}
		schemaSet = map[string]*jsonschema.Schema{}
		url := func(f string) (string, string) {
			name := strings.TrimSuffix(filepath.Base(f), ".schema.json")
			return name, "https://sagad.dev/schemas/admin/" + name + ".schema.json"
		}
		// Every resource first: a schema may refer to another (replay-reply
		// to status-reply).
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				schemaErr = err
				return
			}
			_, u := url(f)
			if err := c.AddResource(u, strings.NewReader(string(b))); err != nil {
				schemaErr = err
				return
			}
		}
		for _, f := range files {
			name, u := url(f)
			var err error
			if schemaSet[name], err = c.Compile(u); err != nil {
				schemaErr = err
				return
			}
		}
	})
	require.NoError(t, schemaErr)
	return schemaSet
}

// validateSchema checks doc against schemas/admin/<name>.schema.json.
func validateSchema(t testing.TB, name string, doc []byte) error {
	t.Helper()
	s, ok := adminSchemas(t)[name]
	require.True(t, ok, "schema %s", name)
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return err
	}
	return s.Validate(v)
}

func TestDecodeRequest(t *testing.T) {
	t.Parallel()
	deadline := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name    string
		verb    string
		data    string
		want    any
		wantErr string // substring of the bad_request message; "" accepts
	}{
		{"pause", VerbPause, `{"id":"c1","reason":"lunch","by":"ann"}`, PauseRequest{ID: "c1", Reason: "lunch", By: "ann"}, ""},
		{"pause without by", VerbPause, `{"id":"c1"}`, nil, "by is required"},
		{"pause blank by", VerbPause, `{"id":"c1","by":"  "}`, nil, "by is required"},
		{"pause without id", VerbPause, `{"by":"ann"}`, nil, "id is required"},
		{"pause id with space", VerbPause, `{"id":"c 1","by":"ann"}`, nil, "spaces or control"},
		{"pause id too long", VerbPause, `{"id":"` + strings.Repeat("x", 257) + `","by":"ann"}`, nil, "exceeds 256"},
		{"pause unknown member", VerbPause, `{"id":"c1","by":"ann","force":true}`, nil, "unknown"},
		{"pause member in other case", VerbPause, `{"ID":"c1","by":"ann"}`, nil, `unknown member "ID"`},
		{"pause trailing data", VerbPause, `{"id":"c1","by":"ann"} {}`, nil, "after top-level value"},
		{"pause not an object", VerbPause, `["c1"]`, nil, "want a JSON object"},
		{"pause null", VerbPause, `null`, nil, "want a JSON object"},
		{"pause not JSON", VerbPause, `pause c1`, nil, "want a JSON object"},
		{"pause wrong type", VerbPause, `{"id":1,"by":"ann"}`, nil, "cannot unmarshal"},
		{"cancel", VerbCancel, `{"id":"c1","by":"ann"}`, CancelRequest{ID: "c1", By: "ann"}, ""},
		{"cancel long reason", VerbCancel, `{"id":"c1","by":"ann","reason":"` + strings.Repeat("r", maxTextBytes+1) + `"}`, nil, "reason of"},
		{"resume", VerbResume, `{"id":"c1","by":"ann","tokens":5,"dollars":1.5,"deadline":"2030-01-02T03:04:05Z","force":true}`,
			ResumeRequest{ID: "c1", By: "ann", Tokens: 5, Dollars: 1.5, Deadline: &deadline, Force: true}, ""},
		{"resume with an answer", VerbResume, `{"id":"c1","by":"ann","answer":"licence is MIT"}`,
			ResumeRequest{ID: "c1", By: "ann", Answer: "licence is MIT"}, ""},
		{"resume long answer", VerbResume, `{"id":"c1","by":"ann","answer":"` + strings.Repeat("a", maxTextBytes+1) + `"}`, nil, "answer of"},
		{"resume negative tokens", VerbResume, `{"id":"c1","by":"ann","tokens":-1}`, nil, "tokens -1"},
		{"resume negative dollars", VerbResume, `{"id":"c1","by":"ann","dollars":-0.5}`, nil, "dollars -0.5"},
		{"resume bad deadline", VerbResume, `{"id":"c1","by":"ann","deadline":"tomorrow"}`, nil, "want an RFC 3339"},
		{"resume extend", VerbResume, `{"id":"c1","by":"ann","extend":"2h0m0s"}`, ResumeRequest{ID: "c1", By: "ann", Extend: "2h0m0s"}, ""},
		{"resume bad extend", VerbResume, `{"id":"c1","by":"ann","extend":"later"}`, nil, "extend \"later\""},
		{"resume negative extend", VerbResume, `{"id":"c1","by":"ann","extend":"-1h"}`, nil, "want a positive duration"},
		{"resume extend and deadline", VerbResume, `{"id":"c1","by":"ann","extend":"1h","deadline":"2030-01-02T03:04:05Z"}`, nil, "exclude each other"},
		{"decide accept", VerbDecide, `{"id":"c1","decision":"accept","by":"ann"}`, DecideRequest{ID: "c1", Decision: "accept", By: "ann"}, ""},
		{"decide revise", VerbDecide, `{"id":"c1","decision":"revise","rationale":"shorter","by":"ann"}`,
			DecideRequest{ID: "c1", Decision: "revise", Rationale: "shorter", By: "ann"}, ""},
		{"decide revise without rationale", VerbDecide, `{"id":"c1","decision":"revise","by":"ann"}`, nil, "needs a rationale"},
		{"decide other", VerbDecide, `{"id":"c1","decision":"ACCEPT","by":"ann"}`, nil, `decision "ACCEPT"`},
		{"phase pause 0", VerbPhasePause, `{"phase":0}`, PhaseRequest{Phase: 0}, ""},
		{"phase resume 6 by", VerbPhaseResume, `{"phase":6,"by":"ann"}`, PhaseRequest{Phase: 6, By: "ann"}, ""},
		{"phase pause with reason", VerbPhasePause, `{"phase":1,"by":"ann","reason":"upgrade"}`, PhaseRequest{Phase: 1, By: "ann", Reason: "upgrade"}, ""},
		{"phase missing", VerbPhasePause, `{}`, nil, "phase is required"},
		{"phase 7", VerbPhasePause, `{"phase":7}`, nil, "out of range"},
		{"phase -1", VerbPhaseResume, `{"phase":-1}`, nil, "out of range"},
		{"phase name", VerbPhasePause, `{"phase":"EXECUTION"}`, nil, "cannot unmarshal"},
		{"phase list empty", VerbPhaseList, ``, listRequest{}, ""},
		{"pending {}", VerbPending, ` {} `, listRequest{}, ""},
		{"pending with member", VerbPending, `{"all":true}`, nil, "unknown member"},
		{"unknown verb", "halt", `{}`, nil, "unknown verb"},
		{"too big", VerbPause, `{"id":"c1","by":"ann","reason":"` + strings.Repeat("r", DefaultMaxRequestBytes) + `"}`, nil, "exceeds 65536"},
		{"not UTF-8", VerbPause, "{\"id\":\"c\xff\",\"by\":\"ann\"}", nil, "not UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := decodeRequest(tt.verb, []byte(tt.data), 0)
			if tt.wantErr != "" {
				var re *requestError
				require.ErrorAs(t, err, &re)
				require.Contains(t, re.msg, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			// What the decoder accepts, the published schema accepts.
			require.NoError(t, validateSchema(t, schemaFor[tt.verb], []byte(orEmptyObject(tt.data))))
		})
	}
}

func orEmptyObject(s string) string {
	if strings.TrimSpace(s) == "" {
		return "{}"
	}
	return s
}

// FuzzDecodeRequest feeds the service's decoder arbitrary bodies for every
// verb: it must never panic, must refuse with a bad_request error, and
// whatever it accepts must also satisfy the verb's published schema and
// survive an encode/decode round trip unchanged.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []struct {
		verb byte
		data string
	}{
		{0, `{"id":"c1","reason":"r","by":"ann"}`},
		{1, `{"id":"c1","by":"ann","tokens":5,"dollars":1.5,"deadline":"2030-01-02T03:04:05Z","force":true}`},
		{1, `{"id":"c1","by":"ann","extend":"1h30m"}`},
		{1, `{"id":"c1","by":"ann","extend":"+.5h"}`},
		{1, `{"id":"c1","by":"ann","answer":"licence is MIT"}`},
		{2, `{"id":"x-12","by":"ann"}`},
		{3, `{"id":"c1","decision":"revise","rationale":"why","by":"ann"}`},
		{4, `{"phase":4,"by":"ann"}`},
		{5, `{"phase":0}`},
		{6, ``},
		{7, `{}`},
		{14, `{"chain_id":"c-1","producer":"alice"}`},
		{14, `{"chain_id":"c-1","producer":""}`},
	} {
		f.Add(s.verb, []byte(s.data))
	}
	for verb, data := range map[string]string{
		VerbStatus: `{"id":"c1"}`, VerbList: `{"state":"halted","prefix":"0f","cursor":"x","limit":10,"wave":"w","kind":"k","halt_reason":"executor_failed","composition":"c#2","producer":"bob","since":"2030-01-02T03:04:05Z"}`,
		VerbHistory: `{"id":"c1","cursor":"4","limit":4}`, VerbReport: `{"id":"c1"}`, VerbWait: `{"id":"c1","max_wait_ms":100}`,
		VerbEvents:            `{"id":"c1","since":"2030-01-02T03:04:05Z","from":"2030-01-02T03:04:00Z","max_wait_ms":100,"limit":5}`,
		VerbReplay:            `{"id":"c1","by":"ann","request_id":"r-1"}`,
		VerbReplayPreview:     `{"id":"c1","by":"ann","from_phase":4}`,
		VerbCost:              `{"by":"kind","since":"2030-01-02T03:04:05+01:00","limit":3}`,
		VerbCompositionDecide: `{"composition_id":"c-1","producer":"alice","run":2,"step":"ship","decision":"reject","by":"ann","reason":"no"}`,
	} {
		f.Add(byte(slices.Index(Verbs, verb)), []byte(data))
	}
	f.Fuzz(func(t *testing.T, v byte, data []byte) {
		verb := Verbs[int(v)%len(Verbs)]
		got, err := decodeRequest(verb, data, 0)
		if err != nil {
			var re *requestError
			if !errors.As(err, &re) || re.msg == "" {
				t.Fatalf("refusal %v is no bad_request", err)
			}
			return
		}
		if err := validateSchema(t, schemaFor[verb], []byte(orEmptyObject(string(data)))); err != nil {
			t.Fatalf("decoder accepted %q on %s but the schema refuses it: %v", data, verb, err)
		}
		again, err := json.Marshal(got)
		require.NoError(t, err)
		back, err := decodeRequest(verb, again, 0)
		require.NoError(t, err, "re-encoded %s", again)
		require.Equal(t, normalise(got), normalise(back))
	})
}

// normalise drops the monotonic clock and location of a deadline, which
// an encode/decode round trip does not keep.
func normalise(r any) any {
	if rr, ok := r.(ResumeRequest); ok && rr.Deadline != nil {
		d := rr.Deadline.UTC().Round(0)
		rr.Deadline = &d
		return rr
	}
	return r
}
