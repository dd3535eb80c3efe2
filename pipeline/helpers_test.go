package pipeline_test

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/sagatest"
)

type jetstreamJS = jetstream.JetStream

func newJS(nc *nats.Conn) (jetstream.JetStream, error) { return jetstream.New(nc) }

func decodeCapsule(raw []byte) (*capsule.Capsule, error) {
	c := new(capsule.Capsule)
	return c, json.Unmarshal(raw, c)
}

// terminated reads sagad_messages_terminated_total{cause} from reg.
func terminated(t *testing.T, reg *prometheus.Registry, cause string) float64 {
	t.Helper()
	return sagatest.Terminated(t, reg, cause)
}
