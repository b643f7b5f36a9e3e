package bundlereader

import (
	"errors"
	"fmt"
	"net/http"

	"oras.land/oras-go/v2/registry/remote/errcode"
)

// HTTPStatusError is a chart repository or chart URL answering a GET (an
// index.yaml, a chart archive, a dependency's) with a status other than
// 200 OK. It is a type so that callers can tell a server that fails for now
// (Temporary: retry) from one refusing what was asked (a wrong name or
// credentials: a human must change the input), which the message alone
// would only tell by parsing.
type HTTPStatusError struct {
	// URL is the requested URL with its user information masked (redact):
	// the error ends up in statuses, events and logs.
	URL string
	// StatusCode is the answer's code, e.g. 503.
	StatusCode int
	// Status is the answer's status line, e.g. "503 Service Unavailable".
	Status string
}

func (e *HTTPStatusError) Error() string {
	if e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden {
		return fmt.Sprintf("GET %s: %s (check the Helm credentials)", e.URL, e.Status)
	}
	return fmt.Sprintf("GET %s: %s", e.URL, e.Status)
}

// Temporary reports whether the same request may succeed later without a
// change of input: see temporaryStatus.
func (e *HTTPStatusError) Temporary() bool { return temporaryStatus(e.StatusCode) }

// temporaryStatus says whether an HTTP status is the server's failure of
// the moment rather than a refusal of the request: any 5xx (overloaded,
// restarting, a proxy that lost its backend; a server misconfigured for
// good is its owner's to fix, not the GitRepo's author's), 429 Too Many
// Requests and 408 Request Timeout. 401, 403 and 404 are not: the
// credentials or the chart's name have to change.
func temporaryStatus(code int) bool {
	return (code >= 500 && code <= 599) || code == http.StatusTooManyRequests || code == http.StatusRequestTimeout
}

// IsTemporary reports whether err, through any wrapping, is a chart
// repository or OCI registry answering with a status that a retry may fix
// (temporaryStatus): an *HTTPStatusError of the reader's own requests, or
// the *errcode.ErrorResponse that Helm's registry client (oras) returns
// for a registry's answer. Network errors (refused connections, timeouts)
// are not covered: callers tell those apart with the standard library's
// types.
func IsTemporary(err error) bool {
	var status *HTTPStatusError
	if errors.As(err, &status) {
		return status.Temporary()
	}
	var registry *errcode.ErrorResponse
	if errors.As(err, &registry) {
		return temporaryStatus(registry.StatusCode)
	}
	return false
}

// IsInvalidInput reports the reader's typed input errors: a file that does
// not parse (ParseError), a HelmOp spec it cannot use (ErrInvalidSpec) or
// a limit exceeded (ErrLimit). Reading the same input again fails the
// same way, so callers stop rather than retry. Other input errors (a
// missing path, a chart repository answering 404) are not typed.
func IsInvalidInput(err error) bool {
	var parse *ParseError
	return errors.As(err, &parse) || errors.Is(err, ErrInvalidSpec) || errors.Is(err, ErrLimit)
}
