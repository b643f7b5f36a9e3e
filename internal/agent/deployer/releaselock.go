package deployer

import (
	"context"
	"sync"
)

// releaseLocks serialize what the Deployer does to each release (by
// releaseKey): deploys, drift corrections and uninstalls. Helm's own lock
// on a release is its pending revision, which the agent holds back
// (releaseStore.holdPending); without this, two BundleDeployments naming
// the same release, deployed at the same moment, would both pass the
// owner check (otherOwner) and both apply. Whoever holds the lock reads
// the owner afresh. The lock of a release nobody waits for is dropped, so
// the map holds only releases in use.
type releaseLocks struct {
	mu    sync.Mutex
	locks map[string]*releaseLock
}

// releaseLock is one release's lock: a token in a one-slot channel, so
// that a waiter can give up with its context.
type releaseLock struct {
	token chan struct{}
	users int
}

// lock takes key's lock, waiting until it is free or ctx ends. The
// returned function releases it.
func (l *releaseLocks) lock(ctx context.Context, key string) (unlock func(), err error) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*releaseLock{}
	}
	rl := l.locks[key]
	if rl == nil {
		rl = &releaseLock{token: make(chan struct{}, 1)}
		l.locks[key] = rl
	}
	rl.users++
	l.mu.Unlock()
	select {
	case rl.token <- struct{}{}:
		return func() {
			<-rl.token
			l.release(key, rl)
		}, nil
	case <-ctx.Done():
		l.release(key, rl)
		return nil, ctx.Err()
	}
}

func (l *releaseLocks) release(key string, rl *releaseLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rl.users--; rl.users == 0 {
		delete(l.locks, key)
	}
}

// lockRelease takes the lock of release ns/name (see releaseLocks).
func (d *Deployer) lockRelease(ctx context.Context, ns, name string) (unlock func(), err error) {
	return d.releaseLocks.lock(ctx, releaseKey(ns, name))
}
