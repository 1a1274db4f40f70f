// Package limit holds the gateway's per-tenant limits: a token bucket of requests per second
// (golang.org/x/time/rate), a cap on calls in flight and a cap on waiting calls for each
// tenant, so that one tenant flooding the gateway is refused while the others are served.
// A waiting call (a wait for an execution's end, a start that waits for it, a watch that
// follows an execution) holds no work while it waits, only a goroutine and a subscription,
// and lasts as long as the execution: it takes a slot of the waits cap instead of one of
// calls in flight, so the clients that wait on their runs do not cap how many runs a
// tenant has going at once at the calls in flight, and a long wait never holds a slot a
// short call needs. The table of tenants is
// bounded: past its size the least recently used idle tenant is forgotten. Failures
// throttles failed authentication by client address and API key id (failures.go).
package limit

import (
	"container/list"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Defaults of Config. The rate is a Temporal frontend's default per namespace (2,400 calls
// per second) with a burst of twice that: enough that one tenant's starts and waits are
// paced by the engine rather than by the gateway on a small cluster, while a runaway
// client is still refused long before it saturates the mesh.
const (
	DefaultRPS        = 2400
	DefaultBurst      = 4800
	DefaultInFlight   = 256
	DefaultWaits      = 4096
	DefaultMaxTenants = 10000
)

// inFlightRetry is the delay suggested to a call refused for calls in flight or waits:
// there is no telling when one ends.
const inFlightRetry = time.Second

// Config sets the limits, each per tenant; zero fields take the defaults.
type Config struct {
	// RPS is the sustained rate of calls per second.
	RPS float64
	// Burst is how many calls may come at once above the rate.
	Burst int
	// InFlight is how many calls may run at once, streams included, waiting calls not.
	InFlight int
	// Waits is how many waiting calls (Acquire's wait) may be held at once.
	Waits int
	// MaxTenants bounds the tenants tracked at once.
	MaxTenants int
}

// Refusal reasons of Exceeded.
const (
	// Rate: the tenant's token bucket is empty.
	Rate = "rate"
	// InFlight: the tenant has as many calls in flight as it may.
	InFlight = "in_flight"
	// Waits: the tenant has as many waiting calls as it may.
	Waits = "waits"
	// Tenants: the table of tenants is full and none of them is idle.
	Tenants = "tenants"
)

// Exceeded refuses a call past a limit.
type Exceeded struct {
	// Tenant whose call is refused.
	Tenant string
	// Reason is Rate, InFlight, Waits or Tenants.
	Reason string
	// Limit describes the limit that refused the call, for the caller.
	Limit string
	// RetryAfter is when a retry may succeed.
	RetryAfter time.Duration
}

// Error implements error.
func (e *Exceeded) Error() string {
	return fmt.Sprintf("tenant %s: %s exceeded; retry after %s", e.Tenant, e.Limit, e.RetryAfter.Round(time.Millisecond))
}

// Limiter applies the limits. It is safe for concurrent use.
type Limiter struct {
	rps        rate.Limit
	burst      int
	inFlight   int
	waits      int
	maxTenants int
	now        func() time.Time

	mu      sync.Mutex
	tenants map[string]*tenant
	// idle holds the tenants with no call in flight or waiting, the least recently used at
	// the back:
	// only they may be forgotten. A tenant idle for burst/rps has a full bucket, so
	// forgetting it loses nothing.
	idle list.List
}

type tenant struct {
	name     string
	bucket   *rate.Limiter
	inFlight int
	waits    int
	idle     *list.Element // in Limiter.idle while inFlight and waits are zero
	// retryAt is the latest retry time a refusal for the rate handed out (retryAfter).
	retryAt time.Time
}

// New returns a Limiter with cfg's limits (defaults for zero fields).
func New(cfg Config) *Limiter {
	if cfg.RPS <= 0 {
		cfg.RPS = DefaultRPS
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.InFlight <= 0 {
		cfg.InFlight = DefaultInFlight
	}
	if cfg.Waits <= 0 {
		cfg.Waits = DefaultWaits
	}
	if cfg.MaxTenants <= 0 {
		cfg.MaxTenants = DefaultMaxTenants
	}
	return &Limiter{rps: rate.Limit(cfg.RPS), burst: cfg.Burst, inFlight: cfg.InFlight, waits: cfg.Waits, maxTenants: cfg.MaxTenants, now: time.Now, tenants: map[string]*tenant{}}
}

// Acquire admits a call of tenant, or refuses it with an *Exceeded. A call that waits
// (wait) takes a slot of the tenant's waits, any other one of its calls in flight; both pay
// the rate. An admitted call must call release when it ends (further calls of release do
// nothing).
func (l *Limiter) Acquire(name string, wait bool) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tenants[name]
	if t == nil {
		if len(l.tenants) >= l.maxTenants {
			oldest := l.idle.Back()
			if oldest == nil {
				return nil, &Exceeded{Tenant: name, Reason: Tenants, Limit: fmt.Sprintf("the gateway's limit of %d busy tenants", l.maxTenants), RetryAfter: inFlightRetry}
			}
			gone := l.idle.Remove(oldest).(*tenant)
			delete(l.tenants, gone.name)
		}
		t = &tenant{name: name, bucket: rate.NewLimiter(l.rps, l.burst)}
		t.idle = l.idle.PushFront(t)
		l.tenants[name] = t
	}
	held, most := &t.inFlight, l.inFlight
	if wait {
		held, most = &t.waits, l.waits
	}
	if *held >= most {
		if wait {
			return nil, &Exceeded{Tenant: name, Reason: Waits, Limit: fmt.Sprintf("the limit of %d waiting calls", l.waits), RetryAfter: inFlightRetry}
		}
		return nil, &Exceeded{Tenant: name, Reason: InFlight, Limit: fmt.Sprintf("the limit of %d calls in flight", l.inFlight), RetryAfter: inFlightRetry}
	}
	now := l.now()
	r := t.bucket.ReserveN(now, 1)
	if d := r.DelayFrom(now); !r.OK() || d > 0 {
		r.CancelAt(now)
		return nil, &Exceeded{Tenant: name, Reason: Rate, Limit: fmt.Sprintf("the rate limit of %g calls/s (burst %d)", float64(l.rps), l.burst), RetryAfter: l.retryAfter(t, now, d)}
	}
	*held++
	if t.idle != nil {
		l.idle.Remove(t.idle)
		t.idle = nil
	}
	var once sync.Once
	return func() { once.Do(func() { l.release(t, held) }) }, nil
}

// retryAfter is the delay a call of t refused for the rate at now is asked to wait, d being
// when the bucket has its next token. Successive refusals are handed successive tokens,
// one every 1/rps after the last retry time handed out, rather than all the next one: told
// the same delay, a crowd of refused callers comes back at once, one of them gets the
// token and the rest are refused again, so the gateway refuses (and the callers send) a
// call per caller for every token. Spread out, each caller is refused about once.
func (l *Limiter) retryAfter(t *tenant, now time.Time, d time.Duration) time.Duration {
	at := now.Add(max(d, time.Millisecond))
	if next := t.retryAt.Add(time.Duration(float64(time.Second) / float64(l.rps))); next.After(at) {
		at = next
	}
	t.retryAt = at
	return at.Sub(now)
}

// release gives back the slot held counts (t's calls in flight or waits).
func (l *Limiter) release(t *tenant, held *int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*held--
	if t.inFlight == 0 && t.waits == 0 {
		t.idle = l.idle.PushFront(t)
	}
}

// Tenants returns how many tenants are tracked.
func (l *Limiter) Tenants() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.tenants)
}
