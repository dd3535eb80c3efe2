package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/sagad/sagad/executors"
)

// ModelsReport is what `sagactl models -o json` prints: the tiers and prices
// of a sagad config file or of the running sagad, and the models without a
// price.
type ModelsReport = executors.ModelsReport

// ModelEndpoint is one model endpoint of a [ModelsReport].
type ModelEndpoint = executors.ModelEndpoint

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
func NewModelsReport(cfg executors.Config) ModelsReport { return cfg.ModelsReport() }

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
		fmt.Fprintln(tw, "\nROLE\tKEY\tTYPE\tMODEL\tMODEL ID\tBASE URL")
		for _, e := range rep.Endpoints {
			base := e.BaseURL
			if base == "" {
				base = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", printable(e.Role), printable(e.Key), printable(e.Type), printable(e.Model), printable(e.ModelID), printable(base))
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
		Use:   "models [--config FILE]",
		Short: "Print the model tiers and prices in force, and the models without a price",
		Long: `Print the models sagad is configured with: each tier and the model id it
stands for, each model's price in dollars per million tokens, the models a
tier or a model endpoint may call that have no price (their calls charge
tokens only; sagad warns of each at start), and the model endpoints with the
model each calls and their base URL (docs/MODELS.md). No API key, key file
or header is ever shown. -o json prints {"tiers", "prices", "unpriced",
"endpoints"}.

Without --config the running sagad is asked through its admin service
(saga.admin.models): the tiers and prices in force. --config FILE reads a
sagad config file offline instead, without NATS (e.g. before starting or
restarting sagad with it).

Exit codes: 0 printed, 1 error (the file cannot be read or its models are
invalid), 2 usage, 6 no sagad answered.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rep ModelsReport
			if path == "" {
				ctx, a, done, err := g.dialAdmin(cmd)
				if err != nil {
					return err
				}
				defer done()
				if rep, err = a.Models(ctx); err != nil {
					return adminErr(err)
				}
			} else {
				cfg, err := readSagadConfig(path)
				if err != nil {
					return exit(ExitFailure, err)
				}
				rep = NewModelsReport(cfg)
			}
			if enc := g.encoder(); enc != nil {
				return enc(cmd.OutOrStdout(), rep)
			}
			return printModels(cmd.OutOrStdout(), rep)
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "read sagad's config file offline instead of asking the running sagad")
	return cmd
}
