package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/internal/natsconn"
	"github.com/sagad/sagad/store"
)

// userInfoSubject is nats-server's "who am I": it answers any user with
// the account the user lives in, when the server has a system account
// (sagad's embedded server has).
const userInfoSubject = "$SYS.REQ.USER.INFO"

// userInfoTimeout bounds the question; a server that does not answer has
// no system account, and the hint is left out.
const userInfoTimeout = 2 * time.Second

// maxAccountName bounds the account name quoted in a message.
const maxAccountName = 128

// parseUserInfo returns the account of a $SYS.REQ.USER.INFO reply, "" when
// the reply names none (an error reply, another server's format).
func parseUserInfo(b []byte) string {
	var r struct {
		Data *struct {
			Account string `json:"account"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Data == nil || len(r.Data.Account) > maxAccountName {
		return ""
	}
	return printable(r.Data.Account)
}

// noSagadRead is a read no sagad answered at once: reported as the
// missing topology it was when reads went to JetStream directly, keeping
// the cause for [globals.explainUnreached].
type noSagadRead struct{ cause *adminsvc.NoSagadError }

func (e *noSagadRead) Error() string   { return store.ErrNoTopology.Error() }
func (e *noSagadRead) Unwrap() []error { return []error{store.ErrNoTopology, e.cause} }

// explainUnreached tells a credential that cannot reach sagad from a sagad
// that is not running. On sagad's embedded server each role is an account:
// only the operator's imports saga.admin.>, only the operator's and the
// producers' saga.intake, and a request the account cannot route gets no
// responder at once, as if no sagad ran. When err is such a no-responder,
// it asks the server which account the credential lives in and, when that
// account cannot make the call, says so; otherwise err is unchanged.
func (g *globals) explainUnreached(err error) error {
	var ns *adminsvc.NoSagadError
	admin := errors.As(err, &ns) && ns.Waited == 0
	publish := !admin && !errors.As(err, &ns) && errors.Is(err, store.ErrNoTopology)
	if !admin && !publish {
		return err
	}
	acc := g.account()
	producer := acc == natsconn.AccountProducer || strings.HasPrefix(acc, natsconn.AccountProducer+"_")
	if acc == "" || acc == natsconn.AccountOperator || acc == "$G" || (publish && producer) {
		// Unknown, an account that can make the call, or a NATS without
		// accounts: sagad is what is missing.
		return err
	}
	code := ExitFailure
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	if publish {
		return exit(code, fmt.Errorf("this credential cannot publish capsules: it logs in to NATS account %s, which has no %s; "+
			"the operator's and the producers' accounts have (pass --nats-nkey with %s, %s or producer-<name>%s from <sagad's data dir>/%s)",
			acc, store.IntakeSubject, natsconn.RoleOperator+natsconn.SeedExt, natsconn.RoleProducer+natsconn.SeedExt, natsconn.SeedExt, natsconn.CredsDirName))
	}
	return exit(code, fmt.Errorf("this credential cannot reach sagad's admin service: it logs in to NATS account %s, and only the operator's account (%s, seed <sagad's data dir>/%s/%s) can call %s "+
		"(pass --nats-nkey with the operator's seed; nothing answered on %s)",
		acc, natsconn.AccountOperator, natsconn.CredsDirName, natsconn.RoleOperator+natsconn.SeedExt, adminsvc.SubjectPrefix+".>", ns.Subject))
}

// account asks the server which account g's credential lives in; "" when
// it cannot connect or the server does not say.
func (g *globals) account() string {
	o, err := g.options()
	if err != nil {
		return ""
	}
	nc, err := o.Connect(nats.Name("sagactl"), nats.Timeout(5*time.Second))
	if err != nil {
		return ""
	}
	defer nc.Close()
	m, err := nc.Request(userInfoSubject, nil, userInfoTimeout)
	if err != nil {
		return ""
	}
	return parseUserInfo(m.Data)
}
