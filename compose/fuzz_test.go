package compose_test

import (
	"os"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/store"
)

// FuzzParse: a chain document from a producer is checked or refused,
// never a panic; one that parses builds steps that are sealed capsules, or
// is refused naming the step.
func FuzzParse(f *testing.F) {
	for _, example := range []string{"../examples/chain/chain.json", "../examples/compositions/translations.json", "../examples/compositions/loop.json"} {
		if b, err := os.ReadFile(example); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"chain_id":"c","steps":[{"task":{"kind":"produce"}}]}`))
	f.Add([]byte(`{"chain_id":"c","steps":[]}`))
	f.Add([]byte(`{"composition_id":"c","steps":[{"name":"a","capsule":{"task":{"kind":"produce"}}},{"name":"b","needs":["a","b"],"capsule":{"task":{"kind":"produce"}}}]}`))
	f.Add([]byte(`{"composition_id":"c","deadline":"2030-01-01T00:00:00Z","steps":[{"name":"a","needs":["b"],"capsule":{"task":{"kind":"p"}}},{"name":"b","needs":["a"],"capsule":{"task":{"kind":"p"}}}]}`))
	f.Add([]byte(`{"composition_id":"c","steps":[{"name":"a","capsule":{"task":{"kind":"p"}}},{"name":"v","needs":["a"],"capsule":{"task":{"kind":"p"}}}],"loops":[{"steps":["a"],"verifier":"v","max_rounds":2}]}`))
	f.Add([]byte(`{"composition_id":"c","steps":[{"name":"a","capsule":{"task":{"kind":"p"}}},{"name":"v","capsule":{"task":{"kind":"p"}}}],"loops":[{"steps":["a","v","zz"],"verifier":"v","max_rounds":1},{"steps":["a"],"verifier":"a","max_rounds":1}]}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, b []byte) {
		doc, err := compose.Parse(b)
		if err != nil {
			return
		}
		require.NotEmpty(t, doc.ID)
		if len(doc.Graph()) > 0 {
			return
		}
		for _, fd := range compose.Shape(doc) {
			require.Less(t, fd.Step, len(doc.Steps))
		}
		ids, err := compose.NewStepIDs(len(doc.Steps))
		require.NoError(t, err)
		raws, digests, err := doc.Build(ids, 1)
		if err != nil {
			return
		}
		require.Len(t, raws, len(doc.Steps))
		require.Len(t, digests, len(doc.Steps))
	})
}

// FuzzDecodeReply: whatever answers on saga.compose, the client gets a
// well-formed reply or an error.
func FuzzDecodeReply(f *testing.F) {
	f.Add([]byte(`{"chain_id":"c","producer":"alice","created":true,"steps":[{"step":0,"capsule_id":"x","digest":"d","state":"received"}]}`), "")
	f.Add([]byte(`{"code":"chain_exists","message":"no"}`), "409")
	f.Add([]byte(`{"code":"composition_invalid","message":"no","findings":[{"step":0,"name":"a","message":"m"}]}`), "422")
	f.Add([]byte(`{"composition_id":"c","run":2,"steps":[{"step":0,"name":"a","capsule_id":"x"}]}`), "")
	f.Add([]byte(`{"chain_id":"c","steps":[{"step":1,"capsule_id":"x"}]}`), "")
	f.Fuzz(func(t *testing.T, body []byte, code string) {
		msg := &nats.Msg{Data: body, Header: nats.Header{}}
		if code != "" {
			msg.Header.Set(micro.ErrorCodeHeader, code)
		}
		r, err := compose.DecodeReply(msg)
		if err != nil {
			return
		}
		require.NotEmpty(t, r.CompositionID)
		for i, s := range r.Steps {
			require.Equal(t, i, s.Step)
			require.NotEmpty(t, s.CapsuleID)
		}
	})
}

// FuzzDecodeChainRecord: a SAGA_CHAINS value is a record that holds
// together or an error.
func FuzzDecodeChainRecord(f *testing.F) {
	f.Add([]byte(`{"chain_id":"c","producer":"alice","digest":"d","steps":["a"],"step_digests":["x"],"created_at":"2030-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"chain_id":"c","producer":"a.b","steps":["a"],"step_digests":["x"]}`))
	f.Add([]byte(`{"chain_id":"c","producer":"p","digest":"d","steps":["a","b"],"step_digests":["x","y"],"run":2,"names":["n","m"],"state":"partial","ended":[{"state":"completed","artifact":"artifact:a/cycle-1"},{"state":"halted"}],"outcome_sent":true}`))
	f.Add([]byte(`{"chain_id":"c","steps":["a"],"step_digests":["x"],"names":["n","m"],"ended":[{},{}]}`))
	f.Add([]byte(`{"chain_id":"c","steps":["a","b","c"],"step_digests":["x","y","z"],"names":["d","f","m"],"needs":[[],[0],[0,1]]}`))
	f.Add([]byte(`{"chain_id":"c","steps":["a","b"],"step_digests":["x","y"],"names":["d","f"],"needs":[[1],[0]]}`))
	f.Add([]byte(`{"chain_id":"c","steps":["a"],"step_digests":["x"],"names":["d"],"needs":[[5]]}`))
	f.Add([]byte(`{"chain_id":"c","steps":["a","b","c"],"step_digests":["x","y","z"],"names":["d","v","p"],"needs":[[],[0],[1]],"loops":[{"steps":[0,1],"max_rounds":3,"round":2,"rounds":[{"ids":["a0","b0"],"ended":true,"findings":2},{"ids":["a","b"]}]}],"held":[2],"unpublished":[0,1],"state":"paused","reason":"no_progress"}`))
	f.Add([]byte(`{"chain_id":"c","steps":["a","b"],"step_digests":["x","y"],"loops":[{"steps":[0,7],"max_rounds":3,"round":1,"rounds":[{"ids":["a","b"]}]}],"held":[-1]}`))
	f.Add([]byte(`{"chain_id":"c","steps":["a","b"],"step_digests":["x","y"],"loops":[{"steps":[],"max_rounds":3,"round":1,"rounds":[{"ids":[]}]}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := compose.DecodeRecord(b)
		state, ok := compose.StateOfBytes(b)
		require.Equal(t, err == nil, ok, "the metrics read a record exactly when the store does")
		if err != nil {
			return
		}
		require.Equal(t, r.StateOf(), state)
		require.True(t, len(r.Needs) == 0 || len(r.Needs) == len(r.Steps))
		require.NotEmpty(t, r.CompositionID)
		require.Len(t, r.StepDigests, len(r.Steps))
		require.True(t, store.ValidProducer(r.Producer))
		require.True(t, len(r.Ended) == 0 || len(r.Ended) == len(r.Steps))
		m := compose.Manifest(r)
		require.Len(t, m.Steps, len(r.Steps))
		for _, s := range m.Steps {
			require.LessOrEqual(t, len(s.Needs), len(r.Steps))
		}
		require.Equal(t, m.Summary.Total, len(r.Steps))
	})
}

// FuzzStepOf: whatever bytes an outcome carries, the composition step they
// declare is read or refused, never a panic, never a negative index.
func FuzzStepOf(f *testing.F) {
	f.Add([]byte(`{"capsule_id":"x","chain":{"id":"c","step":3,"run":2}}`))
	f.Add([]byte(`{"capsule_id":"x","chain":{"id":"c","step":-1}}`))
	f.Add([]byte(`{"capsule_id":"x","chain":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, ok := compose.StepOf(b)
		if !ok {
			return
		}
		require.NotEmpty(t, c.Chain.ID)
		require.GreaterOrEqual(t, c.Chain.Step, 0)
	})
}
