package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
)

// layoutProblems is run in the page: what a person at this width would
// meet. The page never scrolls sideways; every table sits in its card
// (.table-card) and, unless narrow, fits it whole, no column past the
// window's right edge; every chart (an svg with role img) has a legend in
// its figure.
const layoutProblems = `((narrow) => {
  const out = [];
  const vw = document.documentElement.clientWidth;
  if (document.documentElement.scrollWidth > vw + 1) out.push("the page scrolls sideways: " + document.documentElement.scrollWidth + "px in " + vw + "px");
  for (const t of document.querySelectorAll("#view table")) {
    const name = "table#" + (t.id || t.className || "?");
    const card = t.closest(".table-card");
    if (!card) { out.push(name + " is not inside a card"); continue; }
    if (narrow) continue;
    const w = t.getBoundingClientRect().width, cw = card.clientWidth;
    if (w > cw + 1) out.push(name + " is " + Math.round(w) + "px wide in a card of " + cw + "px");
    for (const th of t.querySelectorAll("thead th")) {
      const r = th.getBoundingClientRect();
      if (r.right > vw + 1) out.push(name + ": column " + JSON.stringify(th.textContent) + " ends at " + Math.round(r.right) + "px, past " + vw + "px");
    }
  }
  for (const c of document.querySelectorAll("#view svg[role=img]")) {
    const fig = c.closest("figure");
    if (!fig || !fig.querySelector(".legend li")) out.push("chart #" + c.id + " has no legend");
  }
  return out;
})`

// focusOutline reports the focused element and whether it shows a focus
// ring (an outline or a box shadow).
const focusOutline = `(() => {
  const e = document.activeElement;
  if (!e || e === document.body) return "nothing focused";
  const s = getComputedStyle(e);
  const ring = (s.outlineStyle !== "none" && parseFloat(s.outlineWidth) > 0) || s.boxShadow !== "none";
  return ring ? "" : e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + " " + JSON.stringify(e.textContent.trim().slice(0, 30)) + " shows no focus ring";
})()`

// TestConsoleAt1366 opens every view of the console in headless Chromium
// at 1366 × 768 (the most common laptop screen) with long titles, a halt
// reason, a paused phase and a spend chart on them: no column is pushed
// off-screen, every table sits in its card, every chart has a legend, the
// keyboard's focus shows; at 700 px (the narrow layout) the page still
// never scrolls sideways. Screenshots go where $SAGA_UI_SCREENSHOTS says.
func TestConsoleAt1366(t *testing.T) {
	t.Parallel()
	browser := findChromium(t)
	shots := os.Getenv(screenshotsEnv)
	if shots == "" {
		shots = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(shots, 0o755))

	dataDir := t.TempDir()
	cfg := testConfig(t, dataDir)
	cfg.HTTPListen = freeAddr(t)
	d := start(t, cfg)
	nc, cl := connect(t, d.url, dataDir)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	long := strings.Repeat("a title long enough to wrap ", 6)
	gated := capsuletest.New().Set("review.operator_gate", true).Set("task.title", long).
		Set("producer_agent_id", "producer-with-a-rather-long-agent-identifier-0123456789")
	halted := capsuletest.New().Set("task.title", long).
		Set("context_refs", []any{"file:examples/capsules/a/directory/that/does/not/exist/and/has/a/long/name.md"})
	for _, doc := range []capsuletest.Doc{gated, halted, capsuletest.New()} {
		_, err := cl.Publish(ctx, doc.Sealed(t), "")
		require.NoError(t, err)
		_, err = cl.Wait(ctx, doc.ID())
		require.NoError(t, err)
	}
	ad := adminsvc.NewClient(nc, adminsvc.ClientConfig{})
	_, err := ad.PausePhase(ctx, adminsvc.PhaseRequest{Phase: int(capsule.Handoff), By: "alice",
		Reason: "storage maintenance on the artifact volume; back after the backup has been verified"})
	require.NoError(t, err)

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
	base := "http://" + cfg.HTTPListen + "/ui/"
	views := []struct{ name, hash, ready string }{
		{"inbox", "#/inbox", `#phases-banner li[data-phase="6"]`},
		{"capsules", "#/capsules", `#capsule-list tbody tr`},
		{"capsule-gated", "#/capsule/" + gated.ID(), `#timeline`},
		{"capsule-halted", "#/capsule/" + halted.ID(), `#why`},
		{"phases", "#/phases", `#phases tr[data-phase="6"]`},
		{"waves", "#/waves", `#waves`},
		{"costs", "#/costs?by=kind", `#cost-chart .cost-bar`},
		{"compositions", "#/compositions", `#compositions`},
	}
	// check opens every view at width and lists what is wrong on each.
	check := func(width int64, narrow bool) {
		t.Helper()
		var all []string
		require.NoError(t, chromedp.Do(bctx, chromedp.EmulateViewport(width, 768)))
		for _, v := range views {
			require.NoError(t, chromedp.Do(bctx,
				chromedp.Navigate(base+v.hash),
				chromedp.WaitVisible(chromedp.CSS(v.ready)),
				shot(fmt.Sprintf("layout-%d-%s", width, v.name)),
			), "view %s at %d px", v.name, width)
			problems, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](fmt.Sprintf("%s(%t)", layoutProblems, narrow)))
			require.NoError(t, err)
			for _, p := range problems {
				all = append(all, fmt.Sprintf("%s at %d px: %s", v.name, width, p))
			}
		}
		require.Empty(t, all, "screenshots in %s", shots)
	}
	check(1366, false)

	// The badge counts the paused phase with the decision and the halt.
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(base+"#/inbox"), chromedp.WaitVisible(chromedp.CSS(`#phases-banner`))))
	require.NoError(t, chromedp.Do(bctx, chromedp.PollFunction[chromedp.Void](`() => document.getElementById("inbox-count").textContent === "3"`,
		chromedp.WithPollingTimeout(10*time.Second))), "badge: a paused phase, a decision and a dead letter")

	// The keyboard's focus is visible on what Tab reaches: the navigation,
	// the banner's and the lists' links and buttons.
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(base+"#/inbox"), chromedp.WaitVisible(chromedp.CSS(`#phases-banner button`))))
	for i := range 12 {
		require.NoError(t, chromedp.Do(bctx, chromedp.KeyEvent("\t")))
		missing, err := chromedp.Run(bctx, chromedp.Evaluate[string](focusOutline))
		require.NoError(t, err)
		require.Empty(t, missing, "tab %d", i+1)
	}

	// The narrow layout: nothing makes the page itself scroll sideways.
	check(700, true)
}
