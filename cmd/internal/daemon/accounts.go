package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/executors/agentproto"
	"github.com/sagad/sagad/internal/natsconn"
	"github.com/sagad/sagad/store"
)

// The NATS accounts sagad's roles live in. Each account is its own subject
// space: a reply subject a client names, an inbox it subscribes to and the
// JetStream API it calls are its account's, never sagad's. What crosses
// between accounts is only the service exports and imports [Accounts]
// lists (SECURITY.md "Accounts").
const (
	// AccountSaga holds sagad and every stream and bucket; the only account
	// with JetStream.
	AccountSaga = "SAGA"
	// AccountOperator holds sagactl: the admin service and intake.
	AccountOperator = natsconn.AccountOperator
	// AccountProducer holds the default producer; a named producer P has
	// account PRODUCER_P.
	AccountProducer = natsconn.AccountProducer
)

// Subjects crossing between accounts. A capsule from producer P reaches
// sagad's account on IntakeSubject.P (store.IntakeSubject is the local name
// every producer publishes on); the operator is producer "operator".
const (
	// ComposeSubject is the composition service a producer calls (local
	// name); producer P's calls reach sagad on ComposeSubject.P.
	ComposeSubject = "saga.compose"
	// ArtifactsGetSubject is reserved for workers reading artifacts.
	ArtifactsGetSubject = "saga.artifacts.get"
	adminSubjects       = "saga.admin.>"
	completeSubjects    = "saga.complete.>"
)

// Role names of the users that are not a worker's: their seed files are
// <role>.nk in the creds directory.
const (
	RoleSagad    = natsconn.RoleSagad
	RoleOperator = natsconn.RoleOperator
	RoleProducer = natsconn.RoleProducer
)

// User is one NATS user of the generated configuration: its account and
// the seed file (in the creds directory) that logs in as it.
type User struct {
	// Role is the seed file's name without its extension, e.g. "sagad",
	// "producer-alice", "executor-demo".
	Role string
	// Account is the account the user lives in.
	Account string
}

// Import is a service an account imports: Subject of account From,
// published locally as To. With Stream set it is a stream import instead:
// From's messages on Subject arrive locally under Prefix.
type Import struct {
	From, Subject, To string
	Stream            bool
	Prefix            string
}

// Export is a service an account exports to the listed accounts only, or
// with Stream set a stream (messages flow out, no replies).
type Export struct {
	Subject  string
	To       []string
	Response string // singleton or stream
	// Threshold is how long a streamed reply may go quiet before the
	// server forgets where it goes ("" is the server's 2m).
	Threshold string
	Stream    bool
}

// Account is one account of the generated configuration.
type Account struct {
	Name      string
	JetStream bool
	Users     []User
	Exports   []Export
	Imports   []Import
	// Limits bound what the account's clients can hold on the server;
	// nil: none (sagad's own account).
	Limits *AccountLimits
}

// AccountLimits are a nats-server account's limits: a role's clients, all
// together, hold at most MaxConnections connections and MaxSubscriptions
// subscriptions, and publish messages of at most MaxPayload bytes. A
// hostile or broken client of one role (a worker opening connections or
// subscriptions in a loop) then exhausts its own account, never the server
// sagad shares with every other role.
type AccountLimits struct {
	MaxConnections   int
	MaxSubscriptions int
	MaxPayload       int
}

// The limits of the generated accounts, per kind of role. Payloads: a
// replay request carries a capsule (up to 640 KiB), sagactl publishes up
// to 1 MiB (so a capsule past RECEPTION's 512 KiB halts capsule_too_large
// rather than failing to send), a worker's result may carry its artifact
// inline; 1 MiB, nats-server's default, fits them all and holds if the
// server's own max_payload is raised. Connections and subscriptions leave
// room for a fleet (many worker processes, each a connection, a few
// subscriptions each; the operator's sagactl and watch sessions) while
// bounding what one account takes.
var (
	OperatorLimits = AccountLimits{MaxConnections: 128, MaxSubscriptions: 4096, MaxPayload: 1 << 20}
	ProducerLimits = AccountLimits{MaxConnections: 256, MaxSubscriptions: 4096, MaxPayload: 1 << 20}
	WorkerLimits   = AccountLimits{MaxConnections: 256, MaxSubscriptions: 4096, MaxPayload: 1 << 20}
)

// AccountSpec is what the accounts follow from: the producers named in the
// config file and its executors and reviewers of type nats.
type AccountSpec struct {
	Producers []string
	Executors map[string]executors.Endpoint
	Reviewers map[string]executors.Endpoint
	// IntakeMaxMsgBytes is the largest intake message sagad takes: the
	// accounts that publish capsules (the producers', the operator's) get
	// at least that payload limit.
	IntakeMaxMsgBytes int
}

// publishing is base with a payload limit of at least spec's intake
// message (a worker's account publishes child capsules on the intake).
func (spec AccountSpec) publishing(base AccountLimits) *AccountLimits {
	l := base
	l.MaxPayload = max(l.MaxPayload, spec.IntakeMaxMsgBytes)
	return &l
}

// accountSpec is c's part of the accounts.
func (c Config) accountSpec() AccountSpec {
	return AccountSpec{Producers: c.Producers, Executors: c.Executors, Reviewers: c.Reviewers, IntakeMaxMsgBytes: int(c.IntakeMaxMsgBytes)}
}

var producerName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// reservedProducers would share a user, a seed file or an intake subject
// with a role of their own.
var reservedProducers = []string{RoleSagad, RoleOperator, RoleProducer}

// sanitise maps an executor kind or reviewer id to a seed file name part:
// lower case, anything outside [a-z0-9_-] a '-'.
func sanitise(name string) string {
	b := []byte(strings.ToLower(name))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	return string(b)
}

// accountName is the account of a user with the given role (seed name).
func accountName(role string) string {
	return strings.ToUpper(strings.ReplaceAll(role, "-", "_"))
}

// sagaOwned are the subject spaces of sagad's account no worker subject may
// take: an import on them would divert sagad's own messages to a worker.
var sagaOwned = []string{"saga.>", "$JS.>", "$KV.>", "$O.>", "$SRV.>", "$SYS.>", "_INBOX.>", "_R_.>", "$JSC.>", "$NRG.>"}

// Accounts returns every account of spec, SAGA first, or an error naming
// the config entries that cannot have one (a name two endpoints share once
// sanitised, a subject two endpoints share or one sagad owns).
func Accounts(spec AccountSpec) ([]Account, error) {
	saga := Account{Name: AccountSaga, JetStream: true, Users: []User{{Role: RoleSagad, Account: AccountSaga}}}
	operator := Account{Name: AccountOperator, Users: []User{{Role: RoleOperator, Account: AccountOperator}}, Limits: spec.publishing(OperatorLimits)}
	var errs []error
	producers := []struct{ name, role, account string }{
		{RoleOperator, RoleOperator, AccountOperator},
		{RoleProducer, RoleProducer, AccountProducer},
	}
	seen := map[string]bool{}
	for _, p := range spec.Producers {
		switch {
		case !producerName.MatchString(p):
			errs = append(errs, fmt.Errorf("producers: %q: a producer name is 1 to 64 of a-z, 0-9, _ and - (it names a seed file and a subject)", p))
			continue
		case strings.HasPrefix(p, store.ExecutorProducerPrefix):
			errs = append(errs, fmt.Errorf("producers: %q: names starting %q are the executors' (their child capsules' intake)", p, store.ExecutorProducerPrefix))
			continue
		case slices.Contains(reservedProducers, p):
			errs = append(errs, fmt.Errorf("producers: %q is a role of its own (the default producer is %q, creds %s)", p, RoleProducer, RoleProducer+natsconn.SeedExt))
			continue
		case seen[p]:
			errs = append(errs, fmt.Errorf("producers: %q is listed twice", p))
			continue
		}
		seen[p] = true
		role := RoleProducer + "-" + p
		producers = append(producers, struct{ name, role, account string }{p, role, accountName(role)})
	}
	accounts := []*Account{&saga, &operator}
	for _, p := range producers {
		acc := &operator
		if p.account != AccountOperator {
			acc = &Account{Name: p.account, Users: []User{{Role: p.role, Account: p.account}}, Limits: spec.publishing(ProducerLimits)}
			accounts = append(accounts, acc)
		}
		intake, compose := store.IntakeSubject+"."+p.name, ComposeSubject+"."+p.name
		saga.Exports = append(saga.Exports,
			Export{Subject: intake, To: []string{acc.Name}, Response: "singleton"},
			Export{Subject: compose, To: []string{acc.Name}, Response: "singleton"})
		acc.Imports = append(acc.Imports,
			Import{From: AccountSaga, Subject: intake, To: store.IntakeSubject},
			Import{From: AccountSaga, Subject: compose, To: ComposeSubject})
	}
	// Admin replies may come in several messages (pages, a watch).
	saga.Exports = append(saga.Exports, Export{Subject: adminSubjects, To: []string{AccountOperator}, Response: "stream"})
	operator.Imports = append([]Import{{From: AccountSaga, Subject: adminSubjects, To: adminSubjects}}, operator.Imports...)

	type endpoint struct {
		kind, name, subject string
		agent               *executors.Endpoint
	}
	var eps []endpoint
	for _, group := range []struct {
		kind string
		m    map[string]executors.Endpoint
	}{{"executor", spec.Executors}, {"reviewer", spec.Reviewers}} {
		names := make([]string, 0, len(group.m))
		for name, ep := range group.m {
			if ep.Type == executors.EndpointNATS || ep.Type == executors.EndpointAgent {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		for _, name := range names {
			ep := group.m[name]
			if ep.Type == executors.EndpointAgent {
				eps = append(eps, endpoint{group.kind, name, ep.AgentExportSubject(), &ep})
				continue
			}
			eps = append(eps, endpoint{group.kind, name, ep.Subject, nil})
		}
	}
	roles := map[string]string{}
	var workers []string
	for i, ep := range eps {
		who := ep.kind + " " + fmt.Sprintf("%q", ep.name)
		role := ep.kind + "-" + sanitise(ep.name)
		if prev, ok := roles[role]; ok {
			errs = append(errs, fmt.Errorf("%s and %s would share the credentials %s: rename one", prev, who, role+natsconn.SeedExt))
			continue
		}
		roles[role] = who
		if !configSafeSubject(ep.subject) {
			errs = append(errs, fmt.Errorf("%s: subject %q: want a valid NATS subject of printable ASCII, without quotes or backslashes", who, ep.subject))
			continue
		}
		if owned := collides(ep.subject, sagaOwned); owned != "" {
			errs = append(errs, fmt.Errorf("%s: subject %q overlaps %s, which is sagad's own", who, ep.subject, owned))
			continue
		}
		// Each kind on a subject of its own: two endpoints on one subject
		// would be one worker account answering both, which is what the
		// accounts are there to prevent.
		for _, other := range eps[:i] {
			if server.SubjectsCollide(ep.subject, other.subject) {
				errs = append(errs, fmt.Errorf("%s: subject %q overlaps %q of %s %q: each executor and reviewer needs a subject of its own (its own credentials serve it)", who, ep.subject, other.subject, other.kind, other.name))
			}
		}
		if ep.agent != nil {
			acc := agentAccount(&saga, role, *ep.agent)
			accounts = append(accounts, acc)
			continue
		}
		acc := &Account{
			Name:    accountName(role),
			Users:   []User{{Role: role, Account: accountName(role)}},
			Exports: []Export{{Subject: ep.subject, To: []string{AccountSaga}, Response: "singleton"}},
			Limits:  spec.publishing(WorkerLimits),
			Imports: []Import{
				{From: AccountSaga, Subject: completeSubjects, To: completeSubjects},
				{From: AccountSaga, Subject: ArtifactsGetSubject, To: ArtifactsGetSubject},
			},
		}
		if ep.kind == "executor" && producerName.MatchString(role) {
			// A worker serving a call may delegate: it publishes child
			// capsules on saga.intake, which reach sagad on its own
			// subject; RECEPTION takes only children with the token of a
			// call in flight from there (no root capsule).
			intake := store.IntakeProducerPrefix + role
			saga.Exports = append(saga.Exports, Export{Subject: intake, To: []string{acc.Name}, Response: "singleton"})
			acc.Imports = append(acc.Imports, Import{From: AccountSaga, Subject: intake, To: store.IntakeSubject})
		}
		accounts = append(accounts, acc)
		workers = append(workers, acc.Name)
		saga.Imports = append(saga.Imports, Import{From: acc.Name, Subject: ep.subject, To: ep.subject})
	}
	if len(workers) > 0 {
		saga.Exports = append(saga.Exports,
			Export{Subject: completeSubjects, To: workers, Response: "singleton"},
			Export{Subject: ArtifactsGetSubject, To: workers, Response: "singleton"})
	}
	names := map[string]bool{}
	var out []Account
	for _, a := range accounts {
		if names[a.Name] {
			errs = append(errs, fmt.Errorf("two roles would share the account %s: rename one", a.Name))
		}
		names[a.Name] = true
		out = append(out, *a)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("nats accounts: %w", err)
	}
	return out, nil
}

// agentAccount is the account of an agent endpoint's host (type agent,
// executors/agent_accounts.go): it serves its prompt subjects to SAGA with
// streamed replies, and lets SAGA answer its queries (its _INBOX), ask its
// discovery and hear its heartbeats, each under a name of the role's own
// in SAGA. It imports nothing: an agent reaches none of sagad's subjects.
func agentAccount(saga *Account, role string, ep executors.Endpoint) *Account {
	name := accountName(role)
	prompt, hb := ep.AgentExportSubject(), ep.AgentHeartbeatSubject()
	to := []string{AccountSaga}
	acc := &Account{
		Name:  name,
		Users: []User{{Role: role, Account: name}},
		Exports: []Export{
			{Subject: prompt, To: to, Response: "stream", Threshold: agentThreshold(ep)},
			{Subject: "_INBOX.>", To: to, Response: "singleton"},
			{Subject: agentproto.InfoSubject, To: to, Response: "stream"},
			{Subject: hb, To: to, Stream: true},
		},
	}
	saga.Imports = append(saga.Imports,
		Import{From: name, Subject: prompt, To: prompt},
		Import{From: name, Subject: "_INBOX.>", To: executors.AgentAnswerPrefix(role) + ".>"},
		Import{From: name, Subject: agentproto.InfoSubject, To: executors.AgentInfoSubject(role)},
		Import{From: name, Subject: hb, Stream: true, Prefix: executors.AgentHeartbeatPrefix(role)},
	)
	return acc
}

// agentThreshold is how long the server keeps a streamed reply's way back
// across the accounts while the agent is quiet: the endpoint's timeout,
// which bounds the whole call, and a minute more.
func agentThreshold(ep executors.Endpoint) string {
	d := executors.DefaultAgentTimeout
	if t, err := time.ParseDuration(ep.Timeout); err == nil && t > 0 {
		d = t
	}
	return (d + time.Minute).String()
}

// configSafeSubject reports whether subject is a valid NATS subject that
// can stand quoted in a nats-server configuration as it is.
func configSafeSubject(subject string) bool {
	for _, c := range []byte(subject) {
		if c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return server.IsValidSubject(subject)
}

// collides returns the first of spaces that subject overlaps, or "".
func collides(subject string, spaces []string) string {
	for _, s := range spaces {
		if server.SubjectsCollide(subject, s) {
			return s
		}
	}
	return ""
}

// UsersOf lists the users of accounts in order.
func UsersOf(accounts []Account) []User {
	var us []User
	for _, a := range accounts {
		us = append(us, a.Users...)
	}
	return us
}

// Credential says how a user authenticates in the generated configuration.
type Credential func(u User) string

// NKeyCredential authenticates each user with the public key in keys (by
// role).
func NKeyCredential(keys map[string]string) Credential {
	return func(u User) string { return "nkey: " + quote(keys[u.Role]) }
}

// PasswordCredential authenticates user R with name R and the password in
// the environment variable SAGA_<R>_PASSWORD of nats-server (deploy/'s
// files, which run without seeds).
func PasswordCredential(u User) string {
	return "user: " + quote(u.Role) + ", password: $" + PasswordEnv(u.Role)
}

// PasswordEnv is the environment variable that holds role's password in
// [PasswordCredential]'s configuration.
func PasswordEnv(role string) string {
	return "SAGA_" + strings.ToUpper(strings.ReplaceAll(role, "-", "_")) + "_PASSWORD"
}

// AccountsConf renders accounts as a nats-server `accounts` block.
func AccountsConf(accounts []Account, cred Credential) string {
	var b strings.Builder
	b.WriteString("accounts {\n")
	for _, a := range accounts {
		fmt.Fprintf(&b, "  %s {\n", a.Name)
		if a.JetStream {
			b.WriteString("    jetstream: enabled\n")
		}
		if l := a.Limits; l != nil {
			fmt.Fprintf(&b, "    limits: {max_connections: %d, max_subscriptions: %d, max_payload: %d}\n", l.MaxConnections, l.MaxSubscriptions, l.MaxPayload)
		}
		b.WriteString("    users: [\n")
		for _, u := range a.Users {
			fmt.Fprintf(&b, "      {%s}  # %s%s\n", cred(u), u.Role, natsconn.SeedExt)
		}
		b.WriteString("    ]\n")
		if len(a.Exports) > 0 {
			b.WriteString("    exports: [\n")
			for _, e := range a.Exports {
				switch {
				case e.Stream:
					fmt.Fprintf(&b, "      {stream: %s, accounts: [%s]}\n", quote(e.Subject), strings.Join(e.To, ", "))
				case e.Threshold != "":
					fmt.Fprintf(&b, "      {service: %s, response_type: %s, response_threshold: %s, accounts: [%s]}\n", quote(e.Subject), e.Response, quote(e.Threshold), strings.Join(e.To, ", "))
				default:
					fmt.Fprintf(&b, "      {service: %s, response_type: %s, accounts: [%s]}\n", quote(e.Subject), e.Response, strings.Join(e.To, ", "))
				}
			}
			b.WriteString("    ]\n")
		}
		if len(a.Imports) > 0 {
			b.WriteString("    imports: [\n")
			for _, i := range a.Imports {
				if i.Stream {
					fmt.Fprintf(&b, "      {stream: {account: %s, subject: %s}, prefix: %s}\n", i.From, quote(i.Subject), quote(i.Prefix))
					continue
				}
				fmt.Fprintf(&b, "      {service: {account: %s, subject: %s}, to: %s}\n", i.From, quote(i.Subject), quote(i.To))
			}
			b.WriteString("    ]\n")
		}
		b.WriteString("  }\n")
	}
	b.WriteString("}\n")
	return b.String()
}

func quote(s string) string { return `"` + s + `"` }

// CredsDir is where sagad keeps its roles' NKey seeds, inside its data
// directory.
func CredsDir(dataDir string) string { return filepath.Join(dataDir, natsconn.CredsDirName) }

// ensureSeeds returns the public key of every user's seed in dir, creating
// a seed file (0600, in a 0700 directory) for each user that has none yet;
// existing seeds are kept, so clients keep working across restarts. The
// seed of an endpoint removed from the config stays, unused.
func ensureSeeds(dir string, users []User) (map[string]string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creds dir: %w", err)
	}
	keys := map[string]string{}
	for _, u := range users {
		path := filepath.Join(dir, u.Role+natsconn.SeedExt)
		seed, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			seed, err = writeSeed(path)
		}
		if err != nil {
			return nil, fmt.Errorf("creds of %s: %w", u.Role, err)
		}
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
		if err != nil {
			return nil, fmt.Errorf("creds of %s: %s is no NKey user seed: %w", u.Role, path, err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("creds of %s: %w", u.Role, err)
		}
		keys[u.Role] = pub
	}
	return keys, nil
}

// writeSeed creates a new user NKey and writes its seed to path, which must
// not exist yet (two sagads starting at once keep the first's).
func writeSeed(path string) ([]byte, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(append(seed, '\n')); err != nil {
		f.Close()
		return nil, err
	}
	return seed, f.Close()
}

// GenerateAccounts writes (or keeps) a seed per user of spec in credsDir
// and returns the nats-server `accounts` block that lets them in, the one
// source of both the embedded server's configuration and `sagad
// nats-config`'s.
func GenerateAccounts(spec AccountSpec, credsDir string) (string, []User, error) {
	accounts, err := Accounts(spec)
	if err != nil {
		return "", nil, err
	}
	users := UsersOf(accounts)
	keys, err := ensureSeeds(credsDir, users)
	if err != nil {
		return "", nil, err
	}
	return AccountsConf(accounts, NKeyCredential(keys)), users, nil
}
