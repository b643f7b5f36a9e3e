package registration

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/testenv"
)

// The import token in a values Secret is replaced halfway through the
// lifetime the API server granted, whatever was asked for, and not at all
// before the registration token ends when it outlives it.
func TestValuesRefresh(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	year := 365 * 24 * time.Hour
	at := func(d time.Duration) time.Time { return now.Add(d) }
	mt := func(d time.Duration) *metav1.Time { m := metav1.NewTime(now.Add(d)); return &m }
	for _, tc := range []struct {
		name     string
		issued   time.Time
		expiry   time.Time
		expires  *metav1.Time
		asked    time.Duration
		want     time.Time
		wantKeep bool
	}{
		{name: "uncapped, fresh", issued: at(0), expiry: at(year), asked: year, want: at(year / 2), wantKeep: true},
		{name: "uncapped, past the midpoint", issued: at(-year/2 - time.Hour), expiry: at(year/2 - time.Hour), asked: year, want: at(-time.Hour)},
		{name: "capped to 48h, fresh", issued: at(-time.Minute), expiry: at(48*time.Hour - time.Minute), asked: year, want: at(24*time.Hour - time.Minute), wantKeep: true},
		{name: "capped to 48h, past the midpoint", issued: at(-25 * time.Hour), expiry: at(23 * time.Hour), asked: year, want: at(-time.Hour)},
		{name: "capped, TTL longer than the cap", issued: at(0), expiry: at(time.Hour), expires: mt(48 * time.Hour), asked: 48 * time.Hour, want: at(30 * time.Minute), wantKeep: true},
		{name: "outlives the registration token", issued: at(-8 * time.Minute), expiry: at(2 * time.Minute), expires: mt(time.Minute), asked: minTokenLifetime, want: at(time.Minute), wantKeep: true},
		{name: "outlives the registration token, minted long ago", issued: at(-year), expiry: at(time.Hour), expires: mt(time.Hour), asked: minTokenLifetime, want: at(time.Hour), wantKeep: true},
		{name: "expired", issued: at(-2 * time.Hour), expiry: at(-time.Hour), asked: year, want: time.Time{}},
		{name: "expires now", issued: at(-time.Hour), expiry: at(0), asked: year, want: time.Time{}},
		{name: "legacy Secret, as asked", expiry: at(year - time.Hour), asked: year, want: at(year/2 - time.Hour), wantKeep: true},
		{name: "legacy Secret, capped", expiry: at(47 * time.Hour), asked: year, want: at(47*time.Hour - year/2)},
		{name: "issue time after expiry", issued: at(2 * time.Hour), expiry: at(time.Hour), asked: 2 * time.Hour, want: at(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, keep := valuesRefresh(now, tc.issued, tc.expiry, tc.expires, tc.asked)
			if !got.Equal(tc.want) || keep != tc.wantKeep {
				t.Errorf("valuesRefresh = %s, %v; want %s, %v", got, keep, tc.want, tc.wantKeep)
			}
			if keep && !got.After(now) {
				t.Errorf("keeps the token with a refresh time %s not after now %s", got, now)
			}
		})
	}
}

// Right after minting, the refresh time is in the future whatever the API
// server granted or its clock says.
func TestMintedRefreshInFuture(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	year := 365 * 24 * time.Hour
	ttl := metav1.NewTime(now.Add(3 * time.Minute))
	for _, tc := range []struct {
		name           string
		issued, expiry time.Time
		expires        *metav1.Time
		asked          time.Duration
		want           time.Time
	}{
		{name: "uncapped", issued: now, expiry: now.Add(year), asked: year, want: now.Add(year / 2)},
		{name: "capped", issued: now, expiry: now.Add(time.Hour), asked: year, want: now.Add(30 * time.Minute)},
		{name: "minimum lifetime", issued: now, expiry: now.Add(minTokenLifetime), expires: &ttl, asked: minTokenLifetime, want: now.Add(minTokenLifetime / 2)},
		{name: "API server clock far behind", issued: now, expiry: now.Add(-time.Minute), asked: year, want: now.Add(minTokenLifetime / 2)},
		{name: "API server clock behind", issued: now, expiry: now.Add(time.Minute), asked: year, want: now.Add(minTokenLifetime / 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mintedRefresh(now, tc.issued, tc.expiry, tc.expires, tc.asked); !got.Equal(tc.want) {
				t.Errorf("mintedRefresh = %s, want %s", got, tc.want)
			}
		})
	}
}

// With an API server that caps token lifetimes far below what the manager
// asks for (1 year without TTL, 48h with it), the values Secret is written
// once and then left alone, rather than rewritten with a new token every
// second.
func TestValuesSecretStableWithCappedTokenLifetime(t *testing.T) {
	c, err := testenv.Start(testenv.Options{
		Name:               "reg-capped",
		ExtraAPIServerArgs: map[string]string{"service-account-max-token-expiration": "2h"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns = "capped"
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme:                 testenv.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := Setup(ctx, mgr, Options{APIServerURL: c.Config.Host, APIServerCA: c.Config.CAData, Workers: 2}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	defer func() { cancel(); <-done }()

	tokens := map[string]*metav1.Duration{"no-ttl": nil, "ttl-48h": {Duration: 48 * time.Hour}}
	for name, ttl := range tokens {
		tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: fleet.ClusterRegistrationTokenSpec{TTL: ttl}}
		if err := c.Client.Create(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	versions := map[string]string{}
	deadline := time.Now().Add(90 * time.Second)
	for name := range tokens {
		s := &corev1.Secret{}
		for {
			err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s)
			if err == nil && len(s.Data["values"]) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("values Secret %s not written: %v", name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The cap is in effect: the token ends long before what was asked.
		exp, err := time.Parse(time.RFC3339, s.Annotations[tokenExpiryAnnotation])
		if err != nil {
			t.Fatalf("%s: expiry annotation: %v", name, err)
		}
		if exp.After(time.Now().Add(3 * time.Hour)) {
			t.Fatalf("%s: import token expires at %s, the API server did not cap it", name, exp)
		}
		versions[name] = s.ResourceVersion
	}
	// The old code rewrote each Secret about every second from now on.
	end := time.Now().Add(6 * time.Second)
	for time.Now().Before(end) {
		for name, rv := range versions {
			s := &corev1.Secret{}
			if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
				t.Fatal(err)
			}
			if s.ResourceVersion != rv {
				t.Fatalf("values Secret %s rewritten (resourceVersion %s -> %s) although its import token is good until %s",
					name, rv, s.ResourceVersion, s.Annotations[tokenExpiryAnnotation])
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}
