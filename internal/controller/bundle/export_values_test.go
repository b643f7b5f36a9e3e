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

func init() {
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
