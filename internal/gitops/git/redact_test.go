package git

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/transport"
)

func TestDescribeRedactsURLCredentials(t *testing.T) {
	inner := fmt.Errorf("Get \"https://bob:hunter2@git.example.com/x.git/info/refs\": %w", transport.ErrAuthorizationFailed)
	err := describe(context.Background(), inner)
	if strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "https://***@git.example.com/x.git") {
		t.Fatalf("not redacted: %v", err)
	}
	if !errors.Is(err, transport.ErrAuthorizationFailed) || !strings.HasPrefix(err.Error(), "authorization failed") {
		t.Fatalf("lost the cause: %v", err)
	}
	if got := redact("https://bob:pw@h/x"); got != "https://***@h/x" {
		t.Fatalf("redact = %q", got)
	}
}
