package manager

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleetgo/fleet/internal/registration"
)

// setupRegistration adds the registration controllers (tokens,
// registrations, cluster namespaces, imports, local bootstrap).
func setupRegistration(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	return registration.Setup(ctx, mgr, registrationOptions(opts))
}

// registrationOptions are the registration area's options of opts.
func registrationOptions(opts Options) registration.Options {
	return registration.Options{
		SystemNamespace:             opts.SystemNamespace,
		SystemRegistrationNamespace: opts.SystemRegistrationNamespace,
		APIServerURL:                opts.APIServerURL,
		APIServerURLDefaulted:       opts.apiServerURLDefaulted,
		APIServerCA:                 opts.APIServerCA,
		BootstrapNamespace:          opts.BootstrapNamespace,
		BootstrapClusterLabels:      opts.BootstrapClusterLabels,
		BootstrapRepo:               opts.BootstrapRepo,
		BootstrapAgentNamespace:     opts.BootstrapAgentNamespace,
		LocalAgentDisabled:          opts.BootstrapLocalAgentDisabled,
		AgentCheckinInterval:        opts.AgentCheckinInterval,
		GarbageCollectionInterval:   opts.GarbageCollectionInterval,
		AgentTokenTTL:               opts.AgentTokenTTL,
		AgentImage:                  opts.AgentImage,
		Agent:                       opts.Agent,
		Workers:                     opts.Workers,
		ContentRBAC:                 opts.ContentRBAC(),
		Credentials:                 credentialsOf(opts),

		RegistrationTokenTTLRequired:    opts.RegistrationTokenTTLRequired,
		IgnoreClusterRegistrationLabels: opts.IgnoreClusterRegistrationLabels,
	}
}

// credentialsOf is the content API's credential hand-over, if it is on.
func credentialsOf(opts Options) *registration.Credentials {
	c, _ := opts.ContentAPI.Credentials.(*registration.Credentials)
	return c
}
