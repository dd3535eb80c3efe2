package cli

import (
	"encoding/json"
	"errors"
	"fmt"
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

// explainUnreached tells a credential that cannot reach sagad's admin
// service from a sagad that is not running. On sagad's accounts only the
// operator's account imports saga.admin.>: a producer's or worker's seed
// gets no responder at once, as if no sagad ran. When err is such a
// no-responder, it asks the server which account the credential lives in
// and, when that is another account of sagad's embedded server, says so.
func (g *globals) explainUnreached(err error) error {
	var ns *adminsvc.NoSagadError
	if !errors.As(err, &ns) || ns.Waited != 0 {
		return err
	}
	nc, derr := g.options().Connect(nats.Name("sagactl"), nats.Timeout(5*time.Second))
	if derr != nil {
		return err
	}
	defer nc.Close()
	m, rerr := nc.Request(userInfoSubject, nil, userInfoTimeout)
	if rerr != nil {
		return err
	}
	acc := parseUserInfo(m.Data)
	if acc == "" || acc == natsconn.AccountOperator || acc == "$G" {
		// The operator's account, or a NATS without accounts: the
		// service is there to reach, sagad is not running.
		return err
	}
	code := ExitFailure
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	return exit(code, fmt.Errorf("this credential cannot reach sagad's admin service: it logs in to NATS account %s, and only the operator's account (%s, seed <sagad's data dir>/%s/%s) can call %s "+
		"(pass --nats-nkey with the operator's seed; nothing answered on %s)",
		acc, natsconn.AccountOperator, natsconn.CredsDirName, natsconn.RoleOperator+natsconn.SeedExt, adminsvc.SubjectPrefix+".>", ns.Subject))
}
