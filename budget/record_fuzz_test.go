package budget

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

// FuzzDecodeRecord: the decoder of SAGA_BUDGETS values never panics,
// refuses what sagad never writes (JetStream's answers among it), and
// takes back every record sagad writes.
func FuzzDecodeRecord(f *testing.F) {
	ours, err := json.Marshal(record{TokensCap: 10, Closed: true, Holds: map[string]capsule.Usage{"k": {Tokens: 1}}})
	require.NoError(f, err)
	for _, s := range []string{
		string(ours), `{}`, `{"tokens_cap":5,"dollars_cap":1,"used":{"tokens":3,"dollars":0},"applied":["c/1/exec"],"parent":"gp","children":["c"],"children_more":2}`, `{"tokens_cap":5,"used":{"tokens":3,"dollars":0},"own":{"tokens":1,"dollars":0.5},"ended":true,"holds":{"c":{"tokens":1,"dollars":0}},"reserved":{"tokens":1,"dollars":0},"applied":["own.c/1/exec"],"parent":"gp","children":["c"]}`, `{"stream":"SAGA_INTAKE","seq":7}`,
		`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 0"}}`,
		`{"tokens_cap":1}{"tokens_cap":2}`, "\x00garbage\xff", `null`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecordBytes(b)
		if err != nil {
			return
		}
		again, err := json.Marshal(r)
		require.NoError(t, err)
		_, err = decodeRecordBytes(again)
		require.NoError(t, err, "what sagad writes decodes")
	})
}

// TestDecodeRecordRefusesAcks: JetStream's answers to a publish, sent onto
// a key by a client naming it as a reply, are no record.
func TestDecodeRecordRefusesAcks(t *testing.T) {
	t.Parallel()
	for _, s := range []string{`{"stream":"SAGA_INTAKE","seq":7}`, `{"error":{"code":400,"err_code":10071,"description":"x"}}`, "garbage"} {
		_, err := decodeRecordBytes([]byte(s))
		require.Error(t, err, s)
	}
}
