package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/compose"
)

// graphBox is the composition graph's box on the page, in CSS pixels.
const graphBox = `(() => { const r = document.getElementById("composition-graph").getBoundingClientRect(); return [Math.round(r.width), Math.round(r.height)]; })()`

// svgClick clicks the first element sel finds, an SVG element too (which
// has no click method of its own), once it is there.
func svgClick(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.PollFunction[chromedp.Void](`(sel) => { const e = document.querySelector(sel); if (!e) return false; e.dispatchEvent(new MouseEvent("click", { bubbles: true })); return true; }`,
		chromedp.WithPollingArgs(sel), chromedp.WithPollingTimeout(20*time.Second))
}

// TestConsoleCompositionAtSize opens examples/compositions/large (a plan,
// 250 parts needing it, four merges and a join: 256 steps, sagad's most)
// in headless Chromium at 1366 × 768 while the plan waits for a person:
// the 250 parts are one group node showing 250, the graph fits the
// screen's width and three screens' height closed and open, opening the
// group shows a linked tile per part, and the steps table pages 50 at a
// time and filters by name and by state. A verification loop beside it is
// drawn as a loop (loopDrawn).
func TestConsoleCompositionAtSize(t *testing.T) {
	t.Parallel()
	browser := findChromium(t)
	shots := os.Getenv(screenshotsEnv)
	if shots == "" {
		shots = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(shots, 0o755))
	root, err := filepath.Abs("../../..")
	require.NoError(t, err)
	exDir := filepath.Join(root, "examples", "compositions")
	doc, err := os.ReadFile(filepath.Join(exDir, "large", "fan-out-256.json"))
	require.NoError(t, err)

	dataDir := t.TempDir()
	cfg, err := parseConfig([]string{
		"--config", filepath.Join(exDir, "sagad.json"),
		"--nats-listen", "127.0.0.1:-1", "--data-dir", dataDir, "--workspace", root,
		"--http-listen", "off", "--log-level", "warn", "--shutdown-timeout", "10s",
	}, envOf(nil), io.Discard)
	require.NoError(t, err)
	cfg.HTTPListen = freeAddr(t)
	d := start(t, cfg)
	nc, _ := connect(t, d.url, dataDir)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	// sagad gives a compose request 30 s; publishing 256 steps under the
	// race detector on a loaded machine can take longer. The same
	// document again is the same run and publishes what is left, as a
	// producer would do on that error.
	var r compose.Reply
	for attempt := 1; ; attempt++ {
		r, err = compose.Publish(ctx, nc, doc)
		if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "context deadline exceeded") {
			break
		}
		t.Logf("compose, attempt %d: %v; sending it again", attempt, err)
	}
	require.NoError(t, err)
	require.Len(t, r.Steps, compose.MaxSteps)
	ids := map[string]string{}
	for _, s := range r.Steps {
		ids[s.Name] = s.CapsuleID
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.Headless,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1366, 768))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer bcancel()
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			buf, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name+".png"), buf, 0o644)
		})
	}
	groupDrawn(t, bctx, "http://"+cfg.HTTPListen+"/ui/", ids, shots, shot)
	stepsTablePages(t, bctx, shot)
	layoutCases(t, bctx)
	wavesNamed(t, bctx, "http://"+cfg.HTTPListen+"/ui/", "composition-"+ids["plan"], shot)
	loopDrawn(t, bctx, nc, "http://"+cfg.HTTPListen+"/ui/", exDir, shot)
}

// wavesNamed: the composition's budget, the wave composition-<plan's id>,
// is shown by the composition's name, the id on hover, on the Waves page,
// the Costs page grouped by wave and a step's row in the capsule list.
func wavesNamed(t *testing.T, bctx context.Context, base, wave string, shot func(string) chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	for _, v := range []struct{ name, hash, link string }{
		{"waves", "#/waves", fmt.Sprintf(`#wave-list tr[data-wave="%s"] a.wave-named`, wave)},
		{"costs", "#/costs?by=wave", fmt.Sprintf(`#cost-groups tr[data-key="%s"] a.wave-named`, wave)},
		{"list", "#/capsules?wave=" + wave, `#capsule-list tbody tr a.wave-named`},
	} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+v.hash), chromedp.WaitVisible(css(v.link)), shot("size-5-"+v.name)), v.name)
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](fmt.Sprintf(`(() => { const a = document.querySelector(%q); return [a.textContent, a.title]; })()`, v.link)))
		require.NoError(t, err)
		require.Equal(t, []string{"fan-out-256", "wave " + wave}, got, v.name)
	}
}

// loopDrawn: examples/compositions/loop.json, whose check rejects round
// 1, is drawn with a back edge from the check to the draft saying its
// round, and each round's capsules are listed as links to their pages.
func loopDrawn(t *testing.T, bctx context.Context, nc *nats.Conn, base, exDir string, shot func(string) chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	doc, err := os.ReadFile(filepath.Join(exDir, "loop.json"))
	require.NoError(t, err)
	_, err = compose.Publish(ctx, nc, doc)
	require.NoError(t, err)
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"#/composition/contract-checked-2030"),
		chromedp.WaitVisible(css(`#composition-graph path.loop-edge[data-from="check"][data-to="draft"]`)),
		chromedp.WaitVisible(css(`ol.loop-rounds[data-verifier="check"] li[data-round="2"]`)),
		chromedp.WaitVisible(css(`#composition-summary .state-completed`)),
		shot("size-4-loop"),
	), "the loop's page")
	label, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#composition-graph .loop-label").textContent`))
	require.NoError(t, err)
	require.Equal(t, "round 2 of 3 · passed", label)
	o, err := adminsvc.NewClient(nc, adminsvc.ClientConfig{}).CompositionStatus(ctx, adminsvc.CompositionRequest{CompositionID: "contract-checked-2030"})
	require.NoError(t, err)
	require.Len(t, o.Loops, 1)
	for _, r := range o.Loops[0].Rounds {
		links, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](fmt.Sprintf(
			`[...document.querySelectorAll('ol.loop-rounds li[data-round="%d"] a')].map(a => a.getAttribute("href"))`, r.Round)))
		require.NoError(t, err)
		var want []string
		for _, id := range r.CapsuleIDs {
			want = append(want, "#/capsule/"+id)
		}
		require.Equal(t, want, links, "round %d's capsules", r.Round)
	}
}

// layoutCases runs the page's own layout functions on small graphs, in
// the page: which steps group, and whether the ordering undoes a
// crossing.
func layoutCases(t *testing.T, bctx context.Context) {
	t.Helper()
	type step struct {
		Name  string   `json:"name"`
		Needs []string `json:"needs,omitempty"`
		State string   `json:"state"`
	}
	fan := func(n int, states ...string) []step {
		out := []step{{Name: "root", State: "completed"}}
		for i := range n {
			out = append(out, step{Name: fmt.Sprintf("s%d", i), Needs: []string{"root"}, State: states[i%len(states)]})
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		steps []step
		loops string
		// want is each node's id and how many steps it holds.
		want map[string]int
	}{
		{"three siblings stay apart", fan(3, "running"), `[]`, map[string]int{"root": 1, "s0": 1, "s1": 1, "s2": 1}},
		{"four siblings are one group", fan(4, "running"), `[]`, map[string]int{"root": 1, "group:s0": 4}},
		{"a state apart splits the group", fan(8, "running", "completed"), `[]`, map[string]int{"root": 1, "group:s0": 4, "group:s1": 4}},
		{"two by two stay apart", fan(4, "running", "completed"), `[]`, map[string]int{"root": 1, "s0": 1, "s1": 1, "s2": 1, "s3": 1}},
		{"a loop's steps stay apart", fan(4, "running"), `[{"steps":["s0"],"verifier":"s1","max_rounds":2,"round":1,"state":"running","rounds":[]}]`,
			map[string]int{"root": 1, "s0": 1, "s1": 1, "s2": 1, "s3": 1}},
	} {
		steps, err := json.Marshal(tc.steps)
		require.NoError(t, err)
		got, err := chromedp.Run(bctx, chromedp.Evaluate[map[string]int](fmt.Sprintf(
			`Object.fromEntries(graphNodes(%s, %s).nodes.map(n => [n.id, n.members.length]))`, steps, tc.loops)))
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, got, tc.name)
	}
	// a and b on the first layer; c needs b and d needs a, listed c
	// first: the ordering puts d above c, so the two edges do not cross.
	rows, err := chromedp.Run(bctx, chromedp.Evaluate[[][]int](
		`(() => { const g = graphNodes([{name:"a",state:"x"},{name:"b",state:"x"},{name:"c",needs:["b"],state:"x"},{name:"d",needs:["a"],state:"x"}], []);
		  return orderLayers(nodeLayers(g.nodes.length, g.edges), g.edges); })()`))
	require.NoError(t, err)
	require.Equal(t, [][]int{{0, 1}, {3, 2}}, rows)
}

// stepsTablePages: the open 256-step page's table shows 50 steps a page,
// turns to the next, and filters by name and by state.
func stepsTablePages(t *testing.T, bctx context.Context, shot func(string) chromedp.Action[chromedp.Void]) {
	t.Helper()
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	rows := func() []string {
		t.Helper()
		r, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#composition-steps tbody tr")].map(tr => tr.dataset.step)`))
		require.NoError(t, err)
		return r
	}
	page1 := rows()
	require.Len(t, page1, 50)
	require.Equal(t, "plan", page1[0])
	require.NoError(t, chromedp.Do(bctx, click(`#steps-next`),
		chromedp.WaitVisible(css(`#composition-steps tr[data-step="part-049"]`))), "the next page")
	page2 := rows()
	require.Len(t, page2, 50)
	require.Equal(t, "part-049", page2[0])
	shown, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("steps-shown").textContent`))
	require.NoError(t, err)
	require.Equal(t, "51–100 of 256 steps · page 2 of 6", shown)
	filter := func(sel, value, event string) chromedp.Action[chromedp.Void] {
		return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.value = %q; e.dispatchEvent(new Event(%q)); })()`, sel, value, event))
	}
	require.NoError(t, chromedp.Do(bctx, filter("#steps-name", "merge", "input"),
		chromedp.WaitNotPresent(css(`#composition-steps tr[data-step="part-049"]`)), shot("size-3-filtered")), "filter by name")
	require.Equal(t, []string{"merge-0", "merge-1", "merge-2", "merge-3"}, rows())
	require.NoError(t, chromedp.Do(bctx, filter("#steps-name", "", "input"), filter("#steps-state", "paused", "change"),
		chromedp.WaitNotPresent(css(`#composition-steps tr[data-step="merge-0"]`))), "filter by state")
	require.Equal(t, []string{"plan"}, rows(), "the gated plan is the one paused step")
}

// groupDrawn: the 256-step page draws the 250 parts as one group node
// showing 250, within one screen's width and three screens' height
// closed and open; open, a tile per part links to its capsule.
func groupDrawn(t *testing.T, bctx context.Context, base string, ids map[string]string, shots string, shot func(string) chromedp.Action[chromedp.Void]) {
	t.Helper()
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	group := `#composition-graph g.group[data-count="250"]`
	within := func(what string) {
		t.Helper()
		box, err := chromedp.Run(bctx, chromedp.Evaluate[[]int](graphBox))
		require.NoError(t, err)
		t.Logf("%s: the graph is %d × %d px", what, box[0], box[1])
		require.LessOrEqual(t, box[0], 1366, "%s: the graph is wider than the screen (screenshots in %s)", what, shots)
		require.LessOrEqual(t, box[1], 3*768, "%s: the graph is taller than three screens (screenshots in %s)", what, shots)
		problems, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](layoutProblems+"(false)"))
		require.NoError(t, err)
		require.Empty(t, problems, what)
	}

	// Closed: the parts are one node saying 250; the plan and the four
	// merges are nodes of their own, linked to their capsules.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(base+"#/composition/fan-out-256"),
		chromedp.WaitVisible(css(group)),
		chromedp.WaitVisible(css(`#composition-graph a.node[data-step="merge-3"]`)),
		shot("size-1-closed"),
	), "the 256-step composition's page (screenshots in %s)", shots)
	within("closed")
	count, err := chromedp.Run(bctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector(%q).textContent`, group+` .group-count`)))
	require.NoError(t, err)
	require.Equal(t, "250 steps", count)
	nodes, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("#composition-graph a.node").length`))
	require.NoError(t, err)
	require.Equal(t, 6, nodes, "plan, four merges and the join, the parts grouped")
	edges, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('#composition-graph path.edge[data-to^="merge-"][data-from="group:part-000"]').length`))
	require.NoError(t, err)
	require.Equal(t, 4, edges, "an edge from the group to each merge")

	// Open: a tile per part, each a link to its capsule, still on screen.
	require.NoError(t, chromedp.Do(bctx,
		svgClick(group+` .group-toggle`),
		chromedp.WaitVisible(css(group+`.open a.node[data-step="part-249"]`)),
		shot("size-2-open"),
	), "opening the group")
	within("open")
	links, err := chromedp.Run(bctx, chromedp.Evaluate[map[string]string](fmt.Sprintf(
		`Object.fromEntries([...document.querySelectorAll(%q)].map(a => [a.dataset.step, a.getAttribute("href")]))`, group+` a.node`)))
	require.NoError(t, err)
	require.Len(t, links, 250)
	for i := range 250 {
		name := fmt.Sprintf("part-%03d", i)
		require.Equal(t, "#/capsule/"+ids[name], links[name], name)
	}
	require.NoError(t, chromedp.Do(bctx,
		svgClick(group+`.open .group-toggle`),
		chromedp.WaitNotPresent(css(group+`.open`)),
		chromedp.WaitVisible(css(group)),
	), "closing the group")
}
