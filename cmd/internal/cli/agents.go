package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sagad/sagad/adminsvc"
)

// newAgents builds `sagactl agents`, a request to sagad's admin service
// (saga.admin.agents).
func newAgents(g *globals) *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "agents [--wait D]",
		Short: "List the agents sagad can see (Agent Protocol for NATS): owner, session, protocol, alive, what they serve",
		Long: `List the agents the answering sagad can see: every agent of the Agent
Protocol for NATS that answers discovery ($SRV.INFO.agents) within --wait,
and every one whose heartbeats (agents.hb.<agent>.<owner>.<session>) that
sagad received. ALIVE is yes when a beat came within three of the agent's
intervals; DISCOVERED says it answered discovery now. SERVES names the
configured executor kinds and reviewer ids whose calls go to it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if wait < 0 || wait > 10*time.Second {
				return exit(ExitUsage, fmt.Errorf("--wait %s: want 0 to 10s", wait))
			}
			ctx, a, done, err := g.dialAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			r, err := a.Agents(ctx, adminsvc.AgentsRequest{WaitMS: int(wait.Milliseconds())})
			if err != nil {
				return adminErr(err)
			}
			out := cmd.OutOrStdout()
			if enc := g.encoder(); enc != nil {
				return enc(out, r)
			}
			tw := table(out)
			fmt.Fprintln(tw, "AGENT\tOWNER\tSESSION\tPROTOCOL\tALIVE\tLAST_BEAT\tDISCOVERED\tSERVES")
			for _, ag := range r.Agents {
				last := "-"
				if ag.LastHeartbeat != nil {
					last = time.Since(*ag.LastHeartbeat).Truncate(time.Second).String() + " ago"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", printable(ag.Agent), printable(ag.Owner), printable(ag.Session),
					dash(printable(ag.ProtocolVersion)), yesNo(ag.Alive), last, yesNo(ag.Discovered), dash(printable(strings.Join(ag.Serves, ", "))))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", time.Second, "how long discovery collects the agents' answers (at most 10s)")
	return cmd
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
