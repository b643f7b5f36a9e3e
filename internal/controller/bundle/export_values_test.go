package bundle

import (
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// valuesRetries records, per Bundle, the delays after which a Bundle
// waiting for its values was to be looked at again, in order.
var valuesRetries sync.Map // client.ObjectKey → *retryLog

type retryLog struct {
	mu     sync.Mutex
	delays []time.Duration
}

// valuesClocks holds, per Bundle, the time its values retry timer is
// told it is (a *time.Time), so that a test decides which passes are the
// timer's; Bundles not in it see the real time.
var valuesClocks sync.Map // client.ObjectKey → *time.Time

// SetValuesClock stops the values retry clock of the Bundle key at now.
func SetValuesClock(key client.ObjectKey, now time.Time) {
	valuesClocks.Store(key, &now)
}

func init() {
	valuesNow = func(key client.ObjectKey) time.Time {
		if v, ok := valuesClocks.Load(key); ok {
			return *v.(*time.Time)
		}
		return time.Now()
	}
	onValuesRetry = func(key client.ObjectKey, d time.Duration) {
		l, _ := valuesRetries.LoadOrStore(key, &retryLog{})
		rl := l.(*retryLog)
		rl.mu.Lock()
		defer rl.mu.Unlock()
		rl.delays = append(rl.delays, d)
	}
}

// ValuesRetries is the delays (before jitter) the manager set, pass after
// pass, for looking again at the Bundle key while it waited for its values.
func ValuesRetries(key client.ObjectKey) []time.Duration {
	l, ok := valuesRetries.Load(key)
	if !ok {
		return nil
	}
	rl := l.(*retryLog)
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return append([]time.Duration(nil), rl.delays...)
}
