package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Target thresholds of issue 6.
const (
	minThroughputRatio = 0.5
	maxP99Ratio        = 3.0
	maxRSSRatio        = 1.5
)

// Target statuses.
const (
	StatusPass        = "PASS"
	StatusMiss        = "MISS"
	StatusNotMeasured = "not measured"
)

func status(ok bool) string {
	if ok {
		return StatusPass
	}
	return StatusMiss
}

// targets evaluates the goals of issue 6 against a report.
func targets(r *Report) []Target {
	var ts []Target
	if r.Ratio != nil && r.Settings.Rate > 0 {
		// At a fixed arrival rate both systems finish what they get: the
		// throughput says nothing about capacity.
		ts = append(ts,
			Target{Name: "throughput", Want: fmt.Sprintf("sagad ≥ %.1f × baseline", minThroughputRatio), Got: "not measured at a fixed rate (use the closed loop)", Status: StatusNotMeasured},
			Target{Name: "p99 latency", Want: fmt.Sprintf("sagad ≤ %.0f × baseline", maxP99Ratio),
				Got: fmt.Sprintf("%.2f × at %.0f capsules/s", r.Ratio.P99, r.Settings.Rate), Status: status(r.Ratio.P99 <= maxP99Ratio)})
	} else if r.Ratio != nil {
		ts = append(ts,
			Target{Name: "throughput", Want: fmt.Sprintf("sagad ≥ %.1f × baseline", minThroughputRatio),
				Got: fmt.Sprintf("%.2f ×", r.Ratio.Throughput), Status: status(r.Ratio.Throughput >= minThroughputRatio)},
			Target{Name: "p99 latency", Want: fmt.Sprintf("sagad ≤ %.0f × baseline", maxP99Ratio),
				Got: fmt.Sprintf("%.2f ×", r.Ratio.P99), Status: status(r.Ratio.P99 <= maxP99Ratio)})
	} else {
		ts = append(ts,
			Target{Name: "throughput", Want: fmt.Sprintf("sagad ≥ %.1f × baseline", minThroughputRatio), Status: StatusNotMeasured},
			Target{Name: "p99 latency", Want: fmt.Sprintf("sagad ≤ %.0f × baseline", maxP99Ratio), Status: StatusNotMeasured})
	}
	mem := Target{Name: "memory flat", Want: fmt.Sprintf("RSS at 100k ≤ %.1f × RSS at 10k", maxRSSRatio), Status: StatusNotMeasured}
	if m := r.MemCheck; m != nil {
		mem.Want = fmt.Sprintf("RSS at %d ≤ %.1f × RSS at %d", m.TotalCapsules, maxRSSRatio, m.FirstCapsules)
		mem.Got = fmt.Sprintf("%.2f × (%s → %s; after GC %.2f ×)", m.RSSRatio, mib(m.AtFirst.RSS), mib(m.AtTotal.RSS), m.RSSAfterGC)
		mem.Status = status(m.RSSRatio <= maxRSSRatio)
	}
	ts = append(ts, mem)
	var got []string
	for _, s := range r.systems() {
		d := s.r.Delivery
		got = append(got, fmt.Sprintf("%s %d/%d once, %d lost, %d duplicated, %d wrong", s.name, d.Finished-d.Wrong, d.Published, d.Lost, d.Duplicates, d.Wrong))
	}
	ts = append(ts, Target{Name: "exactly once", Want: "no capsule lost, duplicated or wrong",
		Got: strings.Join(got, "; "), Status: status(r.ExactlyOnce())})
	return ts
}

// WriteText prints the report for people.
func WriteText(w io.Writer, r *Report) {
	m, c := r.Machine, r.Settings
	rev := ""
	if m.Revision != "" {
		rev = ", sagad " + m.Revision
	}
	fmt.Fprintf(w, "\nsagabench: %s/%s, %d CPUs (%s), %s RAM, %s, nats-server %s%s\n",
		m.OS, m.Arch, m.CPUs, m.CPUModel, mib(m.MemoryBytes), m.GoVersion, m.NATSServer, rev)
	sync := "fsync every " + c.Sync
	switch c.Sync {
	case "default", "":
		sync = "fsync every 2m (server default)"
	case "always":
		sync = "fsync always"
	}
	if r.MemCheck != nil {
		fmt.Fprintf(w, "settings: memcheck %d → %d capsules, window %d, sagad workers %d/phase, mix %s, file storage (%s), loopback TCP\n",
			r.MemCheck.FirstCapsules, r.MemCheck.TotalCapsules, c.Window, c.Workers, c.Mix, sync)
	} else {
		relay := fmt.Sprintf("%d/stage", c.RelayWorkers)
		if c.RelayWorkers < 0 {
			relay = "a goroutine per message"
		}
		fmt.Fprintf(w, "settings: %d capsules per system and round (+%d warm-up), %d round(s), window %d in flight, sagad workers %d/phase, relay workers %s, mix %s, file storage (%s), loopback TCP\n",
			c.Capsules, c.Warmup, c.Rounds, c.Window, c.Workers, relay, c.Mix, sync)
	}
	if c.Cluster > 1 {
		fmt.Fprintf(w, "cluster: %d in-process nodes on loopback, every stream and bucket R%d, every system connected to the first node\n", c.Cluster, c.replicas())
	}
	if c.Rate > 0 {
		fmt.Fprintf(w, "offered load: %.0f capsules/s to each system (open loop; window %d caps what is in flight)\n", c.Rate, c.Window)
	}
	if c.DuplicateWindow > 0 || c.PhaseTimeout > 0 {
		fmt.Fprintf(w, "experiment: sagad duplicate window %s, phase timeout %s (0 = sagad's default)\n", c.DuplicateWindow, c.PhaseTimeout)
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tcapsules/s\tp50\tp90\tp99\tmax\tCPU/capsule\tcores busy\tdisk/capsule\tRSS\tpeak RSS\t")
	row := func(name string, s *SystemResult) {
		b := s.Median
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t%s\t%s\t\n", name, b.PerSecond,
			ms(b.Latency.P50), ms(b.Latency.P90), ms(b.Latency.P99), ms(b.Latency.Max), us(b.CPUPerCapsule), b.CoresBusy, kb(b.DiskPerCapsule), mib(s.Memory.RSS), mib(s.Memory.PeakRSS))
	}
	if r.Baseline != nil {
		row("baseline (relay + KV)", r.Baseline)
	}
	if r.Floor != nil {
		row("saga floor (sagad's requests, no logic)", r.Floor)
	}
	if r.MemCheck != nil {
		mc := r.MemCheck
		for _, x := range []struct {
			name string
			b    Batch
			m    Memory
		}{{fmt.Sprintf("sagad, first %d", mc.FirstCapsules), mc.First, mc.AtFirst}, {fmt.Sprintf("sagad, to %d", mc.TotalCapsules), mc.Rest, mc.AtTotal}} {
			fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t%s\t%s\t\n", x.name, x.b.PerSecond,
				ms(x.b.Latency.P50), ms(x.b.Latency.P90), ms(x.b.Latency.P99), ms(x.b.Latency.Max), us(x.b.CPUPerCapsule), x.b.CoresBusy, kb(x.b.DiskPerCapsule), mib(x.m.RSS), mib(x.m.PeakRSS))
		}
	} else if r.Sagad != nil {
		row("sagad", r.Sagad)
	}
	ratioRow := func(name string, a, b *SystemResult) {
		if a == nil || b == nil || a.Median.PerSecond == 0 || b.Median.PerSecond == 0 {
			return
		}
		x, y := a.Median, b.Median
		fmt.Fprintf(tw, "%s\t%.2f ×\t%.2f ×\t\t%.2f ×\t\t%.2f ×\t\t%.2f ×\t\t\t\n", name, ratio(x.PerSecond, y.PerSecond),
			ratio(float64(x.Latency.P50), float64(y.Latency.P50)), ratio(float64(x.Latency.P99), float64(y.Latency.P99)),
			ratio(float64(x.CPUPerCapsule), float64(y.CPUPerCapsule)), ratio(float64(x.DiskPerCapsule), float64(y.DiskPerCapsule)))
	}
	if r.Ratio != nil {
		ratioRow("sagad / baseline", r.Sagad, r.Baseline)
	}
	ratioRow("floor / baseline", r.Floor, r.Baseline)
	ratioRow("sagad / floor", r.Sagad, r.Floor)
	_ = tw.Flush()
	if r.Settings.Rounds > 1 {
		for _, s := range r.systems() {
			var parts []string
			for _, b := range s.r.Rounds {
				parts = append(parts, fmt.Sprintf("%.0f/s p99 %s", b.PerSecond, ms(b.Latency.P99)))
			}
			fmt.Fprintf(w, "%s rounds: %s\n", s.name, strings.Join(parts, "; "))
		}
		if tp, p99, ok := pairedRatios(r.Sagad, r.Baseline); ok {
			fmt.Fprintf(w, "paired by round (each sagad round against the baseline's in the same round), median: throughput %.2f ×, p99 %.2f ×\n", tp, p99)
		}
		if tp, p99, ok := pairedRatios(r.Floor, r.Baseline); ok {
			fmt.Fprintf(w, "paired by round, floor / baseline: throughput %.2f ×, p99 %.2f ×\n", tp, p99)
		}
		if tp, p99, ok := pairedRatios(r.Sagad, r.Floor); ok {
			fmt.Fprintf(w, "paired by round, sagad / floor: throughput %.2f ×, p99 %.2f ×\n", tp, p99)
		}
	}
	if mc := r.MemCheck; mc != nil {
		fmt.Fprintf(w, "\nmemory at %d → %d capsules: RSS %s → %s (%.2f ×), after GC %s → %s (%.2f ×), Go heap in use %s → %s (%.2f ×)\n",
			mc.FirstCapsules, mc.TotalCapsules, mib(mc.AtFirst.RSS), mib(mc.AtTotal.RSS), mc.RSSRatio,
			mib(mc.AtFirst.RSSAfterGC), mib(mc.AtTotal.RSSAfterGC), mc.RSSAfterGC,
			mib(mc.AtFirst.HeapInuse), mib(mc.AtTotal.HeapInuse), mc.HeapRatio)
		if mc.Unsettled != "" {
			fmt.Fprintf(w, "  note: %s\n", mc.Unsettled)
		}
	}

	fmt.Fprintln(w, "\nexactly once (every capsule published in the run, warm-up and round trips included):")
	for _, s := range r.systems() {
		d := s.r.Delivery
		fmt.Fprintf(w, "  %-8s published %d, finished %d, lost %d, duplicated %d, stray %d, wrong outcome %d, outcome stream holds %d — %s\n",
			s.name, d.Published, d.Finished, d.Lost, d.Duplicates, d.Strays, d.Wrong, d.StoredOutcomes, okWord(d.OK()))
		if len(d.ByState) > 0 && s.name == "sagad" {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(d.ByState)) {
				parts = append(parts, fmt.Sprintf("%s %d", k, d.ByState[k]))
			}
			fmt.Fprintf(w, "           outcomes: %s (each checked against its class; %d checkpoint histories sampled, %d already forgotten by retention)\n", strings.Join(parts, ", "), d.HistoriesChecked, d.HistoriesForgotten)
		}
		for _, p := range append(d.Samples, d.Problems...) {
			fmt.Fprintf(w, "           ! %s\n", p)
		}
	}
	if r.Baseline != nil && r.Sagad != nil {
		fmt.Fprintf(w, "  JetStream API requests per capsule, as the server counts them (direct gets and publishes are not API requests): baseline %.1f, sagad %.1f\n",
			r.Baseline.APIPerCapsule, r.Sagad.APIPerCapsule)
	}
	if r.Sagad != nil && len(r.Sagad.Redelivered) > 0 {
		fmt.Fprintf(w, "  sagad redeliveries by phase: %v\n", r.Sagad.Redelivered)
	}
	fmt.Fprintf(w, "  sagad logged %d lines, %d warnings or errors\n", r.Logs.Lines, r.Logs.Warnings)
	for _, l := range r.Logs.First {
		fmt.Fprintf(w, "           ! %s\n", l)
	}

	if len(r.Trips) > 0 {
		fmt.Fprintln(w, "\nNATS messages per capsule (wildcard observer, one capsule in flight):")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  system\tclass\trequests (await a reply)\tone-way (acks)\tpull requests\tunloaded p50\t")
		for _, t := range r.Trips {
			fmt.Fprintf(tw, "  %s\t%s\t%.1f\t%.1f\t%.2f\t%s\t\n", t.System, t.Class, t.PerCapsule, t.OneWay, t.Pulls, ms(t.Unloaded.P50))
		}
		_ = tw.Flush()
		for _, t := range r.Trips {
			fmt.Fprintf(w, "  %s %s:", t.System, t.Class)
			for _, op := range slices.Sorted(maps.Keys(t.Ops)) {
				fmt.Fprintf(w, " %s %.2f;", op, t.Ops[op])
			}
			fmt.Fprintln(w)
		}
	}

	fmt.Fprintln(w, "\ntargets (issue 6):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, t := range r.Targets {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t\n", t.Status, t.Name, t.Want, t.Got)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\ntook %s\n", r.Elapsed.Round(time.Second))
}

func okWord(ok bool) string {
	if ok {
		return "OK"
	}
	return "FAILED"
}

// ms formats a duration in milliseconds with one decimal.
func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }

// us formats a duration in microseconds.
func us(d time.Duration) string { return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond)) }

// kb formats bytes in KiB.
func kb(b uint64) string { return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10)) }

// mib formats bytes in MiB.
func mib(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// namedResult is one system's result with its name in the report.
type namedResult struct {
	name string
	r    *SystemResult
}

// systems lists the systems the report has, in the order they ran.
func (r *Report) systems() []namedResult {
	var out []namedResult
	for _, s := range []namedResult{{"baseline", r.Baseline}, {"floor", r.Floor}, {"sagad", r.Sagad}} {
		if s.r != nil {
			out = append(out, s)
		}
	}
	return out
}

// pairedRatios is the median, over rounds, of system a's figure against
// system b's in the same round: they run back to back, so a machine that
// drifts over a run (as a shared one does) moves both.
func pairedRatios(a, b *SystemResult) (throughput, p99 float64, ok bool) {
	if a == nil || b == nil || len(a.Rounds) != len(b.Rounds) || len(a.Rounds) == 0 {
		return 0, 0, false
	}
	var tps, p99s []float64
	for i := range a.Rounds {
		s, b := a.Rounds[i], b.Rounds[i]
		tps = append(tps, ratio(s.PerSecond, b.PerSecond))
		p99s = append(p99s, ratio(float64(s.Latency.P99), float64(b.Latency.P99)))
	}
	return median(tps), median(p99s), true
}

// median is the median of xs (the mean of the two middle values for an even
// count). It sorts xs.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return xs[n/2]
}
