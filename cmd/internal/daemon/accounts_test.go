package daemon

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/executors"
)

func natsEP(subject string) executors.Endpoint {
	return executors.Endpoint{Type: executors.EndpointNATS, Subject: subject}
}

// TestAccountsRefuse: names that would share credentials or an account,
// subjects two endpoints share or sagad owns, and producer names that are
// a role already are refused with a sentence naming them.
func TestAccountsRefuse(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		spec AccountSpec
		want string
	}{
		{"same credentials", AccountSpec{Executors: map[string]executors.Endpoint{"a.b": natsEP("x.1"), "a-b": natsEP("x.2")}}, "would share the credentials executor-a-b.nk"},
		{"shared subject", AccountSpec{Executors: map[string]executors.Endpoint{"demo": natsEP("agents.demo")}, Reviewers: map[string]executors.Endpoint{"r": natsEP("agents.demo")}}, "needs a subject of its own"},
		{"overlapping subject", AccountSpec{Executors: map[string]executors.Endpoint{"demo": natsEP("agents.>")}, Reviewers: map[string]executors.Endpoint{"r": natsEP("agents.demo.review")}}, "needs a subject of its own"},
		{"sagad's subject", AccountSpec{Executors: map[string]executors.Endpoint{"demo": natsEP("saga.phase.4")}}, "sagad's own"},
		{"inbox", AccountSpec{Reviewers: map[string]executors.Endpoint{"r": natsEP("_INBOX.*")}}, "sagad's own"},
		{"reserved producer", AccountSpec{Producers: []string{"operator"}}, "a role of its own"},
		{"bad producer", AccountSpec{Producers: []string{"Alice.B"}}, "a producer name is"},
		{"twice", AccountSpec{Producers: []string{"bob", "bob"}}, "listed twice"},
		{"executor's intake", AccountSpec{Producers: []string{"executor-demo"}}, "are the executors'"},
	} {
		_, err := Accounts(tt.spec)
		require.ErrorContains(t, err, tt.want, tt.name)
	}
}

// TestAccountsShape: each producer and endpoint is an account of its own
// with only its imports; only SAGA has JetStream; non-nats endpoints get
// none.
func TestAccountsShape(t *testing.T) {
	t.Parallel()
	accounts, err := Accounts(AccountSpec{
		Producers: []string{"alice"},
		Executors: map[string]executors.Endpoint{"demo": natsEP("agents.demo.execute"), "cmd": {Type: executors.EndpointCommand, Command: []string{"true"}}},
		Reviewers: map[string]executors.Endpoint{"Demo Reviewer": natsEP("agents.demo.review")},
	})
	require.NoError(t, err)
	byName := map[string]Account{}
	for _, a := range accounts {
		byName[a.Name] = a
		require.Equal(t, a.Name == AccountSaga, a.JetStream, a.Name)
		require.Len(t, a.Users, 1, a.Name)
	}
	require.Len(t, accounts, 6)
	require.Equal(t, "reviewer-demo-reviewer", byName["REVIEWER_DEMO_REVIEWER"].Users[0].Role)
	require.Equal(t, []Import{
		{From: AccountSaga, Subject: "saga.intake.alice", To: "saga.intake"},
		{From: AccountSaga, Subject: "saga.compose.alice", To: "saga.compose"},
	}, byName["PRODUCER_ALICE"].Imports)
	require.Equal(t, []Export{{Subject: "agents.demo.execute", To: []string{AccountSaga}, Response: "singleton"}}, byName["EXECUTOR_DEMO"].Exports)
	// An executor may delegate (child capsules on saga.intake); a reviewer
	// may not.
	require.Contains(t, byName["EXECUTOR_DEMO"].Imports, Import{From: AccountSaga, Subject: "saga.intake.executor-demo", To: "saga.intake"})
	for _, i := range byName["REVIEWER_DEMO_REVIEWER"].Imports {
		require.NotEqual(t, "saga.intake", i.To)
	}
	for _, e := range byName[AccountSaga].Exports {
		if strings.HasPrefix(e.Subject, "saga.intake.") {
			require.Len(t, e.To, 1, "%s is one producer's", e.Subject)
		}
	}
}

// TestRunRefusesSharedSubject: the embedded server does not start on a
// config whose executor and reviewer share a subject.
func TestRunRefusesSharedSubject(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig([]string{
		"--config", writeConfig(t, `{"executors": {"demo": {"type": "nats", "subject": "agents.demo"}}, "reviewers": {"r": {"type": "nats", "subject": "agents.demo"}}}`),
		"--nats-listen", "127.0.0.1:-1", "--data-dir", t.TempDir(), "--http-listen", "off",
	}, envOf(nil), io.Discard)
	require.NoError(t, err)
	err = Run(context.Background(), cfg, io.Discard, nil)
	require.ErrorContains(t, err, "needs a subject of its own")
}

// FuzzAccountsConf: whatever executor kinds, reviewer ids, subjects and
// producer names a config holds, the generator refuses them or writes a
// configuration nats-server reads back with one user per role, each in
// its own account (a name or subject cannot inject configuration).
func FuzzAccountsConf(f *testing.F) {
	f.Add("demo", "agents.demo.execute", "demo-reviewer", "agents.demo.review", "alice")
	f.Add("a b", "x.>", "r", "x.*", "bob")
	f.Add(`k"}`, `s"} ] }`, "r", "t", "p")
	f.Add("k", "s.*.t", "R#1", "u.v", "saga")
	f.Add("k", "$X.y", "r", "$Y", "p")
	f.Fuzz(func(t *testing.T, kind, subject, reviewer, rsubject, producer string) {
		spec := AccountSpec{
			Executors: map[string]executors.Endpoint{kind: natsEP(subject)},
			Reviewers: map[string]executors.Endpoint{reviewer: natsEP(rsubject)},
			Producers: []string{producer},
		}
		accounts, err := Accounts(spec)
		if err != nil {
			return
		}
		text := AccountsConf(accounts, PasswordCredential)
		for _, u := range UsersOf(accounts) {
			t.Setenv(PasswordEnv(u.Role), "pw")
		}
		var opts server.Options
		require.NoError(t, opts.ProcessConfigString(text), "%s", text)
		require.Len(t, opts.Users, len(UsersOf(accounts)))
		seen := map[string]bool{}
		for _, u := range opts.Users {
			require.False(t, seen[u.Account.Name], "two users in %s", u.Account.Name)
			seen[u.Account.Name] = true
		}
	})
}

// TestAccountLimits: every account but sagad's is bounded, and the
// accounts that publish capsules may send the largest intake message
// sagad takes.
func TestAccountLimits(t *testing.T) {
	t.Parallel()
	accounts, err := Accounts(AccountSpec{Producers: []string{"bob"}, IntakeMaxMsgBytes: 2 << 20,
		Executors: map[string]executors.Endpoint{"demo": {Type: executors.EndpointNATS, Subject: "agents.demo"}}})
	require.NoError(t, err)
	for _, a := range accounts {
		if a.Name == AccountSaga {
			require.Nil(t, a.Limits, "sagad's own account")
			continue
		}
		require.NotNil(t, a.Limits, a.Name)
		require.Positive(t, a.Limits.MaxConnections, a.Name)
		require.Positive(t, a.Limits.MaxSubscriptions, a.Name)
		require.Equal(t, 2<<20, a.Limits.MaxPayload, a.Name)
	}
	require.Contains(t, AccountsConf(accounts, PasswordCredential), "limits: {max_connections: 256, max_subscriptions: 4096, max_payload: 2097152}")
}

// TestAgentAccounts: an agent endpoint's account exports its prompt
// subjects (streamed replies, a threshold past its timeout), its _INBOX,
// discovery and its heartbeats to SAGA and imports nothing; SAGA imports
// them under the role's names; two agent endpoints that could pick the
// same agent are refused; nats-server reads the configuration back.
func TestAgentAccounts(t *testing.T) {
	t.Parallel()
	spec := AccountSpec{
		Executors: map[string]executors.Endpoint{"code": {Type: executors.EndpointAgent, Agent: "cc", Owner: "alice", Timeout: "30m"}},
		Reviewers: map[string]executors.Endpoint{"judge": {Type: executors.EndpointAgent, Subject: "agents.prompt.judge.alice.main"}},
	}
	accounts, err := Accounts(spec)
	require.NoError(t, err)
	byName := map[string]Account{}
	for _, a := range accounts {
		byName[a.Name] = a
	}
	code := byName["EXECUTOR_CODE"]
	require.Empty(t, code.Imports, "an agent imports nothing of sagad's")
	require.Equal(t, []Export{
		{Subject: "agents.prompt.cc.alice.*", To: []string{AccountSaga}, Response: "stream", Threshold: "31m0s"},
		{Subject: "_INBOX.>", To: []string{AccountSaga}, Response: "singleton"},
		{Subject: "$SRV.INFO.agents", To: []string{AccountSaga}, Response: "stream"},
		{Subject: "agents.hb.cc.alice.*", To: []string{AccountSaga}, Stream: true},
	}, code.Exports)
	require.Contains(t, byName[AccountSaga].Imports, Import{From: "REVIEWER_JUDGE", Subject: "_INBOX.>", To: "saga.answer.reviewer-judge.>"})
	require.Contains(t, byName[AccountSaga].Imports, Import{From: "REVIEWER_JUDGE", Subject: "agents.hb.judge.alice.main", Stream: true, Prefix: "saga.hb.reviewer-judge"})
	opts := &server.Options{}
	require.NoError(t, opts.ProcessConfigString(AccountsConf(accounts, func(u User) string { return "user: " + quote(u.Role) + ", password: x" })))

	spec.Reviewers["other"] = executors.Endpoint{Type: executors.EndpointAgent, Agent: "cc"}
	_, err = Accounts(spec)
	require.ErrorContains(t, err, "needs a subject of its own")
}
