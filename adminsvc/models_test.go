package adminsvc

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/natstest"
)

func init() {
	schemaFor[VerbModels] = "list-request"
	replySchema[VerbModels] = "models-reply"
}

// TestModelsEndpoint: saga.admin.models answers the tiers, prices,
// unpriced models and model endpoints of the config sagad passed, with
// an endpoint's type, model and base URL but never its key, key file,
// headers or a password in its base URL; a sagad that passed none answers
// internal.
func TestModelsEndpoint(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, s)
	cache := 0.05
	cfg := executors.Config{
		Executors: map[string]executors.Endpoint{
			"write": {Type: executors.EndpointOpenAI, ModelOptions: executors.ModelOptions{
				Model: "low-tier", BaseURL: "https://user:hunter2@llm.example/v1/", APIKeyEnv: "SAGAD_TEST_KEY",
				Headers: map[string]string{"X-Proxy-Auth": "header-secret"},
			}},
			"plain": {Type: executors.EndpointCommand, Command: []string{"true"}},
		},
		Reviewers: map[string]executors.Endpoint{
			"judge": {Type: executors.EndpointAnthropic, ModelOptions: executors.ModelOptions{Model: "claude-x", APIKeyFile: "/etc/sagad/anthropic.key"}},
		},
		Models: executors.Models{
			Tiers:  map[string]string{"low-tier": "small-1", "high-tier": "big-1"},
			Prices: map[string]executors.Price{"small-1": {InputPerMTok: 0.5, OutputPerMTok: 1.5, CacheReadPerMTok: &cache}},
		},
	}
	rep := cfg.ModelsReport()
	svc, err := Start(nc, actionsOnly{}, Config{Logger: testLogger(t), Models: &rep})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	f := &fixture{nc: nc}

	body := f.do(t, VerbModels, []byte(""), "")
	for _, secret := range []string{"hunter2", "user@", "SAGAD_TEST_KEY", "header-secret", "X-Proxy-Auth", "anthropic.key"} {
		require.NotContains(t, string(body), secret)
	}
	var got ModelsReply
	require.NoError(t, json.Unmarshal(body, &got))
	require.Equal(t, map[string]string{"low-tier": "small-1", "high-tier": "big-1"}, got.Tiers)
	require.Equal(t, 0.05, *got.Prices["small-1"].CacheReadPerMTok)
	require.Equal(t, []string{"big-1", "claude-x"}, got.Unpriced)
	require.Equal(t, []executors.ModelEndpoint{
		{Role: "executor", Key: "write", Type: "openai", Model: "low-tier", ModelID: "small-1", BaseURL: "https://llm.example/v1/"},
		{Role: "reviewer", Key: "judge", Type: "anthropic", Model: "claude-x", ModelID: "claude-x"},
	}, got.Endpoints)
	f.do(t, VerbModels, struct{}{}, "")
	f.do(t, VerbModels, []byte(`{"tier":"low-tier"}`), CodeBadRequest)

	viaClient, err := NewClient(nc, ClientConfig{}).Models(context.Background())
	require.NoError(t, err)
	require.Equal(t, got, viaClient)

	// A sagad that passes no models answers internal, as for chains.
	nc2, _ := natstest.Connect(t, natstest.RunServer(t))
	svc2, err := Start(nc2, actionsOnly{}, Config{Logger: testLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc2.Stop(context.Background())) })
	(&fixture{nc: nc2}).do(t, VerbModels, []byte(""), CodeInternal)
}
