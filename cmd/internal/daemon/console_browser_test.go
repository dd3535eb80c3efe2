package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
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
	_, cl := connect(t, d.url, dataDir)
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
		chromedp.Click(css(rowA+` button.act-accept`)),
		chromedp.WaitVisible(css(`#confirm`)),
		chromedp.SendKeys(css(`#confirm-by`), "alice"),
		shot("2-confirm"),
		chromedp.Click(css(`#confirm-ok`)),
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
		chromedp.Click(css(rowB+` a`)),
		chromedp.WaitVisible(css(`#capsule-state .state-waiting_for_operator`)),
		chromedp.Click(css(`#capsule button.act-accept`)),
		chromedp.WaitVisible(css(`#confirm`)),
		chromedp.SetValue(css(`#confirm-by`), "bob"),
		chromedp.Click(css(`#confirm-ok`)),
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
	haltedAndCorrected(t, bctx, cl, base, shot)
	bulkCancel(t, bctx, cl, base, shot)
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
		chromedp.Click(css(`#pick-page`)),
		chromedp.WaitVisible(css(`#bulk.on #bulk-cancel:not([disabled])`)),
		shot("13-bulk-selected"),
		chromedp.Click(css(`#bulk-cancel`)),
		chromedp.WaitVisible(css(`#confirm`)),
		chromedp.SetValue(css(`#confirm-by`), "dave"),
		chromedp.Click(css(`#confirm-ok`)),
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
		chromedp.Click(css(row+` a`)),
		chromedp.WaitVisible(css(`#halt-findings`)),
		shot("10-capsule-halted"),
	), "halted capsule")
	findings, err := chromedp.Run(bctx, chromedp.Text(css(`#halt-findings`)))
	require.NoError(t, err)
	require.Contains(t, findings, "Independent spec approval", "rule 4 by name")
	require.Contains(t, findings, "11")
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Click(css(`#capsule button.act-replay-corrected`)),
		chromedp.WaitVisible(css(`#confirm textarea.editor`)),
		chromedp.SetValue(css(`#confirm textarea.editor`), corrected),
		chromedp.SetValue(css(`#confirm-by`), "carol"),
		shot("11-corrected-editor"),
		chromedp.Click(css(`#confirm-ok`)),
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
