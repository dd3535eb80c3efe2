package daemon

import (
	"errors"
	"fmt"

	"github.com/sagad/sagad/internal/natsconn"
)

// ErrNATSChoice: sagad was given both an outside NATS URL and an embedded
// server's listen address at the same level of precedence, and cannot tell
// which server it should use. It refuses rather than pick one: either
// choice, made silently, would surprise whoever set the other.
var ErrNATSChoice = errors.New("both an outside NATS URL and an embedded server's listen address are given")

// natsSources says where the two settings that choose sagad's NATS server
// came from: "" when not given, otherwise a name a person recognises (the
// variable, the config file key or the flag). urlFlag and listenFlag report
// the flags given on the command line, which win over everything else.
type natsSources struct {
	url, listen         string
	urlFlag, listenFlag bool
}

// natsSourcesOf reads where the file and the environment set the URL and
// the listen address; the caller adds the flags.
func natsSourcesOf(file Config, getenv func(string) string) natsSources {
	var src natsSources
	if file.URL != "" {
		src.url = "config file nats_url"
	}
	if file.NATSListen != "" {
		src.listen = "config file nats_listen"
	}
	if urlEnv := natsconn.EnvName(natsconn.EnvURL, natsconn.DaemonEnvPrefix); getenv(urlEnv) != "" {
		src.url = urlEnv
	}
	if getenv("SAGAD_NATS_LISTEN") != "" {
		src.listen = "SAGAD_NATS_LISTEN"
	}
	return src
}

// chooseNATS settles whether sagad connects to an outside NATS (cfg.URL) or
// starts its embedded server (cfg.NATSListen) once every layer is laid over
// cfg. A flag given on the command line wins over the environment and the
// file, and the setting it overrides is dropped with a warning; both given
// by flags, or neither by a flag and both by the environment or the file,
// is refused with [ErrNATSChoice] naming both. It returns the warnings.
func chooseNATS(cfg *Config, src natsSources) ([]string, error) {
	if src.urlFlag {
		src.url = "--nats-url"
	}
	if src.listenFlag {
		src.listen = "--nats-listen"
	}
	switch {
	case cfg.URL == "" || cfg.NATSListen == "":
		return nil, nil
	case src.urlFlag == src.listenFlag:
		return nil, fmt.Errorf("%w: %s %s and %s %s: give one (the URL connects sagad to that NATS; the listen address starts its embedded server)",
			ErrNATSChoice, src.url, natsconn.Redact(cfg.URL), src.listen, cfg.NATSListen)
	case src.listenFlag:
		w := fmt.Sprintf("--nats-listen given on the command line: starting the embedded server; the outside NATS URL from %s (%s) is ignored",
			src.url, natsconn.Redact(cfg.URL))
		cfg.URL = ""
		return []string{w}, nil
	default:
		w := fmt.Sprintf("--nats-url given on the command line: connecting to it; the embedded server's listen address from %s (%s) is ignored",
			src.listen, cfg.NATSListen)
		cfg.NATSListen = ""
		return []string{w}, nil
	}
}

// renamedEnv are variables sagad read once under another name and still
// reads, with a warning: the older name to its flag, whose variable
// ([envName]) is the newer name. Dropping them would turn a console's
// authentication off on loopback without a word.
var renamedEnv = map[string]string{
	"SAGA_UI_TOKEN":      "ui-token",
	"SAGA_UI_BASIC_AUTH": "ui-basic-auth",
}

// envWarnings names the SAGA_* variables set in the environment that sagad
// does not read (sagactl's connection settings: sagad has its own SAGAD_*
// names for them) or reads only under an older name.
func envWarnings(getenv func(string) string) []string {
	var w []string
	for _, name := range natsconn.EnvNames() {
		if getenv(name) != "" {
			w = append(w, fmt.Sprintf("%s is set and ignored: it is sagactl's; sagad reads %s", name,
				natsconn.EnvName(name, natsconn.DaemonEnvPrefix)))
		}
	}
	for _, old := range []string{"SAGA_UI_TOKEN", "SAGA_UI_BASIC_AUTH"} {
		if getenv(old) != "" {
			w = append(w, fmt.Sprintf("%s is the older name of %s: read for now, rename it", old, envName(renamedEnv[old])))
		}
	}
	return w
}
