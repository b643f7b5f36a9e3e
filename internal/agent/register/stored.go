package register

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// useStored decides about the stored credential. done means Get returns
// cred and err; otherwise Get registers with the bootstrap Secret:
//   - the manager accepts it: it is kept, unless a bootstrap Secret next to
//     it names another API server, CA or workspace (followBootstrap);
//   - the manager refuses it (401/403): a new registration;
//   - the manager cannot be reached with it (no HTTP answer: a network or
//     TLS error) and a bootstrap Secret exists: a new registration with
//     that, as Rancher Fleet's agent does. The manager may have moved or
//     rotated its CA, and the bootstrap Secret a re-import or `helm
//     upgrade` wrote is then the only way to it. An answer of any kind
//     (such as 500 or 429) is not that: the caller retries.
func useStored(ctx context.Context, opts Options, stored *Credential) (*Credential, bool, error) {
	l := log.FromContext(ctx)
	err := Check(ctx, stored)
	switch {
	case err == nil:
		return followBootstrap(ctx, opts, stored), true, nil
	case errors.Is(err, ErrRefused):
		l.Info("stored credential refused by the manager; looking for a new bootstrap secret")
		return nil, false, nil
	case unreachable(ctx, err) && bootstrapPresent(ctx, opts):
		l.Info("the manager cannot be reached with the stored credential; registering with the bootstrap secret",
			"apiServerURL", stored.Host, "error", err.Error())
		return nil, false, nil
	}
	return nil, true, fmt.Errorf("checking stored credential: %w", err)
}

// unreachable tells a request that got no HTTP answer (connection, DNS or
// TLS failure) from one the API server answered, and from the end of ctx.
func unreachable(ctx context.Context, err error) bool {
	var status apierrors.APIStatus
	return err != nil && ctx.Err() == nil && !errors.As(err, &status)
}

// bootstrapPresent reports whether a usable bootstrap Secret exists.
func bootstrapPresent(ctx context.Context, opts Options) bool {
	s, _, err := readBootstrap(ctx, opts)
	return err == nil && s != nil
}

// followBootstrap returns the credential to use next to stored, which the
// manager accepts. A bootstrap Secret that repeats what stored was
// registered with (a re-import or `helm upgrade` that changed nothing of
// it) is deleted unused: its registration token must not stay readable in
// the cluster. One that names another API server, CA or workspace is
// what the manager wants now (it moved, rotated its CA, or the cluster
// was imported elsewhere): the agent registers with it, replacing stored,
// before the old endpoint goes away and leaves it nothing to go back to.
// If that registration fails, stored is kept, and so is the bootstrap
// Secret for the next start. Nothing here fails Get: stored works.
func followBootstrap(ctx context.Context, opts Options, stored *Credential) *Credential {
	l := log.FromContext(ctx)
	secret, b, err := readBootstrap(ctx, opts)
	if err != nil {
		l.Info("leaving the bootstrap secret next to the accepted stored credential alone: it cannot be read", "error", err.Error())
		return stored
	}
	if secret == nil {
		return stored
	}
	cfg, err := LoadConfig(ctx, opts.Downstream, opts.Namespace)
	if err != nil {
		l.Info("leaving the bootstrap secret alone: the agent configuration cannot be read", "error", err.Error())
		return stored
	}
	if sameRegistration(stored, b, cfg.AgentTLSMode) {
		forgetBootstrap(ctx, opts, secret)
		return stored
	}
	l.Info("the bootstrap secret names another manager API server, CA or workspace than the stored credential; registering with it",
		"apiServerURL", b.APIServerURL, "storedAPIServerURL", stored.Host, "workspace", b.ClusterNamespace)
	cred, err := registerWith(ctx, opts, secret, b, cfg)
	if err != nil {
		l.Info("could not register with the new bootstrap secret; going on with the stored credential, the next start tries again",
			"error", err.Error())
		return stored
	}
	return cred
}

// sameRegistration reports whether bootstrap b names what stored was
// registered with: the manager's URL, the CA the agent verifies it with
// (TrustedCA) and the workspace. The token is not compared: each import
// or chart install carries a new one. A credential stored without a CA
// was registered trusting the system store (mode "system-store"), which
// still verifies the manager since the credential was just accepted; so
// the bootstrap's CA does not matter then, unless mode is now "strict".
func sameRegistration(stored *Credential, b *Bootstrap, tlsMode string) bool {
	if strings.TrimRight(stored.Host, "/") != strings.TrimRight(b.APIServerURL, "/") || stored.ClusterNamespace != b.ClusterNamespace {
		return false
	}
	if len(stored.CA) == 0 && tlsMode != "strict" {
		return true
	}
	return bytes.Equal(bytes.TrimSpace(stored.CA), bytes.TrimSpace(b.APIServerCA))
}

// forgetBootstrap deletes the bootstrap Secret s, found next to a stored
// credential it only repeats. The preconditions spare a Secret written
// or replaced after it was read (it is looked at on the next start). A
// failure is only logged: the agent works with its credential, and its
// next start tries again.
func forgetBootstrap(ctx context.Context, opts Options, s *corev1.Secret) {
	l := log.FromContext(ctx)
	err := opts.Downstream.Delete(ctx, s, client.Preconditions{UID: &s.UID, ResourceVersion: &s.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) {
		l.Info("could not delete the bootstrap secret the stored credential makes unnecessary; retrying on the next start",
			"secret", BootstrapSecretName, "error", err.Error())
		return
	}
	l.Info("deleted the bootstrap secret: the stored credential is accepted and was registered with the same API server, CA and workspace",
		"secret", BootstrapSecretName)
}
