package git

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestUnencodedPasswordIsNotShown: a password with an unencoded '/', '?'
// or '#' (AWS CodeCommit passwords are base64) makes the URL unparsable;
// the error names neither the password nor any part of it.
func TestUnencodedPasswordIsNotShown(t *testing.T) {
	for _, tc := range []struct{ url, secret string }{
		{"https://codecommit-user:AbC/dEf+gh1@git-codecommit.example.com/v1/repos/app", "AbC"},
		{"https://user:Zq9?Wx7@host.example.com/r.git", "Zq9"},
		{"https://user:Zq9#Wx7@host.example.com/r.git", "Zq9"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := LatestCommit(ctx, Remote{URL: tc.url})
		cancel()
		if err == nil {
			t.Fatalf("LatestCommit(%s): no error", redact(tc.url))
		}
		if strings.Contains(err.Error(), tc.secret) {
			t.Errorf("LatestCommit: error quotes the password: %v", err)
		}
		if !strings.Contains(err.Error(), "percent-encoded") {
			t.Errorf("LatestCommit: error does not say what is wrong: %v", err)
		}
	}
}
