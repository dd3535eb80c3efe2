package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/sagad/sagad/internal/natsconn"
)

// Roles of the embedded server's users. Each has an NKey whose seed sagad
// writes to <data dir>/creds/<role>.nk on first start (natsconn's default
// lookup finds them there).
const (
	// RoleSagad is sagad itself: every subject.
	RoleSagad = natsconn.RoleSagad
	// RoleOperator is sagactl: publish capsules, call the admin service,
	// read JetStream (stream and consumer info, direct gets, its own
	// consumers on checkpoints and events for wait, watch and lists).
	RoleOperator = natsconn.RoleOperator
	// RoleProducer publishes capsules on saga.intake and chain documents
	// on saga.compose, and nothing else.
	RoleProducer = natsconn.RoleProducer
	// RoleWorker serves executor and reviewer calls (NATS micro services
	// on agents.>) and publishes results on saga.complete.>.
	RoleWorker = natsconn.RoleWorker
)

// Roles lists every role, sagad's first.
var Roles = []string{RoleSagad, RoleOperator, RoleProducer, RoleWorker}

// inbox is where replies to a role's requests (JetStream acks among them)
// arrive.
const inbox = "_INBOX.>"

// RolePermissions are the subjects each role may publish and subscribe to;
// nil (sagad's) allows everything. deploy/nats/permissions.conf states the
// same for an external server, and a test keeps the two equal.
func RolePermissions(role string) *server.Permissions {
	allow := func(pub, sub []string) *server.Permissions {
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: pub},
			Subscribe: &server.SubjectPermission{Allow: sub},
		}
	}
	switch role {
	case RoleOperator:
		return allow([]string{
			"saga.intake",
			"saga.compose",
			"saga.admin.>",
			"$SRV.>",
			"$JS.API.INFO",
			"$JS.API.STREAM.INFO.>",
			"$JS.API.STREAM.NAMES",
			"$JS.API.STREAM.LIST",
			"$JS.API.STREAM.MSG.GET.>",
			"$JS.API.DIRECT.GET.>",
			"$JS.API.CONSUMER.INFO.>",
			"$JS.API.CONSUMER.NAMES.>",
			"$JS.API.CONSUMER.LIST.>",
			// Consumers only on the two streams sagactl follows (wait,
			// watch, list, history): CONSUMER.CREATE creates or updates,
			// so on any stream it would let an operator rewrite sagad's
			// own consumers (a phase's filter, its max deliveries). The
			// subject without a consumer name is the older clients'
			// ephemeral create. sagad keeps no durable consumer on these
			// streams, so wait and watch may remove theirs when they end.
			"$JS.API.CONSUMER.CREATE.KV_SAGA_CHECKPOINTS",
			"$JS.API.CONSUMER.CREATE.KV_SAGA_CHECKPOINTS.>",
			"$JS.API.CONSUMER.CREATE.SAGA_EVENTS",
			"$JS.API.CONSUMER.CREATE.SAGA_EVENTS.>",
			"$JS.API.CONSUMER.MSG.NEXT.KV_SAGA_CHECKPOINTS.>",
			"$JS.API.CONSUMER.MSG.NEXT.SAGA_EVENTS.>",
			"$JS.FC.>",
			"$JS.API.CONSUMER.DELETE.KV_SAGA_CHECKPOINTS.>",
			"$JS.API.CONSUMER.DELETE.SAGA_EVENTS.>",
		}, []string{inbox})
	case RoleProducer:
		return allow([]string{"saga.intake", "saga.compose"}, []string{inbox})
	case RoleWorker:
		p := allow([]string{"saga.complete.>"}, []string{"$SRV.>", "agents.>", inbox})
		// Replies to the requests it serves (sagad's calls, $SRV pings).
		p.Response = &server.ResponsePermission{
			MaxMsgs: server.DEFAULT_ALLOW_RESPONSE_MAX_MSGS,
			Expires: server.DEFAULT_ALLOW_RESPONSE_EXPIRATION,
		}
		return p
	}
	return nil
}

// CredsDir is where sagad keeps its roles' NKey seeds, inside its data
// directory.
func CredsDir(dataDir string) string { return filepath.Join(dataDir, natsconn.CredsDirName) }

// ensureCreds returns the embedded server's users, creating a seed file
// (0600, in a 0700 directory) for each role that has none yet; existing
// seeds are kept, so clients keep working across restarts.
func ensureCreds(dataDir string) ([]*server.NkeyUser, error) {
	dir := CredsDir(dataDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creds dir: %w", err)
	}
	var users []*server.NkeyUser
	for _, role := range Roles {
		path := filepath.Join(dir, role+natsconn.SeedExt)
		seed, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			seed, err = writeSeed(path)
		}
		if err != nil {
			return nil, fmt.Errorf("creds of %s: %w", role, err)
		}
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
		if err != nil {
			return nil, fmt.Errorf("creds of %s: %s is no NKey user seed: %w", role, path, err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("creds of %s: %w", role, err)
		}
		users = append(users, &server.NkeyUser{Nkey: pub, Permissions: RolePermissions(role)})
	}
	return users, nil
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
