package cli

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/costs"
)

// completeTimeout bounds what completing a capsule id may take: a shell
// waits on it, so a slow or absent server yields no ids rather than a hang.
const completeTimeout = 2 * time.Second

// completeLimit bounds the ids offered: past it, the shell would only list
// a screenful of them anyway.
const completeLimit = 1000

// completeIDs is the ValidArgsFunction of the commands whose first argument
// is a capsule id: the keys of the checkpoint bucket starting with what was
// typed, best effort (nothing when NATS does not answer in time).
func completeIDs(g *globals) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			if cmd.Name() == "decide" && len(args) == 1 {
				return []string{"accept", "revise"}, cobra.ShellCompDirectiveNoFileComp
			}
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(context.Background(), completeTimeout)
		defer cancel()
		ids, err := g.capsuleIDs(ctx, toComplete)
		if err != nil {
			cobra.CompDebugln("sagactl: capsule ids: "+err.Error(), true)
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return ids, cobra.ShellCompDirectiveNoFileComp
	}
}

// capsuleIDs lists the capsule keys that start with prefix, at most
// [completeLimit] of them, newest first, as sagad's admin service lists them.
func (g *globals) capsuleIDs(ctx context.Context, prefix string) ([]string, error) {
	o, err := g.options()
	if err != nil {
		return nil, err
	}
	nc, err := o.Connect(nats.Name("sagactl"), nats.Timeout(completeTimeout))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	a := adminsvc.NewClient(nc, adminsvc.ClientConfig{})
	page, err := a.List(ctx, adminsvc.ListRequest{Prefix: prefix, Limit: completeLimit})
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(page.Items))
	for _, s := range page.Items {
		ids = append(ids, s.Key)
	}
	slices.Sort(ids)
	return ids, nil
}

// addIDCompletion gives every command whose first argument is a capsule id
// ("status ID", "watch [ID]") the capsule id completion.
func addIDCompletion(g *globals, root *cobra.Command) {
	for _, c := range root.Commands() {
		f := strings.Fields(c.Use)
		if len(f) > 1 && (strings.HasPrefix(f[1], "ID") || f[1] == "[ID]") && c.ValidArgsFunction == nil {
			c.ValidArgsFunction = completeIDs(g)
		}
	}
}

// capsuleStates are the values of --state, in the order a person meets them.
var capsuleStates = []string{
	string(capsule.InProgress), string(capsule.Paused), string(capsule.WaitingForOperator), string(capsule.Waiting),
	string(capsule.Completed), string(capsule.Halted), string(capsule.Cancelled),
}

// outputFormats are the values of -o; jsonpath= wants its template after it.
var outputFormats = []string{outputTable, outputWide, outputJSON, outputYAML, outputJSONPath}

// addValueCompletion offers the closed sets of values a flag takes (-o,
// --state, cost --by) and the wave and composition ids sagad knows, in
// every command that has such a flag or argument.
func addValueCompletion(g *globals, root *cobra.Command) {
	_ = root.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return outputFormats, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Flags().Lookup("state") != nil {
			_ = c.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(capsuleStates, cobra.ShellCompDirectiveNoFileComp))
		}
		if c.Name() == "cost" && c.Flags().Lookup("by") != nil {
			_ = c.RegisterFlagCompletionFunc("by", cobra.FixedCompletions(costs.Groupings, cobra.ShellCompDirectiveNoFileComp))
		}
		if c.Flags().Lookup("wave") != nil {
			_ = c.RegisterFlagCompletionFunc("wave", func(_ *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
				return g.completeWaves(prefix), cobra.ShellCompDirectiveNoFileComp
			})
		}
		if p := c.Parent(); p != nil && c.ValidArgsFunction == nil {
			f := strings.Fields(c.Use)
			switch {
			case p.Name() == "wave" && len(f) > 1 && f[1] == "WAVE":
				c.ValidArgsFunction = firstArg(g.completeWaves)
			case p.Name() == "composition" && len(f) > 1 && f[1] == "ID":
				c.ValidArgsFunction = firstArg(g.completeCompositions)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// firstArg completes a command's first argument with ids, and nothing after.
func firstArg(ids func(prefix string) []string) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return ids(prefix), cobra.ShellCompDirectiveNoFileComp
	}
}

// completeWaves lists the wave ids sagad knows that start with prefix,
// best effort (none when sagad does not answer within completeTimeout); a
// composition's budget wave carries the composition's name as the
// completion's description, which the shells show beside the id.
func (g *globals) completeWaves(prefix string) []string {
	var ids []string
	g.withCompletionAdmin(func(ctx context.Context, a *adminsvc.Client) error {
		waves, err := a.Waves(ctx)
		for _, w := range waves {
			if !strings.HasPrefix(w.WaveID, prefix) {
				continue
			}
			if w.Composition != "" {
				ids = append(ids, w.WaveID+"\tcomposition "+printable(w.Composition))
				continue
			}
			ids = append(ids, w.WaveID)
		}
		return err
	})
	slices.Sort(ids)
	return ids
}

// completeCompositions lists the composition ids of the runs sagad lists
// that start with prefix, best effort.
func (g *globals) completeCompositions(prefix string) []string {
	var ids []string
	g.withCompletionAdmin(func(ctx context.Context, a *adminsvc.Client) error {
		l, err := a.CompositionList(ctx, adminsvc.CompositionListRequest{Limit: completeLimit})
		for _, c := range l.Compositions {
			if strings.HasPrefix(c.CompositionID, prefix) {
				ids = append(ids, c.CompositionID)
			}
		}
		return err
	})
	slices.Sort(ids)
	return slices.Compact(ids)
}

// withCompletionAdmin runs f with sagad's admin client within
// completeTimeout; a failure goes to cobra's completion debug log only.
func (g *globals) withCompletionAdmin(f func(context.Context, *adminsvc.Client) error) {
	ctx, cancel := context.WithTimeout(context.Background(), completeTimeout)
	defer cancel()
	o, err := g.options()
	if err == nil {
		var nc *nats.Conn
		if nc, err = o.Connect(nats.Name("sagactl"), nats.Timeout(completeTimeout)); err == nil {
			defer nc.Close()
			err = f(ctx, adminsvc.NewClient(nc, adminsvc.ClientConfig{}))
		}
	}
	if err != nil {
		cobra.CompDebugln("sagactl: completion: "+err.Error(), true)
	}
}
