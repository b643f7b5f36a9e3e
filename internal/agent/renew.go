package agent

import (
	"context"
	"errors"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fleetgo/fleet/internal/agent/register"
)

// renewer renews the cluster credential when a fraction of its lifetime
// has passed, so that an agent that is online never runs out; one that was
// offline past expiry has to be registered again.
type renewer struct {
	down      client.Client
	ns        string
	cred      *register.Credential
	fraction  float64
	retryMin  time.Duration
	retryMax  time.Duration
	onRefused func(error)
}

func (r *renewer) NeedLeaderElection() bool { return false }

func (r *renewer) Start(ctx context.Context) error {
	l := log.FromContext(ctx).WithName("renew")
	info, err := register.ParseToken(r.cred.Token())
	if err != nil {
		l.Info("credential expiry unknown; not renewing", "reason", err.Error())
		return nil
	}
	renewAt := func(i register.TokenInfo) time.Time {
		return i.IssuedAt.Add(time.Duration(float64(i.Expires.Sub(i.IssuedAt)) * r.fraction))
	}
	next := renewAt(info)
	retry := r.retryMin
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(max(time.Until(next), 0)):
		}
		renewed, err := register.Renew(ctx, r.down, r.ns, r.cred)
		if err == nil {
			l.Info("credential renewed", "expires", renewed.Expires)
			info, retry = renewed, r.retryMin
			next = renewAt(info)
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, register.ErrRefused) && time.Now().After(info.Expires) {
			r.onRefused(err)
			return nil
		}
		l.Info("renewing credential failed, retrying", "error", err.Error(), "in", retry.String())
		next = time.Now().Add(register.Jitter(retry))
		retry = min(retry*2, r.retryMax)
	}
}
