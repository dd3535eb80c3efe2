package metrics

import (
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/rules"
)

func setup(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	return New(reg, BuildInfo{Version: "v1.2.3", GoVersion: "go1.26.8"}), reg
}

func TestRecorderMovesTheRightSeries(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		record func(m *Metrics)
		series func(m *Metrics) prometheus.Collector
		want   float64
	}{
		"received": {
			record: func(m *Metrics) { m.Received(); m.Received() },
			series: func(m *Metrics) prometheus.Collector { return m.received },
			want:   2,
		},
		"transition counter": {
			record: func(m *Metrics) { m.Transition(capsule.Execution, capsule.OutcomeLoopedBack, time.Second) },
			series: func(m *Metrics) prometheus.Collector {
				return m.transitions.WithLabelValues("EXECUTION", "looped_back")
			},
			want: 1,
		},
		"completed": {
			record: func(m *Metrics) { m.Ended(capsule.Completed, capsule.HaltReason{}) },
			series: func(m *Metrics) prometheus.Collector { return m.completed },
			want:   1,
		},
		"halted by code, detail dropped": {
			record: func(m *Metrics) {
				m.Ended(capsule.Halted, capsule.LockAcquisitionFailed("src/a.go"))
				m.Ended(capsule.Halted, capsule.LockAcquisitionFailed("src/b.go"))
			},
			series: func(m *Metrics) prometheus.Collector {
				return m.halted.WithLabelValues("lock_acquisition_failed")
			},
			want: 2,
		},
		"halted with an unknown code": {
			record: func(m *Metrics) { m.Ended(capsule.Halted, capsule.ParseHaltReason("made_up:x")) },
			series: func(m *Metrics) prometheus.Collector { return m.halted.WithLabelValues(Other) },
			want:   1,
		},
		"cancelled": {
			record: func(m *Metrics) { m.Ended(capsule.Cancelled, capsule.HaltReason{}) },
			series: func(m *Metrics) prometheus.Collector { return m.cancelled },
			want:   1,
		},
		"review verdict": {
			record: func(m *Metrics) { m.ReviewCycle(capsule.ChangesRequested) },
			series: func(m *Metrics) prometheus.Collector {
				return m.verdicts.WithLabelValues("CHANGES_REQUESTED")
			},
			want: 1,
		},
		"rule violations": {
			record: func(m *Metrics) { m.RuleViolations([]int{5, 9, 9}) },
			series: func(m *Metrics) prometheus.Collector { return m.ruleViolations.WithLabelValues("9") },
			want:   2,
		},
		"unknown rule": {
			record: func(m *Metrics) { m.RuleViolations([]int{99}) },
			series: func(m *Metrics) prometheus.Collector { return m.ruleViolations.WithLabelValues(Other) },
			want:   1,
		},
		"lock contention": {
			record: func(m *Metrics) { m.LockWait(time.Second, true); m.LockWait(time.Millisecond, false) },
			series: func(m *Metrics) prometheus.Collector { return m.lockContention },
			want:   1,
		},
		"agent call": {
			record: func(m *Metrics) { m.Call(KindReviewer, ResultTransient, time.Second) },
			series: func(m *Metrics) prometheus.Collector {
				return m.calls.WithLabelValues("reviewer", "transient")
			},
			want: 1,
		},
		"agent call with unknown kind and result": {
			record: func(m *Metrics) { m.Call("planner", "exploded", time.Second) },
			series: func(m *Metrics) prometheus.Collector { return m.calls.WithLabelValues(Other, Other) },
			want:   1,
		},
		"redelivery": {
			record: func(m *Metrics) { m.Redelivered(capsule.ReviewPhase) },
			series: func(m *Metrics) prometheus.Collector { return m.redeliveries.WithLabelValues("REVIEW") },
			want:   1,
		},
		"redelivery of an invalid phase": {
			record: func(m *Metrics) { m.Redelivered(capsule.Phase(42)) },
			series: func(m *Metrics) prometheus.Collector { return m.redeliveries.WithLabelValues(Other) },
			want:   1,
		},
		"paused": {
			record: func(m *Metrics) { m.Paused(capsule.TriggerBudgetWarning) },
			series: func(m *Metrics) prometheus.Collector { return m.pauses.WithLabelValues("budget_warning") },
			want:   1,
		},
		"resumed": {
			record: func(m *Metrics) { m.Resumed(capsule.TriggerOperatorManual) },
			series: func(m *Metrics) prometheus.Collector { return m.resumes.WithLabelValues("operator_manual") },
			want:   1,
		},
		"admin action": {
			record: func(m *Metrics) { m.AdminAction(ActionCancel); m.AdminAction("rm -rf") },
			series: func(m *Metrics) prometheus.Collector { return m.adminActions.WithLabelValues("cancel") },
			want:   1,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, _ := setup(t)
			tt.record(m)
			require.InDelta(t, tt.want, testutil.ToFloat64(tt.series(m)), 1e-9)
		})
	}
}

// TestEndedCountsOnlyTerminalStates: Ended moves exactly one terminal-state
// series for a terminal state, and leaves the whole registry as it was for
// any other state, even with a halt reason given.
func TestEndedCountsOnlyTerminalStates(t *testing.T) {
	t.Parallel()
	const (
		completed = "sagad_capsules_completed_total"
		halted    = "sagad_capsules_halted_total"
		cancelled = "sagad_capsules_cancelled_total"
	)
	tests := map[string]struct {
		state   capsule.State
		changed map[string]float64 // series whose value moves, by key
	}{
		"in_progress":          {state: capsule.InProgress},
		"paused":               {state: capsule.Paused},
		"waiting_for_operator": {state: capsule.WaitingForOperator},
		"empty state":          {state: ""},
		"unknown state":        {state: capsule.State("exploded")},
		"completed":            {state: capsule.Completed, changed: map[string]float64{completed: 1}},
		"halted":               {state: capsule.Halted, changed: map[string]float64{halted + `{reason="deadline_in_past"}`: 1}},
		"cancelled":            {state: capsule.Cancelled, changed: map[string]float64{cancelled: 1}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.state.Terminal(), len(tt.changed) > 0, "only a terminal state moves a series")
			m, reg := setup(t)
			before := values(t, reg)
			for _, name := range []string{completed, cancelled} {
				require.Contains(t, before, name)
			}
			require.Equal(t, len(capsule.HaltCodes)+1, testutil.CollectAndCount(m.halted))

			m.Ended(tt.state, capsule.DeadlineInPast())

			want := maps.Clone(before)
			for k, d := range tt.changed {
				require.Contains(t, want, k)
				want[k] += d
			}
			require.Equal(t, want, values(t, reg), "every series of the registry")
			require.Equal(t, len(capsule.HaltCodes)+1, testutil.CollectAndCount(m.halted), "no halted series added")
			terminal := testutil.ToFloat64(m.completed) + testutil.ToFloat64(m.cancelled)
			for _, code := range append(strs(capsule.HaltCodes), Other) {
				terminal += testutil.ToFloat64(m.halted.WithLabelValues(code))
			}
			require.InDelta(t, float64(len(tt.changed)), terminal, 1e-9, "terminal-state counters in total")
		})
	}
}

// values maps every series in the registry, as `family{labels}`, to its
// value: a counter's or gauge's value, a histogram's sample count and sum.
func values(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, mf := range gather(t, g) {
		for _, m := range mf.GetMetric() {
			var parts []string
			for _, l := range m.GetLabel() {
				parts = append(parts, l.GetName()+`="`+l.GetValue()+`"`)
			}
			key := mf.GetName()
			if len(parts) > 0 {
				key += "{" + strings.Join(parts, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[key+" count"] = float64(m.GetHistogram().GetSampleCount())
				out[key+" sum"] = m.GetHistogram().GetSampleSum()
			default:
				t.Fatalf("%s: unexpected metric type %s", key, mf.GetType())
			}
		}
	}
	return out
}

func TestHistogramsObserve(t *testing.T) {
	t.Parallel()
	m, reg := setup(t)
	m.Transition(capsule.Execution, capsule.OutcomePassed, 1500*time.Millisecond)
	m.Transition(capsule.Execution, capsule.OutcomePassed, -time.Second) // clock step: counts as 0
	m.LockWait(2*time.Second, true)
	m.Call(KindExecutor, ResultOK, 3*time.Second)

	got := gather(t, reg)
	h := histogram(t, got, "sagad_phase_duration_seconds", map[string]string{"phase": "EXECUTION", "outcome": "passed"})
	require.EqualValues(t, 2, h.GetSampleCount())
	require.InDelta(t, 1.5, h.GetSampleSum(), 1e-9)
	h = histogram(t, got, "sagad_lock_wait_seconds", nil)
	require.EqualValues(t, 1, h.GetSampleCount())
	require.InDelta(t, 2, h.GetSampleSum(), 1e-9)
	h = histogram(t, got, "sagad_agent_call_duration_seconds", map[string]string{"kind": "executor"})
	require.EqualValues(t, 1, h.GetSampleCount())
	require.InDelta(t, 3, h.GetSampleSum(), 1e-9)
}

func TestNilMetricsRecordsNothing(t *testing.T) {
	t.Parallel()
	var m *Metrics
	require.NotPanics(t, func() {
		m.Received()
		m.Transition(capsule.Reception, capsule.OutcomePassed, time.Second)
		m.Ended(capsule.Halted, capsule.DeadlineInPast())
		m.ReviewCycle(capsule.Approved)
		m.RuleViolations([]int{1})
		m.LockWait(time.Second, true)
		m.Spend("k", "w", capsule.Usage{Tokens: 1, Dollars: 1}, false)
		m.Call(KindExecutor, ResultOK, time.Second)
		m.Redelivered(capsule.Execution)
		m.Paused(capsule.TriggerOperatorManual)
		m.Resumed(capsule.TriggerOperatorManual)
		m.AdminAction(ActionPause)
	})
}

func TestNewWithNilRegistry(t *testing.T) {
	t.Parallel()
	m := New(nil, BuildInfo{})
	m.Received()
	require.InDelta(t, 1, testutil.ToFloat64(m.received), 0)
}

func TestBuildInfo(t *testing.T) {
	t.Parallel()
	_, reg := setup(t)
	const want = `
# HELP sagad_build_info Build information of the running sagad; always 1.
# TYPE sagad_build_info gauge
sagad_build_info{go_version="go1.26.8",version="v1.2.3"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, stringsReader(want), "sagad_build_info"))

	def := BuildInfo{}.withDefaults()
	require.NotEmpty(t, def.Version)
	require.Regexp(t, `^go`, def.GoVersion)
}

func TestClosedSetsExistAtZero(t *testing.T) {
	t.Parallel()
	_, reg := setup(t)
	got := gather(t, reg)

	require.Len(t, series(got, "sagad_capsules_halted_total"), len(capsule.HaltCodes)+1)
	require.Len(t, series(got, "sagad_transitions_total"), capsule.NumPhases*len(Outcomes))
	require.Len(t, series(got, "sagad_rule_violations_total"), len(rules.Constitution))
	require.Len(t, series(got, "sagad_review_verdicts_total"), len(Verdicts))
	require.Len(t, series(got, "sagad_agent_calls_total"), len(CallKinds)*len(CallResults))
	require.Len(t, series(got, "sagad_pauses_total"), len(Triggers))
	require.Len(t, series(got, "sagad_redeliveries_total"), capsule.NumPhases)
	require.Len(t, series(got, "sagad_admin_actions_total"), len(AdminActions))
	for _, c := range capsule.HaltCodes {
		require.Contains(t, series(got, "sagad_capsules_halted_total"), `reason="`+string(c)+`"`)
	}
	for _, r := range rules.Constitution {
		require.Contains(t, series(got, "sagad_rule_violations_total"), `rule="`+strconv.Itoa(r.Number)+`"`)
	}
}

// TestLabelsStayBounded feeds every recorder hostile values and checks that
// every label value in the registry still belongs to its closed set.
func TestLabelsStayBounded(t *testing.T) {
	t.Parallel()
	m, reg := setup(t)
	const id = "0190f0e2-7b7e-7cc1-8c1e-2b8c2f1f3a77"
	m.Received()
	m.Transition(capsule.Phase(-1), id, time.Second)
	m.Transition(capsule.Phase(7), capsule.OutcomeHalted, time.Second)
	m.Ended(capsule.Halted, capsule.HaltReason{Code: capsule.HaltCode(id)})
	m.Ended(capsule.Halted, capsule.ContextRefMissing("file:"+id))
	m.ReviewCycle(capsule.Verdict("approved-ish"))
	m.RuleViolations([]int{0, -3, 36, 1 << 30})
	m.Call(id, id, time.Second)
	m.Attempt(id, id)
	m.Redelivered(capsule.Phase(100))
	m.Paused(capsule.Trigger(id))
	m.Resumed(capsule.Trigger("saga.events." + id))
	m.AdminAction(id)
	m.Terminated(id)
	m.WriteFailed(id)
	m.Corrupt(id)

	ruleSet := []string{Other}
	for _, r := range rules.Constitution {
		ruleSet = append(ruleSet, strconv.Itoa(r.Number))
	}
	phaseSet := []string{Other}
	for p := capsule.Phase(0); p < capsule.NumPhases; p++ {
		phaseSet = append(phaseSet, p.String())
	}
	allowed := map[string][]string{
		"phase":      phaseSet,
		"outcome":    append([]string{Other}, Outcomes...),
		"reason":     append([]string{Other}, strs(capsule.HaltCodes)...),
		"verdict":    append([]string{Other}, strs(Verdicts)...),
		"rule":       ruleSet,
		"kind":       append(append([]string{Other}, CallKinds...), WriteErrorKinds...),  // agent calls, write errors
		"result":     append(append([]string{Other}, CallResults...), AttemptResults...), // calls, attempts
		"role":       append([]string{Other}, CallKinds...),
		"trigger":    append([]string{Other}, strs(Triggers)...),
		"action":     append([]string{Other}, AdminActions...),
		"cause":      append([]string{Other}, TermReasons...),
		"bucket":     append([]string{Other}, corrupt.Buckets...),
		"version":    {"v1.2.3"},
		"go_version": {"go1.26.8"},
	}
	for _, mf := range gather(t, reg) {
		if strings.HasPrefix(mf.GetName(), "sagad_spend_") {
			// Open sets (kinds, wave ids), bounded in number: TestSpend.
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				set, ok := allowed[l.GetName()]
				require.True(t, ok, "%s: unexpected label %q", mf.GetName(), l.GetName())
				require.Contains(t, set, l.GetValue(), "%s: label %s", mf.GetName(), l.GetName())
			}
		}
	}
}

func TestLabelHelpers(t *testing.T) {
	t.Parallel()
	require.Equal(t, "AUTOMATED_GATES", PhaseLabel(capsule.AutomatedGates))
	require.Equal(t, Other, PhaseLabel(capsule.Phase(7)))
	require.Equal(t, "budget_exceeded", HaltLabel(capsule.CodeBudgetExceeded))
	require.Equal(t, Other, HaltLabel(""))
	require.Equal(t, "lock_contention", TriggerLabel(capsule.TriggerLockContention))
	require.Equal(t, "operator_gate", TriggerLabel(capsule.TriggerOperatorGate))
	require.Equal(t, Other, TriggerLabel("nap"))
	require.Equal(t, "35", RuleLabel(35))
	require.Equal(t, Other, RuleLabel(26))
}

func gather(t *testing.T, g prometheus.Gatherer) []*dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	return mfs
}

// series lists the label sets of family name, rendered as `k="v",…`.
func series(mfs []*dto.MetricFamily, name string) []string {
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var parts []string
			for _, l := range m.GetLabel() {
				parts = append(parts, l.GetName()+`="`+l.GetValue()+`"`)
			}
			out = append(out, strings.Join(parts, ","))
		}
	}
	return out
}

// histogram returns the series of family name whose labels include want.
func histogram(t *testing.T, mfs []*dto.MetricFamily, name string, want map[string]string) *dto.Histogram {
	t.Helper()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue next
				}
			}
			return m.GetHistogram()
		}
	}
	t.Fatalf("no %s series with labels %v", name, want)
	return nil
}

func strs[S ~string](in []S) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = string(s)
	}
	return out
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }
