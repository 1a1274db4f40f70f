package limit

import (
	"container/list"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Defaults of FailuresConfig.
const (
	DefaultFailuresPerMinute = 10
	DefaultFailureBurst      = 20
	DefaultFailuresTracked   = 20000
)

// FailuresConfig sets the throttle of failed attempts; zero fields take the defaults.
type FailuresConfig struct {
	// PerMinute is how many failures a key is forgiven per minute (the bucket's refill).
	PerMinute float64
	// Burst is how many failures a key may have at once before it is throttled.
	Burst int
	// MaxTracked bounds the keys remembered; past it the least recently failed is forgotten.
	MaxTracked int
}

// Failures throttles a kind of attempt that can fail (authentication) by keys such as a
// client address or an API key id: one token bucket per key, of Burst tokens refilled at
// PerMinute a minute, that only failures take tokens from. A key whose bucket is empty is
// throttled until it refills a token; successes cost nothing. The table of keys is an LRU
// of at most MaxTracked entries, so a flood of distinct keys cannot grow it. It is safe for
// concurrent use.
type Failures struct {
	rate  rate.Limit
	burst int
	max   int
	now   func() time.Time

	mu   sync.Mutex
	keys map[string]*list.Element // of *failing
	lru  list.List                // most recently failed at the front
}

type failing struct {
	key    string
	bucket *rate.Limiter
}

// NewFailures returns a Failures with cfg's limits (defaults for zero fields).
func NewFailures(cfg FailuresConfig) *Failures {
	if cfg.PerMinute <= 0 {
		cfg.PerMinute = DefaultFailuresPerMinute
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultFailureBurst
	}
	if cfg.MaxTracked <= 0 {
		cfg.MaxTracked = DefaultFailuresTracked
	}
	return &Failures{rate: rate.Limit(cfg.PerMinute / 60), burst: cfg.Burst, max: cfg.MaxTracked, now: time.Now, keys: map[string]*list.Element{}}
}

// Throttled reports whether any of keys ("" entries are ignored) has no failure left: the
// first such key and how long until it may try again. It charges nothing.
func (f *Failures) Throttled(keys ...string) (key string, retryAfter time.Duration, throttled bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	for _, k := range keys {
		e, ok := f.keys[k]
		if k == "" || !ok {
			continue
		}
		tokens := e.Value.(*failing).bucket.TokensAt(now)
		if tokens >= 1 {
			continue
		}
		d := time.Duration((1 - tokens) / float64(f.rate) * float64(time.Second))
		if !throttled || d > retryAfter {
			key, retryAfter, throttled = k, max(d, time.Millisecond), true
		}
	}
	return key, retryAfter, throttled
}

// Fail charges one failure to each of keys ("" entries are ignored).
func (f *Failures) Fail(keys ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	for _, k := range keys {
		if k == "" {
			continue
		}
		e, ok := f.keys[k]
		if ok {
			f.lru.MoveToFront(e)
		} else {
			if f.lru.Len() >= f.max {
				oldest := f.lru.Back()
				delete(f.keys, f.lru.Remove(oldest).(*failing).key)
			}
			e = f.lru.PushFront(&failing{key: k, bucket: rate.NewLimiter(f.rate, f.burst)})
			f.keys[k] = e
		}
		e.Value.(*failing).bucket.AllowN(now, 1)
	}
}

// Tracked returns how many keys are remembered.
func (f *Failures) Tracked() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lru.Len()
}

// PerMinute returns the failures a key is forgiven per minute.
func (f *Failures) PerMinute() float64 { return float64(f.rate) * 60 }

// Burst returns the failures a key may have at once.
func (f *Failures) Burst() int { return f.burst }
