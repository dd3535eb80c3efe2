package cli

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/sagad/sagad/adminsvc"
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
