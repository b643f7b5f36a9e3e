package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// syncBuffer is an output the command writes to while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStatusPlainWhenNotATerminal: `fleet status` without --once writing to
// a pipe or a file prints plain snapshots, with no screen-clearing escape
// sequences, and an unchanged fleet is not printed again on every refresh;
// a change is printed, over a real API server.
func TestStatusPlainWhenNotATerminal(t *testing.T) {
	m := startManager(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := newWorkspace(t, m, "status-plain")
	create := func(name string) {
		t.Helper()
		gr := &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: fleet.GitRepoSpec{Repo: "https://example.com/" + name}}
		if err := m.Client.Create(ctx, gr); err != nil {
			t.Fatal(err)
		}
	}
	create("first")

	out := &syncBuffer{}
	root := NewRoot()
	root.SetOut(out)
	root.SetErr(&syncBuffer{})
	root.SetArgs([]string{"status", "--interval", "50ms", "--kubeconfig", m.Kubeconfig, "-n", ns})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("status: %v", err)
		}
	}()

	eventually(t, time.Minute, func() error {
		if !strings.Contains(out.String(), "GitRepo "+ns+"/first") {
			return errors.New("no snapshot with the first GitRepo yet:\n" + out.String())
		}
		return nil
	})
	// Many refreshes of an unchanged fleet later, a change: only it makes
	// a second snapshot.
	time.Sleep(time.Second)
	create("second")
	eventually(t, time.Minute, func() error {
		if !strings.Contains(out.String(), "GitRepo "+ns+"/second") {
			return errors.New("the new GitRepo was not printed:\n" + out.String())
		}
		return nil
	})
	got := out.String()
	if strings.Contains(got, "\x1b") {
		t.Errorf("output to a non-terminal has escape sequences:\n%q", got)
	}
	if n := strings.Count(got, "fleet status — "); n != 2 {
		t.Errorf("want 2 snapshots (the first and the change), got %d:\n%s", n, got)
	}
	if strings.Count(got, "GitRepo "+ns+"/first") != 2 {
		t.Errorf("the second snapshot is not the whole view:\n%s", got)
	}
}

// TestPlainLogPrints: when the plain view prints a snapshot.
func TestPlainLogPrints(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	a := frame{text: []byte("view A at 12:00\n"), key: []byte("A")}
	a2 := frame{text: []byte("view A at 12:01\n"), key: []byte("A")}
	b := frame{text: []byte("view B\n"), key: []byte("B")}
	down := errors.New("connection refused")
	steps := []struct {
		name  string
		fr    frame
		err   error
		after time.Duration
		want  string // "" when nothing is printed
	}{
		{name: "first", fr: a, want: "view A at 12:00"},
		{name: "unchanged but for ages", fr: a2, after: 2 * time.Second},
		{name: "changed", fr: b, after: 4 * time.Second, want: "view B"},
		{name: "unchanged", fr: b, after: 6 * time.Second},
		{name: "unchanged for the repeat interval", fr: b, after: 34 * time.Second, want: "view B"},
		{name: "refresh fails", err: down, after: 36 * time.Second, want: "refresh failed: connection refused"},
		{name: "fails the same way", err: down, after: 38 * time.Second},
		{name: "recovers unchanged", fr: b, after: 40 * time.Second, want: "view B"},
	}
	var out bytes.Buffer
	p := &plainLog{out: &out, repeat: 30 * time.Second}
	for _, s := range steps {
		out.Reset()
		if err := p.print(s.fr, s.err, t0.Add(s.after)); err != nil {
			t.Fatal(err)
		}
		got := out.String()
		switch {
		case s.want == "" && got != "":
			t.Errorf("%s: printed %q", s.name, got)
		case s.want != "" && !strings.Contains(got, s.want):
			t.Errorf("%s: want %q, got %q", s.name, s.want, got)
		case strings.Contains(got, "\x1b"):
			t.Errorf("%s: escape sequence in %q", s.name, got)
		}
	}
}
