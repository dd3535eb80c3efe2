package pipeline_test

import (
	"encoding/json"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
)

type jetstreamJS = jetstream.JetStream

func newJS(nc *nats.Conn) (jetstream.JetStream, error) { return jetstream.New(nc) }

func decodeCapsule(raw []byte) (*capsule.Capsule, error) {
	c := new(capsule.Capsule)
	return c, json.Unmarshal(raw, c)
}
