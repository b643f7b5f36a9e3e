package git_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fleetgo/fleet/internal/gitops/git"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
)

// multiACKOnly sits in front of a git HTTP server and, like Azure DevOps,
// refuses upload-pack requests whose first want does not ask for multi_ack
// or multi_ack_detailed. It counts the requests it let through.
func multiACKOnly(t *testing.T, backend string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	target, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack") {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			// The first pkt-line: "want <sha> <capabilities>\n".
			first, _, _ := strings.Cut(string(body), "\n")
			if !strings.Contains(first, " multi_ack") {
				http.Error(w, "TF401019: multi_ack is required", http.StatusBadRequest)
				return
			}
			served.Add(1)
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &served
}

// TestFetchSpeaksMultiACK: a server that, like Azure DevOps, serves only
// clients asking for multi_ack can be fetched from, shallow, by branch and
// by tag (go-git leaves multi_ack out unless told otherwise, and such a
// repository could then be polled but never fetched). Untested against
// Azure DevOps itself.
func TestFetchSpeaksMultiACK(t *testing.T) {
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	repo.Commit("main", map[string]string{"a.yaml": "a: 1\n"})
	c2 := repo.Commit("main", map[string]string{"a.yaml": "a: 2\n"})
	repo.Tag("v2")
	backend := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	srv, served := multiACKOnly(t, backend.URL)
	ctx := context.Background()

	for _, remote := range []git.Remote{
		{URL: srv.URL + "/" + repo.Name, Branch: "main"},
		{URL: srv.URL + "/" + repo.Name, Revision: "v2"},
		{URL: srv.URL + "/" + repo.Name, Revision: c2},
	} {
		ref, err := git.LatestRef(ctx, remote)
		if err != nil || ref.Commit != c2 {
			t.Fatalf("LatestRef(%+v) = %+v, %v", remote, ref, err)
		}
		dir := t.TempDir()
		got, err := git.Fetch(ctx, remote, dir, git.FetchOptions{Commit: ref.Commit, Ref: ref.Name})
		if err != nil || got != c2 {
			t.Fatalf("Fetch(%+v) = %q, %v; want %q", remote, got, err, c2)
		}
		if s := readFile(t, filepath.Join(dir, "source", "a.yaml")); s != "a: 2\n" {
			t.Fatalf("content %q", s)
		}
	}
	if served.Load() == 0 {
		t.Fatal("no upload-pack request went through the multi_ack check")
	}
}
