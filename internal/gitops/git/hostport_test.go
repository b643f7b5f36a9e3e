package git

import (
	"strconv"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/transport"
)

// TestHostPort: the server of each URL form credentials are scoped by,
// with the scheme's default port filled in, and an error (never quoting
// the URL) for anything that names no server beyond doubt. For SSH URLs
// the answer is also the server go-git itself dials, since that is where
// a scoped key ends up.
func TestHostPort(t *testing.T) {
	for _, tc := range []struct{ in, host, port string }{
		{in: "http://charts.example.com/index.yaml", host: "charts.example.com", port: "80"},
		{in: "https://Charts.Example.com/stable", host: "charts.example.com", port: "443"},
		{in: "HTTPS://charts.example.com", host: "charts.example.com", port: "443"},
		{in: "https://charts.example.com:8443/x", host: "charts.example.com", port: "8443"},
		{in: "https://charts.example.com:/x", host: "charts.example.com", port: "443"},
		{in: "https://alice:s3cret@git.example/org/repo.git", host: "git.example", port: "443"},
		{in: "https://github.com@evil.example/org/repo", host: "evil.example", port: "443"},
		{in: "https://[2001:DB8::1]/org/repo", host: "2001:db8::1", port: "443"},
		{in: "http://[::1]:8080/x", host: "::1", port: "8080"},
		{in: "ssh://git@github.com/org/repo.git", host: "github.com", port: "22"},
		{in: "ssh://github.com/org/repo.git", host: "github.com", port: "22"},
		{in: "ssh://git@git.example:2222/org/repo.git", host: "git.example", port: "2222"},
		{in: "ssh://git@[2001:db8::1]:2222/org/repo", host: "2001:db8::1", port: "2222"},
		{in: "ssh://git@[2001:db8::1]/org/repo", host: "2001:db8::1", port: "22"},
		{in: "git@github.com:org/repo.git", host: "github.com", port: "22"},
		{in: "github.com:org/repo.git", host: "github.com", port: "22"},
		{in: "git@GitHub.com:org/repo.git//charts/app", host: "github.com", port: "22"},
		{in: "git@git.example:2222:org/repo.git", host: "git.example", port: "2222"},
		{in: "git.example:2222:org/repo.git", host: "git.example", port: "2222"},
		{in: "git@git.example:022:org/repo.git", host: "git.example", port: "22"},
		{in: "git@github.com:1password/repo.git", host: "github.com", port: "22"},
		{in: "git@git.example:123456:org/repo.git", host: "git.example", port: "22"},
		{in: "git@git.example:2222", host: "git.example", port: "22"},
		{in: "git@evil.example:github.com:org/repo.git", host: "evil.example", port: "22"},
		{in: "oci://registry.example/charts/web", host: "registry.example", port: ""},
		{in: "oci://registry.example:5000/charts/web", host: "registry.example", port: "5000"},
		// A port with leading zeros is the same port (go-git and Go's
		// dialer read it as a number), so it is given without them and
		// compares equal to a scope written host:22 or host:443.
		{in: "ssh://git@git.example:0022/org/repo.git", host: "git.example", port: "22"},
		{in: "ssh://git@git.example:00002222/org/repo.git", host: "git.example", port: "2222"},
		{in: "ssh://git@[2001:db8::1]:022/org/repo", host: "2001:db8::1", port: "22"},
		{in: "https://git.example:0443/org/repo.git", host: "git.example", port: "443"},
		{in: "https://alice:s3cret@git.example:00443/org/repo.git", host: "git.example", port: "443"},
		{in: "http://[::1]:08080/x", host: "::1", port: "8080"},
		{in: "oci://registry.example:05000/charts/web", host: "registry.example", port: "5000"},
		{in: "git@git.example:0022:org/repo.git", host: "git.example", port: "22"},
		{in: "git@git.example:02222:org/repo.git", host: "git.example", port: "2222"},
		{in: "git@git.example:00001:org/repo.git", host: "git.example", port: "1"},
		// Six digits are no port to go-git: a path on port 22.
		{in: "git@git.example:002222:org/repo.git", host: "git.example", port: "22"},
	} {
		host, port, err := HostPort(tc.in)
		if err != nil || host != tc.host || port != tc.port {
			t.Errorf("HostPort(%s) = %q, %q, %v; want %q, %q", tc.in, host, port, err, tc.host, tc.port)
			continue
		}
		if URLScheme(tc.in) != "" && URLScheme(tc.in) != "ssh" {
			continue
		}
		ep, err := transport.NewEndpoint(tc.in)
		if err != nil {
			t.Errorf("go-git cannot read %s: %v", tc.in, err)
			continue
		}
		epPort := ep.Port
		if epPort == 0 {
			epPort = 22
		}
		if h := strings.ToLower(strings.Trim(ep.Host, "[]")); h != host || strconv.Itoa(epPort) != port {
			t.Errorf("%s: go-git dials %s:%d, HostPort says %s:%s", tc.in, ep.Host, ep.Port, host, port)
		}
	}

	for _, in := range []string{
		"", "./charts/app", "/srv/charts", "charts/app", "github.com/org/repo", "dir/x:org/repo",
		"file:///srv/charts", "https:///org/repo", "https://%zz/", "ssh://host:x/repo",
		"https://host:0/x", "https://host:70000/x", "git@host:0:org/repo", "git@host:99999:org/repo",
		"a@b@host:org/repo", "git@[2001:db8::1]:org/repo", "[::1]:org/repo", "host:", "host:\\repo",
		"https://alice:s3%zzcret@git.example/org/repo",
		// Leading zeros do not make a port of 0 or of more than 65535.
		"https://host:0000/x", "ssh://git@host:00000/x", "https://host:065536/x", "git@host:00000:org/repo",
		"git@host:0:org/repo", "ssh://git@host:0x16/x", "https://host:+443/x", "https://host:-443/x",
		"https://alice:s3cret@git.example:070000/org/repo", "ssh://alice:s3cret@git.example:99999999999999999999/org/repo",
	} {
		host, port, err := HostPort(in)
		if err == nil {
			t.Errorf("HostPort(%q) = %q, %q; want an error", in, host, port)
			continue
		}
		if strings.Contains(err.Error(), "s3") || (len(in) > 6 && strings.Contains(err.Error(), in)) {
			t.Errorf("HostPort(%q): the error quotes the URL: %v", in, err)
		}
	}
}

// TestSubmoduleSameHost: a submodule gets its parent's credentials only on
// the parent's server: same scheme (scp-like is ssh), host and port, a
// default port written out or not. Before HostPort, an scp-like
// submodule on another port of the host (git@host:2222:x) got them.
func TestSubmoduleSameHost(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{a: "https://git.example/org/app.git", b: "https://git.example/org/lib.git", want: true},
		{a: "https://git.example/org/app.git", b: "https://GIT.example:443/org/lib.git", want: true},
		{a: "https://git.example/org/app.git", b: "https://git.example:8443/org/lib.git", want: false},
		{a: "https://git.example/org/app.git", b: "http://git.example/org/lib.git", want: false},
		{a: "https://git.example/org/app.git", b: "https://git.example.evil.io/org/lib.git", want: false},
		{a: "https://git.example/org/app.git", b: "https://git.example@evil.example/org/lib.git", want: false},
		{a: "git@git.example:org/app.git", b: "ssh://git@git.example/org/lib.git", want: true},
		{a: "git@git.example:org/app.git", b: "deploy@git.example:22:org/lib.git", want: true},
		{a: "git@git.example:org/app.git", b: "git@git.example:2222:org/lib.git", want: false},
		{a: "git@git.example:2222:org/app.git", b: "git@git.example:org/lib.git", want: false},
		{a: "ssh://git@git.example:2222/org/app.git", b: "git@git.example:2222:org/lib.git", want: true},
		{a: "git@git.example:org/app.git", b: "a@b@git.example:org/lib.git", want: false},
		{a: "git@git.example:org/app.git", b: "https://git.example/org/lib.git", want: false},
		{a: "ssh://git@[2001:db8::1]/org/app.git", b: "ssh://git@[2001:db8::1]:22/org/lib.git", want: true},
		{a: "https://git.example/org/app.git", b: "https://git.example:0443/org/lib.git", want: true},
		{a: "https://git.example:08443/org/app.git", b: "https://git.example:8443/org/lib.git", want: true},
		{a: "https://git.example:0443/org/app.git", b: "https://git.example:04430/org/lib.git", want: false},
		{a: "ssh://git@git.example/org/app.git", b: "ssh://git@git.example:0022/org/lib.git", want: true},
		{a: "git@git.example:org/app.git", b: "git@git.example:0022:org/lib.git", want: true},
		{a: "git@git.example:2222:org/app.git", b: "ssh://git@git.example:02222/org/lib.git", want: true},
		{a: "git@git.example:org/app.git", b: "git@git.example:02222:org/lib.git", want: false},
		{a: "./app", b: "./app", want: false},
	} {
		if got := sameHost(tc.a, tc.b); got != tc.want {
			t.Errorf("sameHost(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
