package register

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// garbageCollectionInterval is a Go duration as in Rancher Fleet; what is
// unset or zero is the default, what is invalid is the default and an
// error naming the value.
func TestGCInterval(t *testing.T) {
	for _, tc := range []struct {
		value   string
		want    time.Duration
		wantErr string
	}{
		{value: "", want: DefaultGCInterval},
		{value: "15m", want: 15 * time.Minute},
		{value: "30s", want: 30 * time.Second},
		{value: "1h30m", want: 90 * time.Minute},
		{value: "0", want: DefaultGCInterval},
		{value: "0s", want: DefaultGCInterval},
		{value: "-5m", want: DefaultGCInterval, wantErr: `"-5m" is negative`},
		{value: "15", want: DefaultGCInterval, wantErr: `"15" is not a duration`},
		{value: "fifteen minutes", want: DefaultGCInterval, wantErr: `"fifteen minutes" is not a duration`},
	} {
		got, err := AgentConfig{GarbageCollectionInterval: tc.value}.GCInterval()
		if got != tc.want {
			t.Errorf("%q: interval %s, want %s", tc.value, got, tc.want)
		}
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%q: unexpected error %v", tc.value, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: error %v, want one containing %s", tc.value, err, tc.wantErr)
		}
	}
}

// The interval of a ConfigMap as the agent reads it: a missing ConfigMap or
// key, or a config that is not JSON, is the default.
func TestGCIntervalOfConfigMap(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    map[string]string
		want    time.Duration
		wantErr bool
	}{
		{name: "no configmap", want: DefaultGCInterval},
		{name: "no interval", data: map[string]string{"config": `{"clientID":"x"}`}, want: DefaultGCInterval},
		{name: "chart default", data: map[string]string{"config": `{"garbageCollectionInterval":"15m"}`}, want: 15 * time.Minute},
		{name: "set", data: map[string]string{"config": `{"labels":{},"clientID":"","agentTLSMode":"system-store","garbageCollectionInterval":"2m"}`}, want: 2 * time.Minute},
		{name: "not JSON", data: map[string]string{"config": `{garbageCollectionInterval: 2m}`}, want: DefaultGCInterval, wantErr: true},
		{name: "invalid", data: map[string]string{"config": `{"garbageCollectionInterval":"2 minutes"}`}, want: DefaultGCInterval, wantErr: true},
	} {
		got, err := gcIntervalOf(&corev1.ConfigMap{Data: tc.data})
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%s: %s, %v; want %s, error %v", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}

// LoadGCInterval reads ConfigMap fleet-agent of the agent namespace; an
// invalid value does not stop the agent (no error, the default).
func TestLoadGCInterval(t *testing.T) {
	env := upstream(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	load := func(ns string) time.Duration {
		t.Helper()
		d, err := LoadGCInterval(ctx, env.Config, ns)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	const ns = "gc-interval"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if d := load(ns); d != DefaultGCInterval {
		t.Errorf("without configmap: %s", d)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Namespace: ns},
		Data: map[string]string{"config": `{"garbageCollectionInterval":"90s"}`}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if d := load(ns); d != 90*time.Second {
		t.Errorf("configured 90s: %s", d)
	}
	cm.Data["config"] = `{"garbageCollectionInterval":"-1m"}`
	if err := env.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if d := load(ns); d != DefaultGCInterval {
		t.Errorf("invalid value: %s", d)
	}
}
