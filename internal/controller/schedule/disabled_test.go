package schedule_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fleetgo/fleet/internal/controller/schedule"
	"github.com/fleetgo/fleet/internal/testenv"
)

// flakyMapper is the manager's real RESTMapper, except that its first
// failures RESTMapping calls fail as a temporary discovery outage would.
type flakyMapper struct {
	meta.RESTMapper
	failures int32
	calls    atomic.Int32
}

func (m *flakyMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if m.calls.Add(1) <= m.failures {
		return nil, errors.New("the server is currently unable to handle the request")
	}
	return m.RESTMapper.RESTMapping(gk, versions...)
}

// TestDisabledSetupSurvivesDiscoveryFailures: while Schedules are
// disabled, a discovery failure other than "no match" neither fails the
// manager's setup nor is taken at its first word: it is retried, and
// given up on (nothing watched) only after the last attempt.
func TestDisabledSetupSurvivesDiscoveryFailures(t *testing.T) {
	defer schedule.SetDiscoveryRetry(3, time.Millisecond)()
	for _, tc := range []struct {
		name      string
		failures  int32
		wantCalls int32
	}{
		{name: "discovery keeps failing", failures: 100, wantCalls: 3},
		{name: "discovery fails once, then answers", failures: 1, wantCalls: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mapper := &flakyMapper{failures: tc.failures}
			mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: testenv.Scheme,
				Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
				Controller: config.Controller{SkipNameValidation: ptr.To(true)},
				MapperProvider: func(c *rest.Config, h *http.Client) (meta.RESTMapper, error) {
					real, err := apiutil.NewDynamicRESTMapper(c, h)
					mapper.RESTMapper = real
					return mapper, err
				}})
			if err != nil {
				t.Fatal(err)
			}
			if err := schedule.SetupDisabled(context.Background(), mgr); err != nil {
				t.Fatalf("setup failed the manager's start: %v", err)
			}
			if got := mapper.calls.Load(); got < tc.wantCalls {
				t.Errorf("discovery asked %d times, want at least %d", got, tc.wantCalls)
			}
		})
	}
}
