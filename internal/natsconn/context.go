package natsconn

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// A NATS CLI context (the `nats context` command's) is a JSON file,
// <config>/nats/context/NAME.json, where <config> is $XDG_CONFIG_HOME or
// ~/.config; <config>/nats/context.txt names the selected one. sagactl reads
// the connection settings of one as the nats CLI does, so an operator who
// has `nats context select`ed a system reaches its sagad without repeating
// the URL and credentials.

// ErrContext wraps every context that cannot be used: an unknown or
// malformed name, a file that is not a context, settings sagactl cannot
// follow (an nsc lookup).
var ErrContext = errors.New("nats context")

// maxContextBytes bounds a context file: one holds a handful of short
// strings; anything larger is not one.
const maxContextBytes = 64 << 10

// contextFile is the part of a context file sagactl reads. Other members
// (description, JetStream domain and prefixes, colours...) are the nats
// CLI's own and ignored.
type contextFile struct {
	URL      string `json:"url"`
	Token    string `json:"token"`
	User     string `json:"user"`
	Password string `json:"password"`
	Creds    string `json:"creds"`
	NKey     string `json:"nkey"`
	Cert     string `json:"cert"`
	Key      string `json:"key"`
	CA       string `json:"ca"`
	NSC      string `json:"nsc"`
}

// Context is a NATS CLI context, read.
type Context struct {
	// Name is the context's name; Path its file.
	Name, Path string
	// Options are its connection settings.
	Options Options
}

// ContextDir is where the nats CLI keeps its contexts' files:
// $XDG_CONFIG_HOME/nats, or ~/.config/nats.
func ContextDir(getenv func(string) string) (string, error) {
	if dir := getenv("XDG_CONFIG_HOME"); dir != "" {
		return filepath.Join(dir, "nats"), nil
	}
	home := getenv("HOME")
	if home == "" {
		var err error
		if home, err = os.UserHomeDir(); err != nil {
			return "", fmt.Errorf("%w: no home directory to find contexts in: %w", ErrContext, err)
		}
	}
	return filepath.Join(home, ".config", "nats"), nil
}

// LoadContext reads the context name, or with name "" the selected one
// (context.txt). ok is false, with no error, when name is "" and no context
// is selected: the caller goes on without one.
func LoadContext(name string, getenv func(string) string) (ctx Context, ok bool, err error) {
	dir, err := ContextDir(getenv)
	if err != nil {
		return Context{}, false, err
	}
	if name == "" {
		b, err := os.ReadFile(filepath.Join(dir, "context.txt"))
		if errors.Is(err, os.ErrNotExist) {
			return Context{}, false, nil
		}
		if err != nil {
			return Context{}, false, fmt.Errorf("%w: the selected context: %w", ErrContext, err)
		}
		if name = strings.TrimSpace(string(b)); name == "" {
			return Context{}, false, nil
		}
	}
	if !validContextName(name) {
		return Context{}, false, fmt.Errorf("%w: %q is not a context name", ErrContext, name)
	}
	path := filepath.Join(dir, "context", name+".json")
	b, err := readBounded(path)
	if errors.Is(err, os.ErrNotExist) {
		return Context{}, false, fmt.Errorf("%w %q: no such context (%s does not exist; `nats context ls` lists them)", ErrContext, name, path)
	}
	if err != nil {
		return Context{}, false, fmt.Errorf("%w %q: %w", ErrContext, name, err)
	}
	o, err := DecodeContext(b, getenv)
	if err != nil {
		return Context{}, false, fmt.Errorf("%w %q (%s): %w", ErrContext, name, path, err)
	}
	return Context{Name: name, Path: path, Options: o}, true, nil
}

// readBounded reads a file of at most maxContextBytes.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxContextBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxContextBytes {
		return nil, fmt.Errorf("larger than %d bytes: not a context", maxContextBytes)
	}
	return b, nil
}

// validContextName is the nats CLI's rule: not empty, no "..", no path
// separator (a name never leaves the context directory).
func validContextName(name string) bool {
	return name != "" && !strings.Contains(name, "..") && !strings.ContainsAny(name, `/\`) && !strings.ContainsRune(name, 0)
}

// DecodeContext reads a context file's bytes into connection settings: one
// JSON object; a leading ~/ in a file's path is the home directory, as the
// nats CLI expands it. A context that resolves its credentials through nsc
// is refused: sagactl does not run other programs to connect.
func DecodeContext(b []byte, getenv func(string) string) (Options, error) {
	var f contextFile
	if err := json.Unmarshal(b, &f); err != nil {
		return Options{}, fmt.Errorf("not a context file: %w", err)
	}
	if f.NSC != "" {
		return Options{}, errors.New("its credentials come from nsc (\"nsc\"), which sagactl does not run: give --nats-creds")
	}
	home := getenv("HOME")
	path := func(p string) string {
		if rest, ok := strings.CutPrefix(p, "~/"); ok && home != "" {
			return filepath.Join(home, rest)
		}
		return p
	}
	o := Options{
		URL: f.URL, Token: f.Token, User: f.User, Password: f.Password,
		Creds: path(f.Creds), NKey: path(f.NKey),
		TLSCert: path(f.Cert), TLSKey: path(f.Key), TLSCA: path(f.CA),
	}
	if err := o.Validate(); err != nil {
		return Options{}, err
	}
	return o, nil
}
