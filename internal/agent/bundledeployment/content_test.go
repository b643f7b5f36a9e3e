package bundledeployment

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetgo/fleet/internal/contentapi"
)

// Which failures to read a Content are the API server being overloaded or
// unreachable (retried shortly, WaitingForContent) and which are a
// DeployError with backoff as before.
func TestTransientContentError(t *testing.T) {
	live := context.Background()
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	name := "s-0123456789abcdef"
	status := func(code int32, reason metav1.StatusReason) error {
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason}}
	}
	urlErr := func(err error) error {
		return &url.Error{Op: "Get", URL: "https://upstream.example:6443/apis/" + contentapi.Group, Err: err}
	}
	dial := func(errno syscall.Errno) error {
		return urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: errno}})
	}
	tests := []struct {
		name   string
		parent context.Context
		err    error
		cause  string // "" when not transient
	}{
		{name: "nil", parent: live, err: nil},
		{name: "429", parent: live, err: apierrors.NewTooManyRequests("slow down", 1), cause: "429"},
		{name: "429 without a reason (a proxy's answer)", parent: live, err: status(429, ""), cause: "429"},
		{name: "503", parent: live, err: apierrors.NewServiceUnavailable("no endpoints"), cause: "503"},
		{name: "503 code only", parent: live, err: status(503, ""), cause: "503"},
		{name: "server timeout", parent: live, err: apierrors.NewServerTimeout(contentapi.GroupResource, "get", 1), cause: "timeout"},
		{name: "504 timeout", parent: live, err: apierrors.NewTimeoutError("took too long", 1), cause: "504"},
		{name: "504 code only", parent: live, err: status(504, "GatewayTimeout"), cause: "504"},
		{name: "502", parent: live, err: status(502, ""), cause: "502"},
		{name: "wrapped 429", parent: live, err: fmt.Errorf("reading: %w", apierrors.NewTooManyRequests("x", 0)), cause: "429"},
		{name: "deadline of the read", parent: live, err: urlErr(context.DeadlineExceeded), cause: "timed out"},
		{name: "connection refused", parent: live, err: dial(syscall.ECONNREFUSED), cause: "refused"},
		{name: "connection reset", parent: live, err: dial(syscall.ECONNRESET), cause: "lost"},
		{name: "EOF", parent: live, err: urlErr(io.EOF), cause: "lost"},
		{name: "unexpected EOF", parent: live, err: urlErr(io.ErrUnexpectedEOF), cause: "lost"},
		{name: "http2 connection lost", parent: live, err: urlErr(errors.New("http2: client connection lost")), cause: "lost"},
		{name: "no route", parent: live, err: dial(syscall.EHOSTUNREACH), cause: "unreachable"},
		{name: "DNS", parent: live, err: urlErr(&net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "upstream"}}), cause: "unreachable"},

		{name: "agent stopping: deadline", parent: stopped, err: urlErr(context.DeadlineExceeded)},
		{name: "agent stopping: 429", parent: stopped, err: apierrors.NewTooManyRequests("x", 0)},
		{name: "canceled", parent: live, err: urlErr(context.Canceled)},
		{name: "not found", parent: live, err: apierrors.NewNotFound(contentapi.GroupResource, name)},
		{name: "forbidden", parent: live, err: apierrors.NewForbidden(contentapi.GroupResource, name, errors.New("no grant"))},
		{name: "unauthorized", parent: live, err: apierrors.NewUnauthorized("token expired")},
		{name: "internal error", parent: live, err: apierrors.NewInternalError(errors.New("bug"))},
		{name: "bad request", parent: live, err: apierrors.NewBadRequest("bad")},
		{name: "decoding", parent: live, err: errors.New("decoding BundleContent: invalid character")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cause, ok := TransientContentError(tt.parent, tt.err)
			if ok != (tt.cause != "") {
				t.Fatalf("transient %v (cause %q), want %v", ok, cause, tt.cause != "")
			}
			if ok && !strings.Contains(cause, tt.cause) {
				t.Fatalf("cause %q, want it to mention %q", cause, tt.cause)
			}
		})
	}
}

// The status message names the Content and the cause, and nothing of the
// underlying error (which may carry the API server's address or query).
func TestContentUnavailableMessage(t *testing.T) {
	err := &ContentUnavailableError{ID: "s-abc", Cause: "API server busy: 429 Too Many Requests",
		Err: errors.New(`Get "https://10.0.0.1:6443/apis/x?token=secret": 429`)}
	msg := err.Error()
	for _, want := range []string{"s-abc", "429 Too Many Requests", "retrying"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "secret") || strings.Contains(msg, "10.0.0.1") {
		t.Errorf("message %q carries the underlying error", msg)
	}
	if !apierrors.IsTooManyRequests(fmt.Errorf("x: %w", &ContentUnavailableError{Err: apierrors.NewTooManyRequests("x", 0)})) {
		t.Error("the underlying error is not unwrapped")
	}
}
