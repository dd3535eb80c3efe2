package daemon

import (
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/rules"
)

// executorsConfig is the config file's "executors" and "reviewers" sections
// as an executors.Config. A command endpoint without a dir runs in the
// workspace, where the capsule's file: refs resolve.
func (c Config) executorsConfig() executors.Config {
	return executors.Config{Executors: inWorkspace(c.Executors, c.Workspace), Reviewers: inWorkspace(c.Reviewers, c.Workspace), Models: c.Models}
}

func inWorkspace(m map[string]executors.Endpoint, workspace string) map[string]executors.Endpoint {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]executors.Endpoint, len(m))
	for k, ep := range m {
		if ep.Type == executors.EndpointCommand && ep.Dir == "" {
			ep.Dir = workspace
		}
		out[k] = ep
	}
	return out
}

// buildExecutors returns the registry the pipeline calls: the built-in
// stubs plus every configured executor and reviewer, NATS and agent ones
// served over nc; accounts says the agents log in with the generated
// accounts' credentials.
func (c Config) buildExecutors(nc *nats.Conn, accounts bool) (*executors.Registry, error) {
	ec := c.executorsConfig()
	ec.AgentAccounts = accounts
	return ec.Build(nc)
}

// warnUnpriced says once, at start, which models the model endpoints and
// tiers may call have no price: their calls charge tokens only, and a
// dollar budget never binds on them.
func (c Config) warnUnpriced(log *slog.Logger) {
	for _, id := range c.executorsConfig().UnpricedModels() {
		log.Warn("model has no price in models.prices: its calls charge tokens only", "model", id)
	}
}

// rulesConfig is the constitution sagad enforces: the config file's
// "constitution" and "default_reviewer", with Rule 22's task kinds and
// reviewer ids those of the executors and reviewers served (names, from
// [executors.Registry] or [executors.Config.Names]).
func (c Config) rulesConfig(kinds, reviewers []string) rules.Config {
	rc := c.Constitution
	rc.ExecutorKinds, rc.ReviewerIDs = kinds, reviewers
	rc.DefaultReviewer = c.DefaultReviewer
	return rc
}
