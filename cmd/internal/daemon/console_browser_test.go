package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/testreq"
)

// chromiumEnv names a Chrome or Chromium binary for the browser test.
const chromiumEnv = "SAGA_CHROMIUM"

// screenshotsEnv names a directory to keep the browser test's screenshots
// in; without it they go to a temporary directory the test logs.
const screenshotsEnv = "SAGA_UI_SCREENSHOTS"

// findChromium returns the browser the console test drives: $SAGA_CHROMIUM,
// else the first of the usual names on PATH; without one it skips the test
// saying what to install (fails where every test must run:
// internal/testreq).
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(chromiumEnv); p != "" {
		return p
	}
	return testreq.Program(t, "apt-get install chromium (or set "+chromiumEnv+" to a Chrome binary)",
		"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell")
}

// TestConsoleInBrowser drives the web console in headless Chromium against
// a running sagad: it finds a gated capsule in the inbox, accepts it
// (confirmation and operator name), sees it leave the inbox and complete,
// accepts a second one from its capsule page and sees the page turn
// completed by itself, and sees a new capsule appear in the open list —
// every change carried by the page's event stream, not by reloading.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	browser := findChromium(t)
	shots := os.Getenv(screenshotsEnv)
	if shots == "" {
		shots = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(shots, 0o755))
	t.Logf("console screenshots in %s", shots)

	dataDir := t.TempDir()
	cfg := testConfig(t, dataDir)
	cfg.HTTPListen = freeAddr(t)
	cfg.TraceURL = "http://jaeger.invalid/trace/{trace_id}"
	d := start(t, cfg)
	nc, cl := connect(t, d.url, dataDir)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	publish := func(doc capsuletest.Doc) string {
		t.Helper()
		_, err := cl.Publish(ctx, doc.Sealed(t), "")
		require.NoError(t, err)
		return doc.ID()
	}
	gatedA := publish(capsuletest.New().Set("review.operator_gate", true).Set("task.title", `<img src=x onerror="document.title='pwned'">`))
	gatedB := publish(capsuletest.New().Set("review.operator_gate", true))
	for _, id := range []string{gatedA, gatedB} {
		s, err := cl.Wait(ctx, id)
		require.NoError(t, err)
		require.Equal(t, capsule.WaitingForOperator, s.State, "halt: %s", s.HaltReason)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.Headless,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1400, 1000))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	// The page's uncaught exceptions fail the test, with their text: a
	// script error otherwise shows only as an element never appearing.
	var jsMu sync.Mutex
	var jsErrs []string
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf), chromedp.WithListener(func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok && e.ExceptionDetails != nil {
			d := e.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			jsMu.Lock()
			jsErrs = append(jsErrs, fmt.Sprintf("%s:%d:%d: %s", d.URL, d.LineNumber+1, d.ColumnNumber+1, msg))
			jsMu.Unlock()
		}
	}))
	defer bcancel()
	t.Cleanup(func() {
		jsMu.Lock()
		defer jsMu.Unlock()
		require.Empty(t, jsErrs, "uncaught exceptions in the console's page")
	})
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			buf, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name+".png"), buf, 0o644)
		})
	}
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	base := "http://" + cfg.HTTPListen
	rowA := fmt.Sprintf(`#inbox-decide tr[data-key="%s"]`, gatedA)
	rowB := fmt.Sprintf(`#inbox-decide tr[data-key="%s"]`, gatedB)

	// The inbox lists both; accept A there.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(base+"/"), // redirects to /ui/
		chromedp.WaitVisible(css(rowA)),
		chromedp.WaitVisible(css(rowB)),
		chromedp.WaitVisible(css(`#live:not(.off)`)),
		// Rows are recognisable: the task's title, as text.
		chromedp.WaitVisible(css(rowA+` .cap .title`)),
		chromedp.WaitVisible(css(rowA+` .cap .kind`)),
		shot("1-inbox"),
		click(rowA+` button.act-accept`),
		chromedp.WaitVisible(css(`#confirm`)),
		chromedp.SendKeys(css(`#confirm-by`), "alice"),
		shot("2-confirm"),
		click(`#confirm-ok`),
		// Gone from the inbox by a live update, B still there.
		chromedp.WaitNotPresent(css(rowA)),
		chromedp.WaitVisible(css(rowB)),
		shot("3-inbox-after-accept"),
	), "accept from the inbox")
	s, err := cl.Wait(ctx, gatedA)
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
	events, err := cl.History(ctx, gatedA)
	require.NoError(t, err)
	by := ""
	for _, e := range events {
		if e.Kind == capsule.EventOperatorAccepted {
			by = e.By
		}
	}
	require.Equal(t, "alice", by, "the operator's name is recorded with the decision")

	// The capsule's title is shown as text, never run as markup.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(base+"/ui/#/capsule/"+gatedA),
		chromedp.WaitVisible(css(`#capsule-state .state-completed`)),
		chromedp.WaitVisible(css(`#timeline`)),
		chromedp.WaitVisible(css(`#reviews`)),
		chromedp.WaitVisible(css(`#events`)),
		chromedp.WaitVisible(css(`#artifacts`)),
		chromedp.WaitVisible(css(`a#trace-id[href^="http://jaeger.invalid/trace/"]`)),
		shot("4-capsule-completed"),
	), "capsule page")
	title, err := chromedp.Run(bctx, chromedp.Title())
	require.NoError(t, err)
	require.Equal(t, "sagad console", title, "markup in a capsule field ran")

	// B from its own page: accepting it there turns the open page completed
	// by itself.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(base+"/ui/#/inbox"),
		chromedp.WaitVisible(css(rowB+` a`)),
		click(rowB+` a`),
		chromedp.WaitVisible(css(`#capsule-state .state-waiting_for_operator`)),
		click(`#capsule button.act-accept`),
		chromedp.WaitVisible(css(`#confirm`)),
		chromedp.SetValue(css(`#confirm-by`), "bob"),
		click(`#confirm-ok`),
		chromedp.WaitVisible(css(`#capsule-state .state-completed`)),
		shot("5-capsule-live"),
	), "accept from the capsule page")

	// The list, filtered, and a capsule published while it is open.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(base+"/ui/#/capsules?state=completed"),
		chromedp.WaitVisible(css(fmt.Sprintf(`#capsule-list tr[data-key="%s"]`, gatedA))),
		chromedp.WaitVisible(css(fmt.Sprintf(`#capsule-list tr[data-key="%s"]`, gatedB))),
		// Counts per state on top, each a filter link.
		chromedp.WaitVisible(css(`#state-counts a.count.active[data-state="completed"]`)),
		shot("6-list-completed"),
		chromedp.Navigate(base+"/ui/#/capsules"),
		chromedp.WaitVisible(css(`#capsule-list`)),
	), "list")
	live := publish(capsuletest.New())
	require.NoError(t, chromedp.Do(bctx,
		chromedp.WaitVisible(css(fmt.Sprintf(`#capsule-list tr[data-key="%s"] .state-completed`, live))),
		shot("7-list-live"),
		chromedp.Navigate(base+"/ui/#/phases"),
		chromedp.WaitVisible(css(`#phases tr[data-phase="6"]`)),
		shot("8-phases"),
		chromedp.Navigate(base+"/ui/#/waves"),
		chromedp.WaitVisible(css(`#waves`)),
	), "live list and phases")

	// The Costs page draws the spend per day (a bar per day, in SVG) and a
	// row per task kind.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(base+"/ui/#/costs?by=kind"),
		chromedp.WaitVisible(css(`#cost-chart .cost-bar rect`)),
		chromedp.WaitVisible(css(`#cost-groups tr[data-key="stub"]`)),
		chromedp.WaitVisible(css(`#cost-totals`)),
		shot("9-costs"),
	), "costs chart")
	compositionGraph(t, bctx, nc, base, shot)
	haltedAndCorrected(t, bctx, cl, base, shot)
	bulkCancel(t, bctx, cl, base, shot)
}

// compositionGraph: a fan-out/fan-in composition (draft → fr, de → merge)
// is listed on the Compositions page, and its page draws the graph: a
// node per step, each a link to its step's capsule page, an edge per need,
// every node turning completed as the steps end (live, no reload).
func compositionGraph(t *testing.T, bctx context.Context, nc *nats.Conn, base string, shot func(string) chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	type step struct {
		name  string
		needs []string
	}
	var steps []any
	for _, s := range []step{{"draft", nil}, {"fr", []string{"draft"}}, {"de", []string{"draft"}}, {"merge", []string{"fr", "de"}}} {
		st := map[string]any{"name": s.name, "capsule": map[string]any(capsuletest.New().Delete("capsule_id").Set("task.title", "composition "+s.name))}
		if s.needs != nil {
			st["needs"] = s.needs
		}
		steps = append(steps, st)
	}
	doc, err := json.Marshal(map[string]any{"composition_id": "ui-fan", "steps": steps})
	require.NoError(t, err)
	r, err := compose.Publish(ctx, nc, doc)
	require.NoError(t, err)
	ids := map[string]string{}
	for _, s := range r.Steps {
		ids[s.Name] = s.CapsuleID
	}
	require.Len(t, ids, 4)

	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui/#/compositions"),
		chromedp.WaitVisible(css(`#composition-list tr[data-id="ui-fan"] a`)),
		shot("9-compositions"),
		click(`#composition-list tr[data-id="ui-fan"] a`),
		chromedp.WaitVisible(css(`#composition-graph a.node[data-step="merge"]`)),
		chromedp.WaitVisible(css(`#composition-graph a.node[data-step="merge"][data-state="completed"]`)),
		chromedp.WaitVisible(css(`#composition-summary .state-completed`)),
		shot("9-composition-graph"),
	), "composition graph")
	links, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](
		`Object.fromEntries([...document.querySelectorAll("#composition-graph a.node")].map(a => [a.dataset.step, a.getAttribute("href")]))`))
	require.NoError(t, err)
	want := map[string]string{}
	for name, id := range ids {
		want[name] = "#/capsule/" + id
	}
	require.Equal(t, want, links, "a node per step, linked to its capsule's page")
	edges, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("#composition-graph path.edge")].map(p => p.dataset.from + ">" + p.dataset.to).sort()`))
	require.NoError(t, err)
	require.Equal(t, []string{"de>merge", "draft>de", "draft>fr", "fr>merge"}, edges, "an edge per need")
	// A node is a link: following it opens the step's capsule page.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(css(`#composition-graph a.node[data-step="fr"] rect`)),
		chromedp.WaitVisible(css(`#capsule-state .state-completed`)),
	), "a node opens its capsule")
	u, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(u, "#/capsule/"+ids["fr"]), u)
	// And the capsule's page leads back to the graph.
	require.NoError(t, chromedp.Do(ctx,
		click(`#composition-link`),
		chromedp.WaitVisible(css(`#composition-graph a.node[data-step="draft"]`)),
	), "a step's capsule page links to its composition")

	// The metrics count it: a completed run of four steps.
	body := scrape(t, base+"/metrics")
	require.Equal(t, 1.0, value(t, body, `sagad_compositions{state="completed"}`))
	require.Equal(t, 1.0, value(t, body, `sagad_composition_steps_count`))
	require.Equal(t, 4.0, value(t, body, `sagad_composition_steps_sum`))
}

// bulkCancel: the capsules of a filtered list, selected at once, are
// cancelled with one confirmation, each recorded with the operator's name.
func bulkCancel(t *testing.T, bctx context.Context, cl *client.Client, base string, shot func(string) chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	var ids []string
	for range 3 {
		doc := capsuletest.New().Set("review.operator_gate", true).Set("wave_id", "w-bulk")
		_, err := cl.Publish(ctx, doc.Sealed(t), "")
		require.NoError(t, err)
		ids = append(ids, doc.ID())
	}
	for _, id := range ids {
		s, err := cl.Wait(ctx, id)
		require.NoError(t, err)
		require.Equal(t, capsule.WaitingForOperator, s.State, "halt: %s", s.HaltReason)
	}
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	actions := []chromedp.Action[chromedp.Void]{
		chromedp.Navigate(base + "/ui/#/capsules?wave=w-bulk&state=waiting_for_operator"),
	}
	for _, id := range ids {
		actions = append(actions, chromedp.WaitVisible(css(fmt.Sprintf(`#capsule-list tr[data-key="%s"] input.pick`, id))))
	}
	actions = append(actions,
		click(`#pick-page`),
		chromedp.WaitVisible(css(`#bulk.on #bulk-cancel:not([disabled])`)),
		shot("13-bulk-selected"),
		click(`#bulk-cancel`),
		chromedp.WaitVisible(css(`#confirm`)),
		chromedp.SetValue(css(`#confirm-by`), "dave"),
		click(`#confirm-ok`),
		chromedp.WaitVisible(css(`#bulk-result`)),
	)
	for _, id := range ids {
		actions = append(actions, chromedp.WaitNotPresent(css(fmt.Sprintf(`#capsule-list tr[data-key="%s"]`, id))))
	}
	actions = append(actions, shot("14-bulk-cancelled"))
	require.NoError(t, chromedp.Do(bctx, actions...), "bulk cancel")
	result, err := chromedp.Run(bctx, chromedp.Text(css(`#bulk-result`)))
	require.NoError(t, err)
	require.Contains(t, result, "3 of 3 done")
	for _, id := range ids {
		s, err := cl.Wait(ctx, id)
		require.NoError(t, err)
		require.Equal(t, capsule.Cancelled, s.State)
		events, err := cl.History(ctx, id)
		require.NoError(t, err)
		var detail string
		for _, e := range events {
			if e.Kind == capsule.EventCancelled {
				detail = e.Detail
			}
		}
		// A cancel names its operator in the event's detail.
		require.Contains(t, detail, "cancelled by dave", "each cancel is recorded with the operator's name")
	}
}

// haltedAndCorrected: a capsule halted at AUTOMATED_GATES is a dead letter
// in the inbox; its page shows the findings with the rules' names; replayed
// with a corrected capsule typed into the page's editor, it completes.
func haltedAndCorrected(t *testing.T, bctx context.Context, cl *client.Client, base string, shot func(string) chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	doc := capsuletest.New().Set("spec.approved_by", "agent-coder-1").Set("constraints.destructive", true)
	_, err := cl.Publish(ctx, doc.Sealed(t), "")
	require.NoError(t, err)
	id := doc.ID()
	s, err := cl.Wait(ctx, id)
	require.NoError(t, err)
	require.Equal(t, capsule.Halted, s.State)
	corrected := string(doc.Set("spec.approved_by", "human-lead").Set("constraints.destructive", false).Unsealed(t))
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	row := fmt.Sprintf(`#inbox-halted tr[data-key="%s"]`, id)
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(base+"/ui/#/inbox"),
		chromedp.WaitVisible(css(row+` button.act-replay-corrected`)),
		shot("9-inbox-halted"),
		click(row+` a`),
		chromedp.WaitVisible(css(`#halt-findings`)),
		shot("10-capsule-halted"),
	), "halted capsule")
	findings, err := chromedp.Run(bctx, chromedp.Text(css(`#halt-findings`)))
	require.NoError(t, err)
	require.Contains(t, findings, "Independent spec approval", "rule 4 by name")
	require.Contains(t, findings, "11")
	require.NoError(t, chromedp.Do(bctx,
		click(`#capsule button.act-replay-corrected`),
		chromedp.WaitVisible(css(`#confirm textarea.editor`)),
		chromedp.SetValue(css(`#confirm textarea.editor`), corrected),
		chromedp.SetValue(css(`#confirm-by`), "carol"),
		shot("11-corrected-editor"),
		click(`#confirm-ok`),
		chromedp.WaitVisible(css(`#capsule-state .state-completed`)),
		chromedp.WaitNotPresent(css(`#halt-findings`)),
		shot("12-corrected-completed"),
	), "replay with a corrected capsule")
	events, err := cl.History(ctx, id)
	require.NoError(t, err)
	var by string
	for _, e := range events {
		if e.Kind == capsule.EventReplayed {
			by = e.By
		}
	}
	require.Equal(t, "carol", by, "the replay is recorded with the operator's name")
}

// click finds the element and clicks it in one turn of the page's script:
// the live updates re-render rows, and a node found by one protocol call can
// be gone by the next ("Could not find node with given id").
func click(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.PollFunction[chromedp.Void](`(sel) => { const e = document.querySelector(sel); if (!e) return false; e.click(); return true; }`,
		chromedp.WithPollingArgs(sel), chromedp.WithPollingTimeout(20*time.Second))
}
