package controller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/bundlereader"
)

// TestReadInputErrors: what a build failure says about the commit, as the
// GitRepo shows it (Stalled for input, Reconciling for an outage).
func TestReadInputErrors(t *testing.T) {
	request := func(err error) error {
		return fmt.Errorf("bundle (root): helm repository http://charts: cannot reach http://charts/index.yaml: %w",
			&url.Error{Op: "Get", URL: "http://charts/index.yaml", Err: err})
	}
	for _, tc := range []struct {
		name  string
		err   error
		input bool
	}{
		{name: "fleet.yaml does not parse", err: fmt.Errorf("bundle a: %w", &bundlereader.ParseError{Path: "a/fleet.yaml", Err: errors.New("bad")}), input: true},
		{name: "over a limit", err: fmt.Errorf("bundle a: %w", bundlereader.ErrLimit), input: true},
		{name: "missing path (untyped)", err: errors.New(`path "does/not/exist" does not exist`), input: true},
		{name: "chart repository answers 401", err: errors.New("GET http://charts/index.yaml: 401 Unauthorized (check the Helm credentials)"), input: true},
		{name: "untrusted certificate", err: request(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), input: true},
		{name: "connection refused", err: request(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), input: false},
		{name: "DNS failure", err: request(&net.DNSError{Err: "no such host", Name: "charts", IsNotFound: true}), input: false},
		{name: "timeout", err: fmt.Errorf("bundle a: %w", context.DeadlineExceeded), input: false},
		{name: "connection closed before the answer", err: request(io.EOF), input: false},
		{name: "chart repository answers 503", err: fmt.Errorf("bundle a: helm repository http://charts: %w",
			&bundlereader.HTTPStatusError{URL: "http://charts/index.yaml", StatusCode: 503, Status: "503 Service Unavailable"}), input: false},
		{name: "chart repository answers 429", err: &bundlereader.HTTPStatusError{URL: "http://charts/index.yaml", StatusCode: 429, Status: "429 Too Many Requests"}, input: false},
		{name: "chart repository answers 404 (typed)", err: &bundlereader.HTTPStatusError{URL: "http://charts/x.tgz", StatusCode: 404, Status: "404 Not Found"}, input: true},
	} {
		if got := isReadInputError(tc.err); got != tc.input {
			t.Errorf("%s: input %v, want %v (%v)", tc.name, got, tc.input, tc.err)
		}
	}
}

// TestRejectedByAPIServer: a Bundle the API server refuses as invalid or
// malformed is bad input; a conflict or an unavailable server is not.
func TestRejectedByAPIServer(t *testing.T) {
	gk := schema.GroupKind{Group: "fleet.cattle.io", Kind: "Bundle"}
	invalid := apierrors.NewInvalid(gk, "app", field.ErrorList{field.Invalid(field.NewPath("spec", "rolloutStrategy", "maxUnavailable"), "150%", "bad")})
	gr := schema.GroupResource{Group: "fleet.cattle.io", Resource: "bundles"}
	for _, tc := range []struct {
		name     string
		err      error
		rejected bool
	}{
		{name: "invalid", err: fmt.Errorf("bundle ns/app: %w", invalid), rejected: true},
		{name: "bad request", err: fmt.Errorf("bundle ns/app: %w", apierrors.NewBadRequest("malformed")), rejected: true},
		{name: "values that cannot be stored", err: fmt.Errorf("bundle ns/app: %w", apply.ErrInvalidValues), rejected: true},
		{name: "conflict", err: fmt.Errorf("bundle ns/app: %w", apierrors.NewConflict(gr, "app", errors.New("changed"))), rejected: false},
		{name: "unavailable", err: fmt.Errorf("bundle ns/app: %w", apierrors.NewServiceUnavailable("later")), rejected: false},
		{name: "being deleted", err: fmt.Errorf("bundle ns/app: %w", apply.ErrBeingDeleted), rejected: false},
		{name: "name taken by another GitRepo", err: fmt.Errorf("bundle ns/app: %w", apply.ErrOwnedByOther), rejected: true},
	} {
		if got := isRejected(tc.err); got != tc.rejected {
			t.Errorf("%s: rejected %v, want %v", tc.name, got, tc.rejected)
		}
	}
}
