// Package operations tests what an operator relies on, on real parts (a
// manager API server and a separate downstream API server, in-process
// managers and agents, git over HTTP): /metrics of a running manager and
// agent during a GitRepo flow, series that vanish with their objects,
// transition events, logs free of secrets, sharding and leader election.
package operations

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

var upstream, downstream *testenv.Cluster

// logs captures every log line of every component of this test binary
// (manager, agents, client-go), at the most verbose level.
var logs = &syncBuffer{}

func TestMain(m *testing.M) {
	// V(6): far beyond the chart's debug level. (From V(8) on, client-go
	// dumps request and response bodies, Secrets included, as in every
	// Kubernetes client; that level is not meant for a running system.)
	logger := zap.New(zap.WriteTo(logs), zap.Level(zapcore.Level(-6)), zap.JSONEncoder())
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	var err error
	if upstream, downstream, err = fleettest.StartSystem(fleettest.SystemOptions{Prefix: "ops"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if code != 0 {
		// The logs are only in memory; keep them for the post-mortem.
		f := os.TempDir() + "/fleet-operations-test.log"
		if os.WriteFile(f, []byte(logs.String()), 0o600) == nil {
			fmt.Fprintln(os.Stderr, "logs of the failed run:", f)
		}
	}
	_ = downstream.Stop()
	_ = upstream.Stop()
	os.Exit(code)
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// freeAddr returns a loopback address with a port that was free a moment
// ago (the metrics server does not report the port it bound).
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}

// scrape fetches the Prometheus text exposition of addr.
func scrape(addr string) (string, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// series returns the values of the samples of metric name whose labels
// include every pair in want.
func series(body, name string, want map[string]string) []float64 {
	var out []float64
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		labels := ""
		if i, j := strings.Index(line, "{"), strings.LastIndex(line, "}"); i >= 0 && j > i {
			labels = line[i+1 : j]
		}
		ok := true
		for k, v := range want {
			if !strings.Contains(","+labels+",", ","+k+"="+strconv.Quote(v)+",") {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		fields := strings.Fields(line)
		if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
			out = append(out, v)
		}
	}
	return out
}
