package controller

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

func bundle(name string, gen, observed int64, s fleet.BundleSummary) fleet.Bundle {
	return fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: gen},
		Status:     fleet.BundleStatus{ObservedGeneration: observed, Summary: s},
	}
}

func TestSummarizeBundles(t *testing.T) {
	bundles := []fleet.Bundle{
		bundle("b", 1, 1, fleet.BundleSummary{Ready: 2, DesiredReady: 3, NotReady: 1,
			NonReadyResources: []fleet.NonReadyResource{{Name: "b", State: fleet.NotReady}}}),
		bundle("a", 2, 1, fleet.BundleSummary{Ready: 3, DesiredReady: 3}),
	}
	bds := []*fleet.BundleDeployment{
		{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{fleet.ClusterNamespaceLabel: "ns1", fleet.ClusterLabel: "c1"}},
			Status: fleet.BundleDeploymentStatus{ResourceCounts: fleet.ResourceCounts{Ready: 2, DesiredReady: 2}}},
		{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{fleet.ClusterNamespaceLabel: "ns1", fleet.ClusterLabel: "c1"}},
			Status: fleet.BundleDeploymentStatus{ResourceCounts: fleet.ResourceCounts{NotReady: 1, DesiredReady: 1}}},
	}
	bs := summarizeBundles(bundles, bds)
	if bs.Summary.Ready != 5 || bs.Summary.DesiredReady != 6 || bs.Summary.NotReady != 1 {
		t.Fatalf("summary %+v", bs.Summary)
	}
	if bs.ReadyClusters != 2 || bs.DesiredReadyClusters != 3 {
		t.Fatalf("clusters %d/%d", bs.ReadyClusters, bs.DesiredReadyClusters)
	}
	if len(bs.Waiting) != 1 || bs.Waiting[0] != "a" {
		t.Fatalf("waiting %v", bs.Waiting)
	}
	if bs.ResourceCounts.DesiredReady != 3 || bs.ResourceCounts.Ready != 2 || bs.PerCluster["ns1/c1"].NotReady != 1 {
		t.Fatalf("counts %+v per cluster %+v", bs.ResourceCounts, bs.PerCluster)
	}
	var st fleet.GitRepoStatus
	setBundleStatus(&st, bs)
	if st.Display.ReadyBundleDeployments != "5/6" {
		t.Fatalf("display %q", st.Display.ReadyBundleDeployments)
	}
}

// rejected is a Bundle the Bundle controller refused whole (setError):
// Ready=False and Stalled=True with reason InvalidBundle for condGen, the
// status observedGeneration left at observed.
func rejected(name string, gen, observed, condGen int64, msg string, s fleet.BundleSummary) fleet.Bundle {
	b := bundle(name, gen, observed, s)
	b.Status.Conditions = []metav1.Condition{
		{Type: fleet.ConditionReady, Status: metav1.ConditionFalse, Reason: "InvalidBundle", Message: msg, ObservedGeneration: condGen},
		{Type: fleet.ConditionStalled, Status: metav1.ConditionTrue, Reason: "InvalidBundle", Message: msg, ObservedGeneration: condGen},
	}
	return b
}

func TestSummarizeBundlesTable(t *testing.T) {
	ready3 := fleet.BundleSummary{Ready: 3, DesiredReady: 3}
	for _, tc := range []struct {
		name                  string
		bundles               []fleet.Bundle
		ready, desired        int
		waiting               []string
		failed                []string
		failedReason, message string
	}{
		{name: "a bundle targeting no cluster does not count",
			bundles: []fleet.Bundle{bundle("a", 1, 1, ready3), bundle("b", 1, 1, fleet.BundleSummary{})},
			ready:   3, desired: 3},
		{name: "minimum over bundles with targets",
			bundles: []fleet.Bundle{bundle("a", 1, 1, ready3), bundle("b", 1, 1, fleet.BundleSummary{Ready: 1, DesiredReady: 2}), bundle("c", 1, 1, fleet.BundleSummary{})},
			ready:   1, desired: 3},
		{name: "no bundle targets anything", bundles: []fleet.Bundle{bundle("a", 1, 1, fleet.BundleSummary{})}},
		{name: "a rejected bundle is failed, not waiting",
			bundles: []fleet.Bundle{bundle("a", 1, 1, ready3), rejected("b", 2, 1, 2, "repo not allowed", ready3)},
			ready:   3, desired: 3, failed: []string{"b"}, failedReason: "InvalidBundle", message: "repo not allowed"},
		{name: "a stale rejection waits for the new generation",
			bundles: []fleet.Bundle{rejected("b", 3, 1, 2, "repo not allowed", ready3)},
			ready:   3, desired: 3, waiting: []string{"b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bs := summarizeBundles(tc.bundles, nil)
			if bs.ReadyClusters != tc.ready || bs.DesiredReadyClusters != tc.desired {
				t.Errorf("clusters %d/%d, want %d/%d", bs.ReadyClusters, bs.DesiredReadyClusters, tc.ready, tc.desired)
			}
			if fmt.Sprint(bs.Waiting) != fmt.Sprint(tc.waiting) {
				t.Errorf("waiting %v, want %v", bs.Waiting, tc.waiting)
			}
			var failed []string
			for _, f := range bs.Failed {
				failed = append(failed, f.Name)
				if f.Reason != tc.failedReason || f.Message != tc.message {
					t.Errorf("failed %+v, want reason %q message %q", f, tc.failedReason, tc.message)
				}
			}
			if fmt.Sprint(failed) != fmt.Sprint(tc.failed) {
				t.Errorf("failed %v, want %v", failed, tc.failed)
			}
		})
	}
}

func TestSetConditions(t *testing.T) {
	ready := bundleStatus{Summary: fleet.BundleSummary{Ready: 2, DesiredReady: 2}}
	notReady := bundleStatus{Summary: fleet.BundleSummary{Ready: 1, DesiredReady: 2, ErrApplied: 1,
		NonReadyResources: []fleet.NonReadyResource{{Name: "app", State: fleet.ErrApplied, Message: "boom"}}}}
	type want struct {
		accepted, polling, ready, stalled, reconciling metav1.ConditionStatus
		readyReason                                    string
		readyMsg                                       string
		// display and displayError are checked when display is set.
		display      string
		displayError bool
		// pollingReason and pollingMsg are checked when pollingReason is set.
		pollingReason, pollingMsg string
	}
	for _, tc := range []struct {
		name string
		o    syncOutcome
		bs   bundleStatus
		want want
	}{
		{name: "all good", bs: ready, want: want{accepted: "True", polling: "True", ready: "True", stalled: "False", reconciling: "False", readyReason: ReasonBundlesReady}},
		{name: "deployments failing are not hidden", bs: notReady, want: want{accepted: "True", polling: "True", ready: "False", stalled: "False", reconciling: "False",
			readyReason: ReasonNotReady, readyMsg: "ErrApplied(1) [Bundle app: boom]"}},
		{name: "waiting for bundles", bs: bundleStatus{Waiting: []string{"x"}}, want: want{accepted: "True", polling: "True", ready: "False", stalled: "False", reconciling: "True",
			readyReason: ReasonNotReady, readyMsg: "waiting for 1 bundle(s) to be processed"}},
		{name: "poll failure retried", o: syncOutcome{PollErr: errors.New("timed out"), SyncReason: ReasonPollFailed}, bs: ready,
			want: want{accepted: "True", polling: "False", ready: "False", stalled: "False", reconciling: "True", readyReason: ReasonPollFailed, readyMsg: "timed out"}},
		{name: "broken commit stalls, old bundles healthy", o: syncOutcome{SyncErr: errors.New("bad fleet.yaml"), SyncReason: ReasonBuildFailed, Stalled: true}, bs: ready,
			want: want{accepted: "True", polling: "True", ready: "False", stalled: "True", reconciling: "False", readyReason: ReasonBuildFailed, readyMsg: "bad fleet.yaml"}},
		{name: "missing secret is not accepted", o: syncOutcome{PollErr: errors.New("client secret \"x\" not found"), SyncReason: ReasonInvalidSpec, Stalled: true}, bs: ready,
			want: want{accepted: "False", polling: "False", ready: "False", stalled: "True", reconciling: "False", readyReason: ReasonPollFailed, readyMsg: "client secret \"x\" not found"}},
		{name: "a bundle rejected whole is an error, not waiting", bs: bundleStatus{Summary: ready.Summary,
			Failed: []failedBundle{{Name: "app", Reason: "InvalidBundle", Message: "repo not allowed"}}, Waiting: []string{"other"}},
			want: want{accepted: "True", polling: "True", ready: "False", stalled: "True", reconciling: "False",
				readyReason: "InvalidBundle", readyMsg: "bundle app: repo not allowed", display: "Error", displayError: true}},
		{name: "several rejected bundles", bs: bundleStatus{Summary: ready.Summary, Failed: []failedBundle{
			{Name: "a", Reason: "InvalidBundle", Message: "x"}, {Name: "b", Reason: "InvalidBundle", Message: "y"}}},
			want: want{accepted: "True", polling: "True", ready: "False", stalled: "True", reconciling: "False",
				readyReason: "InvalidBundle", readyMsg: "bundle a: x; bundle b: y", display: "Error", displayError: true}},
		{name: "a sync failure comes first", o: syncOutcome{SyncErr: errors.New("bad fleet.yaml"), SyncReason: ReasonBuildFailed, Stalled: true},
			bs: bundleStatus{Summary: ready.Summary, Failed: []failedBundle{{Name: "app", Reason: "InvalidBundle", Message: "repo not allowed"}}},
			want: want{accepted: "True", polling: "True", ready: "False", stalled: "True", reconciling: "False",
				readyReason: ReasonBuildFailed, readyMsg: "bad fleet.yaml", display: "GitError", displayError: true}},
		{name: "polling disabled", o: syncOutcome{PollingDisabled: true}, bs: ready,
			want: want{accepted: "True", polling: "False", ready: "True", stalled: "False", reconciling: "False", readyReason: ReasonBundlesReady,
				pollingReason: ReasonPollDisabled, pollingMsg: "polling is disabled; waiting for webhooks"}},
		{name: "polling disabled, a webhook's ref lookup failing shows the failure", o: syncOutcome{PollingDisabled: true, PollErr: errors.New("ref not found"), SyncReason: ReasonPollFailed}, bs: ready,
			want: want{accepted: "True", polling: "False", ready: "False", stalled: "False", reconciling: "True", readyReason: ReasonPollFailed, readyMsg: "ref not found",
				pollingReason: ReasonPollFailed, pollingMsg: "ref not found"}},
		{name: "polling disabled, a missing secret is not accepted", o: syncOutcome{PollingDisabled: true, PollErr: errors.New("client secret \"x\" not found"), SyncReason: ReasonInvalidSpec, Stalled: true}, bs: ready,
			want: want{accepted: "False", polling: "False", ready: "False", stalled: "True", reconciling: "False", readyReason: ReasonPollFailed, readyMsg: "client secret \"x\" not found",
				pollingReason: ReasonPollFailed, pollingMsg: "client secret \"x\" not found"}},
		{name: "refused by the restrictions: not accepted, not polled", o: syncOutcome{SyncErr: errors.New("repo x is not allowed"), SyncReason: ReasonRestricted, Stalled: true}, bs: ready,
			want: want{accepted: "False", polling: "False", ready: "False", stalled: "True", reconciling: "False", readyReason: ReasonRestricted, readyMsg: "repo x is not allowed",
				display: "GitError", displayError: true, pollingReason: ReasonRestricted, pollingMsg: "not polled: repo x is not allowed"}},
		{name: "refused by the restrictions with polling disabled", o: syncOutcome{PollingDisabled: true, SyncErr: errors.New("repo x is not allowed"), SyncReason: ReasonRestricted, Stalled: true}, bs: ready,
			want: want{accepted: "False", polling: "False", ready: "False", stalled: "True", reconciling: "False", readyReason: ReasonRestricted, readyMsg: "repo x is not allowed",
				pollingReason: ReasonRestricted, pollingMsg: "not polled: repo x is not allowed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st fleet.GitRepoStatus
			setConditions(&st, 3, tc.o, tc.bs)
			check := func(typ string, want metav1.ConditionStatus) *metav1.Condition {
				c := meta.FindStatusCondition(st.Conditions, typ)
				if c == nil || c.Status != want {
					t.Fatalf("%s = %+v, want %s", typ, c, want)
				}
				if c.ObservedGeneration != 3 {
					t.Fatalf("%s observedGeneration %d", typ, c.ObservedGeneration)
				}
				return c
			}
			a := check(fleet.ConditionAccepted, tc.want.accepted)
			if tc.want.accepted == "False" && (a.Reason != tc.o.SyncReason || a.Message != tc.want.readyMsg) {
				t.Fatalf("Accepted %+v, want reason %q message %q", a, tc.o.SyncReason, tc.want.readyMsg)
			}
			p := check(fleet.ConditionGitPolling, tc.want.polling)
			if tc.want.pollingReason != "" && (p.Reason != tc.want.pollingReason || p.Message != tc.want.pollingMsg) {
				t.Fatalf("GitPolling reason %q msg %q; want %q %q", p.Reason, p.Message, tc.want.pollingReason, tc.want.pollingMsg)
			}
			check(fleet.ConditionStalled, tc.want.stalled)
			check(fleet.ConditionReconciling, tc.want.reconciling)
			r := check(fleet.ConditionReady, tc.want.ready)
			if r.Reason != tc.want.readyReason || r.Message != tc.want.readyMsg {
				t.Fatalf("Ready reason %q msg %q; want %q %q", r.Reason, r.Message, tc.want.readyReason, tc.want.readyMsg)
			}
			if tc.want.display != "" && (st.Display.State != tc.want.display || st.Display.Error != tc.want.displayError || st.Display.Message != tc.want.readyMsg) {
				t.Fatalf("display %+v, want state %q error %v message %q", st.Display, tc.want.display, tc.want.displayError, tc.want.readyMsg)
			}
			if tc.want.stalled == "True" {
				if c := meta.FindStatusCondition(st.Conditions, fleet.ConditionStalled); c.Reason != tc.want.readyReason || c.Message != tc.want.readyMsg {
					t.Fatalf("Stalled %+v, want reason %q message %q", c, tc.want.readyReason, tc.want.readyMsg)
				}
			}
		})
	}
}

func TestEventsOnlyOnChange(t *testing.T) {
	readyCond := func(reason, msg string) []metav1.Condition {
		return []metav1.Condition{{Type: fleet.ConditionReady, Status: "False", Reason: reason, Message: msg}}
	}
	same := fleet.GitRepoStatus{Commit: "a", StatusBase: fleet.StatusBase{Conditions: readyCond(ReasonBuildFailed, "x")}}
	if ev := eventsFor(&same, &same); len(ev) != 0 {
		t.Fatalf("no change gave events %v", ev)
	}
	newCommit := fleet.GitRepoStatus{Commit: "b"}
	if ev := eventsFor(&fleet.GitRepoStatus{Commit: "a"}, &newCommit); len(ev) != 1 || ev[0].reason != "GotNewCommit" {
		t.Fatalf("new commit %v", ev)
	}
	failing := fleet.GitRepoStatus{Commit: "a", StatusBase: fleet.StatusBase{Conditions: readyCond(ReasonBuildFailed, "y")}}
	if ev := eventsFor(&same, &failing); len(ev) != 1 || ev[0].typ != "Warning" {
		t.Fatalf("different failure %v", ev)
	}
	ok := fleet.GitRepoStatus{Commit: "a", StatusBase: fleet.StatusBase{Conditions: []metav1.Condition{{Type: fleet.ConditionReady, Status: "True", Reason: ReasonBundlesReady}}}}
	if ev := eventsFor(&failing, &ok); len(ev) != 1 || ev[0].reason != "Recovered" {
		t.Fatalf("recovery %v", ev)
	}
	// A Bundle rejected whole (a repo no GitRepoRestriction allows) is a
	// failure of the GitRepo too: a Warning, and Recovered once it is gone.
	rejected := fleet.GitRepoStatus{Commit: "a", StatusBase: fleet.StatusBase{Conditions: readyCond("InvalidBundle", "bundle app: repo not allowed")}}
	if ev := eventsFor(&ok, &rejected); len(ev) != 1 || ev[0].typ != "Warning" || ev[0].reason != "InvalidBundle" {
		t.Fatalf("rejected bundle %v", ev)
	}
	if ev := eventsFor(&rejected, &ok); len(ev) != 1 || ev[0].reason != "Recovered" {
		t.Fatalf("recovery from a rejected bundle %v", ev)
	}
	// Every reason the Bundle controller rejects a Bundle with is one.
	for _, reason := range []string{"InvalidName", "InvalidClusterGroup", "InvalidBundleNamespaceMapping"} {
		stalled := fleet.GitRepoStatus{Commit: "a", StatusBase: fleet.StatusBase{Conditions: readyCond(reason, "bundle app: x")}}
		if ev := eventsFor(&ok, &stalled); len(ev) != 1 || ev[0].typ != "Warning" || ev[0].reason != reason {
			t.Fatalf("bundle stalled with %s: %v", reason, ev)
		}
		if ev := eventsFor(&stalled, &ok); len(ev) != 1 || ev[0].reason != "Recovered" {
			t.Fatalf("recovery from %s: %v", reason, ev)
		}
	}
}

func TestTargetsFor(t *testing.T) {
	ts, rs := targetsFor(&fleet.GitRepo{})
	if len(ts) != 1 || ts[0].ClusterGroup != "default" || len(rs) != 1 || rs[0].ClusterGroup != "default" {
		t.Fatalf("default targets %+v %+v", ts, rs)
	}
	repo := &fleet.GitRepo{Spec: fleet.GitRepoSpec{Targets: []fleet.GitTarget{
		{Name: "prod", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}},
		{ClusterName: "one"},
	}}}
	ts, rs = targetsFor(repo)
	if len(ts) != 2 || ts[0].Name != "prod" || ts[0].ClusterSelector.MatchLabels["env"] != "prod" || ts[1].ClusterName != "one" {
		t.Fatalf("targets %+v", ts)
	}
	if len(rs) != 2 || rs[0].ClusterSelector.MatchLabels["env"] != "prod" || rs[1].ClusterName != "one" {
		t.Fatalf("restrictions %+v", rs)
	}
}

func TestSyncedFieldsCarryOnlyWhatChanged(t *testing.T) {
	t0 := metav1.NewTime(time.Unix(100, 0))
	t1 := metav1.NewTime(time.Unix(200, 0))
	read := fleet.GitRepoStatus{PollingCommit: "a", LastPollingTime: &t0, Commit: "a", ObservedGeneration: 1}
	// Fresher than read: another write this reconcile did not see.
	stored := fleet.GitRepoStatus{PollingCommit: "b", LastPollingTime: &t1, Commit: "b", ObservedGeneration: 2}

	idle := syncedBy(&read, &read)
	got := stored
	idle.apply(&got)
	if got.Commit != "b" || got.PollingCommit != "b" || got.ObservedGeneration != 2 {
		t.Fatalf("a reconcile that did nothing overwrote newer fields: %+v", got)
	}

	after := read
	after.PollingCommit, after.LastPollingTime = "c", &t1
	after.Commit, after.ObservedGeneration, after.UpdateGeneration = "c", 3, 1
	got = stored
	syncedBy(&read, &after).apply(&got)
	if got.Commit != "c" || got.PollingCommit != "c" || got.ObservedGeneration != 3 || got.UpdateGeneration != 1 {
		t.Fatalf("synced fields not carried: %+v", got)
	}

	polledOnly := read
	polledOnly.PollingCommit = "c"
	got = stored
	syncedBy(&read, &polledOnly).apply(&got)
	if got.PollingCommit != "c" || got.Commit != "b" {
		t.Fatalf("poll only: %+v", got)
	}
}

func TestSetWebhookStatus(t *testing.T) {
	var st fleet.GitRepoStatus
	setWebhookStatus(&st, webhookMark{})
	if st.WebhookCommit != "" || st.LastWebhookTime != nil {
		t.Fatalf("no mark: %+v", st)
	}
	setWebhookStatus(&st, webhookMark{Commit: "abc", Time: "2026-01-02T03:04:05.678901Z"})
	if st.WebhookCommit != "abc" || st.LastWebhookTime == nil || !st.LastWebhookTime.Equal(&metav1.Time{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}) {
		t.Fatalf("mark: %+v", st)
	}
	setWebhookStatus(&st, webhookMark{Commit: "def", Time: "yesterday"})
	if st.WebhookCommit != "def" || st.LastWebhookTime.Year() != 2026 {
		t.Fatalf("bad time: %+v", st)
	}
}
