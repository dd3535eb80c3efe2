package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sagad/sagad/internal/loopback"
)

// Binaries are the programs a run starts, built once per run.
type Binaries struct {
	Sagad, NATSServer, Agent string
}

// Build compiles sagad, nats-server (from the module cache, at the version
// go.mod requires) and chaosagent into dir. It must run inside sagad's
// module (the repository or any directory under it).
func Build(ctx context.Context, dir string, log io.Writer) (Binaries, error) {
	b := Binaries{
		Sagad:      filepath.Join(dir, "sagad"),
		NATSServer: filepath.Join(dir, "nats-server"),
		Agent:      filepath.Join(dir, "chaosagent"),
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator),
		"github.com/sagad/sagad/cmd/sagad", "github.com/nats-io/nats-server/v2", "github.com/sagad/sagad/cmd/internal/chaos/chaosagent")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return b, fmt.Errorf("chaos: build: %w", err)
	}
	return b, nil
}

// proc is a child process that can be killed and started again with the
// same command line.
type proc struct {
	name string
	path string
	args []string
	out  string // log file, appended to across restarts
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("chaos: %s already running", p.name)
	}
	f, err := os.OpenFile(p.out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group: a signal to the suite (Ctrl-C) does not reach
	// the children, which the suite stops itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("chaos: start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

// signal sends sig and waits for the process to exit (up to wait; then it
// is killed).
func (p *proc) signal(sig syscall.Signal, wait time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("chaos: %s is not running", p.name)
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return nil
	case <-time.After(wait):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("chaos: %s ignored %s for %s and was killed", p.name, sig, wait)
	}
}

// kill9 kills the process with SIGKILL and waits for it to be gone.
func (p *proc) kill9() error { return p.signal(syscall.SIGKILL, time.Minute) }

// running reports whether the process was started and not stopped.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// exited reports whether the process was started and has exited on its
// own (not stopped by the suite).
func (p *proc) exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop ends the process if it runs: SIGTERM, then SIGKILL after wait.
func (p *proc) stop(wait time.Duration) {
	if p.running() {
		_ = p.signal(syscall.SIGTERM, wait)
	}
}

// natsNode is one nats-server process with a config file of its own.
type natsNode struct {
	proc
	port     int
	httpPort int // monitoring: /healthz
	conf     string
}

func (n *natsNode) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// newNATSNodes writes the config files of n nodes under dir: one server, or
// a cluster whose nodes route to each other. maxFileStore is JetStream's
// file storage limit in bytes (0: 1 GiB).
func newNATSNodes(dir, bin string, n int, maxFileStore int64) ([]*natsNode, error) {
	ports, err := loopback.FreePorts(3 * n)
	if err != nil {
		return nil, err
	}
	if maxFileStore <= 0 {
		maxFileStore = 1 << 30
	}
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("%q", fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i])))
	}
	nodes := make([]*natsNode, n)
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		store := filepath.Join(dir, name)
		if err := os.MkdirAll(store, 0o750); err != nil {
			return nil, err
		}
		conf := fmt.Sprintf("server_name: %s\nlisten: \"127.0.0.1:%d\"\nhttp: \"127.0.0.1:%d\"\njetstream {\n  store_dir: %q\n  max_file_store: %d\n  max_memory_store: 67108864\n}\n",
			name, ports[i], ports[2*n+i], store, maxFileStore)
		if n > 1 {
			conf += fmt.Sprintf("cluster {\n  name: chaos\n  listen: \"127.0.0.1:%d\"\n  routes: [%s]\n}\n", ports[n+i], strings.Join(routes, ", "))
		}
		file := filepath.Join(dir, name+".conf")
		if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
			return nil, err
		}
		nodes[i] = &natsNode{
			proc: proc{name: "nats-server " + name, path: bin, args: []string{"-c", file}, out: filepath.Join(dir, name+".log")},
			port: ports[i], httpPort: ports[2*n+i], conf: file,
		}
	}
	return nodes, nil
}

// healthy reports whether the node's /healthz says ok: JetStream is up and
// every stream and consumer replica it holds has caught up.
func (n *natsNode) healthy(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/healthz", n.httpPort), nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// setMaxFileStore rewrites n's config with another file storage limit; it
// applies at the next start.
func (n *natsNode) setMaxFileStore(bytes int64) error {
	b, err := os.ReadFile(n.conf)
	if err != nil {
		return err
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "max_file_store:") {
			lines[i] = fmt.Sprintf("  max_file_store: %d", bytes)
		}
	}
	return os.WriteFile(n.conf, []byte(strings.Join(lines, "\n")), 0o644)
}

// sagadProc is one sagad process connected to an external nats-server.
type sagadProc struct {
	proc
}

// newSagad prepares sagad number i: a config file with the chaos executor,
// connected to url, with streams of replicas replicas.
func newSagad(dir string, bins Binaries, i int, url, workspace, calls string, replicas int, delay time.Duration) (*sagadProc, error) {
	cfg := map[string]any{
		"workspace":   workspace,
		"kv_buckets":  []string{targetBucket},
		"http_listen": "off",
		// info: the disk-full scenario waits for "jetstream writes
		// succeed again", an INFO line (a recovery is no warning).
		"log_level": "info",
		"replicas":  replicas,
		"executors": map[string]any{
			"chaos": map[string]any{
				"type":    "command",
				"command": []string{bins.Agent},
				"env":     []string{"CHAOS_CALLS=" + calls, "CHAOS_DELAY=" + delay.String()},
				"timeout": "30s",
			},
		},
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("sagad%d", i+1)
	file := filepath.Join(dir, name+".json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		return nil, err
	}
	return &sagadProc{proc{
		name: name, path: bins.Sagad,
		args: []string{"--config", file, "--nats-url", url, "--shutdown-timeout", "20s", "--unhealthy-after", unhealthyAfter.String()},
		out:  filepath.Join(dir, name+".log"),
	}}, nil
}

// unhealthyAfter is the sagads' --unhealthy-after: short, so that the
// disk-full scenario sees sagad report the full store within its window.
const unhealthyAfter = 3 * time.Second

// errGaveUp: the scenario's faults could not be injected as planned.
var errGaveUp = errors.New("chaos: scenario gave up")
