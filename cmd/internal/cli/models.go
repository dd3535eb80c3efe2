package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/sagad/sagad/executors"
)

// ModelsReport is what `sagactl models -o json` prints: the tiers and prices
// of a sagad config file, and the models without a price.
type ModelsReport struct {
	Tiers  map[string]string          `json:"tiers"`
	Prices map[string]executors.Price `json:"prices"`
	// Unpriced are the model ids the tiers and model endpoints may call
	// that have no price: their calls charge tokens only.
	Unpriced []string `json:"unpriced"`
	// Endpoints are the model endpoints, by role and key, with the model
	// id each calls by default.
	Endpoints []ModelEndpoint `json:"endpoints"`
}

// ModelEndpoint is one model endpoint of a [ModelsReport].
type ModelEndpoint struct {
	Role  string `json:"role"`
	Key   string `json:"key"`
	Type  string `json:"type"`
	Model string `json:"model"`
	// ModelID is Model with its tier resolved.
	ModelID string `json:"model_id"`
}

// readSagadConfig reads what sagactl needs of sagad's config file: its
// executors, reviewers and models; every other member is left to sagad.
func readSagadConfig(path string) (executors.Config, error) {
	var cfg executors.Config
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, err
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	if err := cfg.Models.Validate(); err != nil {
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// NewModelsReport describes the models of cfg.
func NewModelsReport(cfg executors.Config) ModelsReport {
	rep := ModelsReport{Tiers: cfg.Models.Tiers, Prices: cfg.Models.Prices, Unpriced: cfg.UnpricedModels(), Endpoints: []ModelEndpoint{}}
	if rep.Tiers == nil {
		rep.Tiers = map[string]string{}
	}
	if rep.Prices == nil {
		rep.Prices = map[string]executors.Price{}
	}
	if rep.Unpriced == nil {
		rep.Unpriced = []string{}
	}
	for _, role := range []struct {
		name string
		m    map[string]executors.Endpoint
	}{{"executor", cfg.Executors}, {"reviewer", cfg.Reviewers}} {
		for _, key := range sortedMapKeys(role.m) {
			ep := role.m[key]
			if ep.Type == executors.EndpointOpenAI || ep.Type == executors.EndpointAnthropic {
				rep.Endpoints = append(rep.Endpoints, ModelEndpoint{Role: role.name, Key: key, Type: ep.Type, Model: ep.Model, ModelID: cfg.Models.Resolve(ep.Model)})
			}
		}
	}
	return rep
}

// printModels writes the report as three tables.
func printModels(out io.Writer, rep ModelsReport) error {
	tw := table(out)
	fmt.Fprintln(tw, "TIER\tMODEL")
	for _, t := range sortedMapKeys(rep.Tiers) {
		fmt.Fprintf(tw, "%s\t%s\n", printable(t), printable(rep.Tiers[t]))
	}
	fmt.Fprintln(tw, "\nMODEL\tINPUT $/MTOK\tOUTPUT $/MTOK\tCACHE READ\tCACHE WRITE")
	for _, id := range sortedMapKeys(rep.Prices) {
		p := rep.Prices[id]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", printable(id), money(p.InputPerMTok), money(p.OutputPerMTok), moneyOr(p.CacheReadPerMTok), moneyOr(p.CacheWritePerMTok))
	}
	for _, id := range rep.Unpriced {
		fmt.Fprintf(tw, "%s\tno price: tokens only\t\t\t\n", printable(id))
	}
	if len(rep.Endpoints) > 0 {
		fmt.Fprintln(tw, "\nROLE\tKEY\tTYPE\tMODEL\tMODEL ID")
		for _, e := range rep.Endpoints {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Role, printable(e.Key), e.Type, printable(e.Model), printable(e.ModelID))
		}
	}
	return tw.Flush()
}

func sortedMapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func moneyOr(v *float64) string {
	if v == nil {
		return "as input"
	}
	return money(*v)
}

func newModels(g *globals) *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "models --config FILE",
		Short: "Print the model tiers and prices of a sagad config file, and the models without a price",
		Long: `Print the "models" section of sagad's config file: each tier and the model id
it stands for, each model's price in dollars per million tokens, the models
a tier or a model endpoint may call that have no price (their calls charge
tokens only; sagad warns of each at start), and the model endpoints with the
model each calls. Read offline from the file (docs/MODELS.md); -o json
prints {"tiers", "prices", "unpriced", "endpoints"}.

Exit codes: 0 printed, 1 the file cannot be read or its models are invalid,
2 usage (no --config).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return exit(ExitUsage, errors.New("--config FILE is required: sagad's config file"))
			}
			cfg, err := readSagadConfig(path)
			if err != nil {
				return exit(ExitFailure, err)
			}
			rep := NewModelsReport(cfg)
			if enc := g.encoder(); enc != nil {
				return enc(cmd.OutOrStdout(), rep)
			}
			return printModels(cmd.OutOrStdout(), rep)
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "sagad's config file (required)")
	return cmd
}
