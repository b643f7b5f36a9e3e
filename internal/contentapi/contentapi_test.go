package contentapi_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/testenv"
)

var up *testenv.Cluster

func TestMain(m *testing.M) {
	var err error
	if up, err = testenv.Start(testenv.Options{Name: "contentapi"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = up.Stop()
	os.Exit(code)
}

// TestReaderWithoutTheAPI: on an API server that does not serve the content
// API (a manager with --content-api-addr=0), the reader reads the Content
// directly.
func TestReaderWithoutTheAPI(t *testing.T) {
	ctx := context.Background()
	want := []byte("not really gzip")
	if err := up.Client.Create(ctx, &fleet.Content{ObjectMeta: metav1.ObjectMeta{Name: "s-direct"}, Content: want, SHA256Sum: "abc"}); err != nil {
		t.Fatal(err)
	}
	r, err := contentapi.NewReader(up.Config, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, sum, err := r.Get(ctx, "default", "s-direct", "")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if !bytes.Equal(got, want) || sum != "abc" {
		t.Errorf("Get = %q, %q; want %q, abc", got, sum, want)
	}
	// The second read goes direct at once (no second 404 first).
	if _, _, err := r.Get(ctx, "default", "s-direct", ""); err != nil {
		t.Errorf("second Get: %v", err)
	}
}
