package natstest

import (
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sagad/sagad/internal/loopback"
)

// Account is the account every client of a natstest server lives in (no
// accounts are configured): stream leaders are looked up in it.
const Account = server.DEFAULT_GLOBAL_ACCOUNT

// clusterTimeout bounds how long RunCluster and Restart wait for routes and a
// meta leader. An election takes 4–9 s in nats-server (not configurable from
// outside its package), and a busy machine stretches that.
const clusterTimeout = 60 * time.Second

// Cluster is an in-process JetStream cluster on loopback: every node has its
// own file store in a temporary directory and fixed client and route ports,
// so a node killed with [Cluster.Kill] comes back with [Cluster.Restart] at
// the same address with the same data, the way a restarted process would.
type Cluster struct {
	t     testing.TB
	name  string
	mu    sync.Mutex
	nodes []*server.Server // nil while killed
	opts  []server.Options // each node's options, reused on restart
}

// RunCluster starts n nodes forming one JetStream cluster and returns once
// every node is ready for connections, routed to all others, and a meta
// leader is elected. Nodes are shut down on test cleanup.
func RunCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := FormingCluster(t, n, n)
	c.WaitForMetaLeader()
	return c
}

// FormingCluster prepares n nodes of one JetStream cluster and starts only
// the first up of them, without waiting for a meta leader: a cluster still
// forming. [Cluster.Start] starts the others. A new cluster elects no meta
// leader before every node it was configured with has joined once
// (nats-server counts no vote of a peer it has not met), so JetStream does
// not answer requests until then. Nodes are shut down on test cleanup.
func FormingCluster(t testing.TB, n, up int) *Cluster {
	t.Helper()
	if n < 1 || up < 0 || up > n {
		t.Fatalf("natstest: cluster of %d nodes, %d up", n, up)
	}
	c := &Cluster{t: t, name: "natstest-" + fmt.Sprint(time.Now().UnixNano()%1e6)}
	ports := freePorts(t, 2*n)
	clientPorts, routePorts := ports[:n], ports[n:]
	routes := make([]*url.URL, n)
	for i, p := range routePorts {
		routes[i] = &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", p)}
	}
	for i := range n {
		c.opts = append(c.opts, server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       clientPorts[i],
			JetStream:  true,
			StoreDir:   t.TempDir(),
			NoLog:      true,
			NoSigs:     true,
			Cluster: server.ClusterOpts{
				Name: c.name,
				Host: "127.0.0.1",
				Port: routePorts[i],
			},
			Routes: routes,
		})
	}
	c.nodes = make([]*server.Server, n)
	// Cleanups run LIFO: connections made later close first, nodes shut
	// down before their store directories (registered above) are removed.
	t.Cleanup(c.shutdown)
	for i := range up {
		c.nodes[i] = c.start(i)
	}
	return c
}

// start runs node i from its options and waits until it accepts clients.
func (c *Cluster) start(i int) *server.Server {
	c.t.Helper()
	o := c.opts[i] // a copy: the server keeps and changes its Options
	o.Routes = append([]*url.URL(nil), c.opts[i].Routes...)
	s, err := server.NewServer(&o)
	if err != nil {
		c.t.Fatalf("natstest: cluster node %s: %v", o.ServerName, err)
	}
	go s.Start()
	if !s.ReadyForConnections(readyTimeout) {
		s.Shutdown()
		c.t.Fatalf("natstest: cluster node %s not ready after %s", o.ServerName, readyTimeout)
	}
	return s
}

func (c *Cluster) shutdown() {
	c.mu.Lock()
	nodes := append([]*server.Server(nil), c.nodes...)
	c.mu.Unlock()
	for _, s := range nodes {
		if s != nil {
			s.Shutdown()
		}
	}
	for _, s := range nodes {
		if s != nil {
			s.WaitForShutdown()
		}
	}
}

// Len is the number of nodes, running or killed.
func (c *Cluster) Len() int { return len(c.opts) }

// Node returns node i, or nil while it is killed.
func (c *Cluster) Node(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// URL is node i's client URL; it stays the same across restarts.
func (c *Cluster) URL(i int) string {
	return fmt.Sprintf("nats://127.0.0.1:%d", c.opts[i].Port)
}

// URLs is every node's client URL, comma-separated starting with node
// first, as nats.Connect takes them: a client connects to first and knows
// where to reconnect when first goes away.
func (c *Cluster) URLs(first int) string {
	urls := []string{c.URL(first)}
	for i := range c.opts {
		if i != first {
			urls = append(urls, c.URL(i))
		}
	}
	return strings.Join(urls, ",")
}

// Index returns the index of s in the cluster, or -1.
func (c *Cluster) Index(s *server.Server) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, n := range c.nodes {
		if n != nil && n == s {
			return i
		}
	}
	return -1
}

// Kill shuts node i down at once. Its store directory and ports are kept for
// [Cluster.Restart].
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	c.mu.Lock()
	s := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if s == nil {
		c.t.Fatalf("natstest: node %d is not running", i)
	}
	s.Shutdown()
	s.WaitForShutdown()
}

// Start starts the given nodes of a [FormingCluster] that are not running
// and waits as [Cluster.Restart] does: a meta leader, every started node
// healthy.
func (c *Cluster) Start(nodes ...int) {
	c.t.Helper()
	for _, i := range nodes {
		s := c.start(i)
		c.mu.Lock()
		if c.nodes[i] != nil {
			c.mu.Unlock()
			s.Shutdown()
			c.t.Fatalf("natstest: node %d is running", i)
		}
		c.nodes[i] = s
		c.mu.Unlock()
	}
	c.WaitForMetaLeader()
	for _, i := range nodes {
		c.WaitHealthy(i)
	}
}

// Restart starts killed node i again with the same store directory and ports
// and waits until it is ready for connections, the cluster has a meta
// leader and the node is healthy: every stream and consumer it holds a
// replica of has caught up. Only then may another node go away without
// costing a replicated stream its quorum.
func (c *Cluster) Restart(i int) *server.Server {
	c.t.Helper()
	c.mu.Lock()
	running := c.nodes[i] != nil
	c.mu.Unlock()
	if running {
		c.t.Fatalf("natstest: node %d is running", i)
	}
	s := c.start(i)
	c.mu.Lock()
	c.nodes[i] = s
	c.mu.Unlock()
	c.WaitForMetaLeader()
	c.WaitHealthy(i)
	return s
}

// WaitHealthy waits until node i reports healthy (nats-server's /healthz):
// JetStream is current with the meta leader and every stream and consumer
// replica on the node has caught up with its leader.
func (c *Cluster) WaitHealthy(i int) {
	c.t.Helper()
	var last string
	Eventually(c.t, clusterTimeout, 50*time.Millisecond, func() bool {
		s := c.Node(i)
		if s == nil {
			last = "node is killed"
			return false
		}
		h := s.Healthz(nil)
		last = h.Error
		return h.Status == "ok"
	}, "cluster %s: node %d not healthy: %s", c.name, i, stringFunc(func() string { return last }))
}

// stringFunc formats as what it returns when the failure message is made.
type stringFunc func() string

func (f stringFunc) String() string { return f() }

// MetaLeader returns the node that leads the JetStream meta group, or nil.
func (c *Cluster) MetaLeader() *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.nodes {
		if s != nil && s.JetStreamIsLeader() {
			return s
		}
	}
	return nil
}

// WaitForMetaLeader waits until every running node is routed to every other
// running one, a meta leader is elected that the running nodes agree on, and
// the leader has every running peer's JetStream stats (placement needs them).
func (c *Cluster) WaitForMetaLeader() {
	c.t.Helper()
	Eventually(c.t, clusterTimeout, 20*time.Millisecond, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		running := 0
		for _, s := range c.nodes {
			if s != nil {
				running++
			}
		}
		leaders := 0
		for _, s := range c.nodes {
			if s == nil {
				continue
			}
			if s.NumRoutes() < running-1 || !s.JetStreamIsCurrent() {
				return false
			}
			if s.JetStreamIsLeader() {
				leaders++
				// Placement needs every running peer's stats at the
				// leader; until then an R3 stream is refused with "no
				// suitable peers for placement, peer offline".
				if len(s.JetStreamClusterPeers()) < running {
					return false
				}
			}
		}
		return leaders == 1
	}, "cluster %s: no meta leader", c.name)
}

// StreamLeader returns the index of the node leading stream (in [Account]),
// or -1 when none does right now.
func (c *Cluster) StreamLeader(stream string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.nodes {
		if s != nil && s.JetStreamIsStreamLeader(Account, stream) {
			return i
		}
	}
	return -1
}

// WaitForStreamLeader waits until stream has a leader and returns its index.
func (c *Cluster) WaitForStreamLeader(stream string) int {
	c.t.Helper()
	leader := -1
	Eventually(c.t, clusterTimeout, 20*time.Millisecond, func() bool {
		leader = c.StreamLeader(stream)
		return leader >= 0
	}, "cluster %s: stream %s has no leader", c.name, stream)
	return leader
}

// Follower returns the index of a running node that holds a replica of
// stream without leading it, or -1.
func (c *Cluster) Follower(stream string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.nodes {
		if s != nil && s.JetStreamIsStreamAssigned(Account, stream) && !s.JetStreamIsStreamLeader(Account, stream) {
			return i
		}
	}
	return -1
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := loopback.FreePorts(n)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	return ports
}
