package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var (
	// retryFor bounds how long the bench retries one call the gateway refuses.
	retryFor = flag.Duration("retry-for", 5*time.Minute, "chain, concurrent, fanout, longloop: how long one call the gateway refuses (RESOURCE_EXHAUSTED: its per-tenant rate or in-flight limit; UNAVAILABLE) is retried, after the delay the refusal asks for (RetryInfo, or \"retry after <d>\" in its message) plus jitter, or with exponential backoff and jitter, before the bench gives up")
	// retryAttempts bounds how many times the bench calls once before it gives up.
	retryAttempts = flag.Uint("retry-attempts", 500, "chain, concurrent, fanout, longloop: at most this many attempts of one call the gateway refuses (0: bounded by --retry-for alone)")
)

// shed counts the calls the gateway refused and the bench retried: starts, waits and log
// reads refused with RESOURCE_EXHAUSTED, and calls of any of them that found the gateway
// UNAVAILABLE.
type shed struct {
	starts, waits, reads atomic.Int64
	unavailable          atomic.Int64
}

// retryHint is a refusal that carries the server's retry delay: the backoff waits that long
// (errors.As finds a *backoff.RetryAfterError) and gives back the refusal itself if it
// stops.
type retryHint struct {
	err   error
	delay time.Duration
}

func (h *retryHint) Error() string { return h.err.Error() }
func (h *retryHint) Unwrap() error { return h.err }

// As makes a retryHint a *backoff.RetryAfterError for backoff.Retry.
func (h *retryHint) As(target any) bool {
	t, ok := target.(**backoff.RetryAfterError)
	if ok {
		*t = &backoff.RetryAfterError{Duration: h.delay}
	}
	return ok
}

// retryAfterText is how the gateway's refusals spell their delay in the message
// ("tenant default: 256 calls in flight exceeded; retry after 1s"), for a status that
// lost its RetryInfo detail on the way (a proxy that keeps only code and message).
const retryAfterText = "retry after "

// retryDelay is the delay a status asks for: its RetryInfo detail's, else the duration
// after "retry after " in its message; 0 if neither.
func retryDelay(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return max(0, ri.GetRetryDelay().AsDuration())
		}
	}
	msg := st.Message()
	i := strings.LastIndex(msg, retryAfterText)
	if i < 0 {
		return 0
	}
	word, _, _ := strings.Cut(msg[i+len(retryAfterText):], " ")
	d, err := time.ParseDuration(strings.TrimRight(word, ".,;)"))
	if err != nil || d < 0 {
		return 0
	}
	return d
}

// retryable reports whether a call that failed with code c is retried: the gateway shed it
// (RESOURCE_EXHAUSTED) or could not serve it now (UNAVAILABLE: restarting, a backend not
// ready). Anything else is the call's answer.
func retryable(c codes.Code) bool {
	return c == codes.ResourceExhausted || c == codes.Unavailable
}

// jitter is d plus up to a fifth more at random, so that the clients a server refused at
// once do not all come back in the same instant.
func jitter(d time.Duration) time.Duration { return d + rand.N(d/5+1) }

// retryExhausted calls call until it returns anything but RESOURCE_EXHAUSTED or
// UNAVAILABLE, counting each RESOURCE_EXHAUSTED in refused and each UNAVAILABLE in
// unavailable. A refusal that names a delay (retryDelay) is retried after that delay plus
// jitter; one without, after an exponential backoff with jitter (backoff/v5, 50 ms
// doubling to 5 s, ±50%). It gives up after *retryFor or *retryAttempts attempts,
// returning the last refusal.
func retryExhausted[T any](ctx context.Context, refused, unavailable *atomic.Int64, call func() (T, error)) (T, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 50*time.Millisecond, 5*time.Second
	start := time.Now()
	var attempts int
	v, err := backoff.Retry(ctx, func() (T, error) {
		attempts++
		v, err := call()
		if err == nil {
			return v, nil
		}
		st, ok := status.FromError(err)
		if !ok || !retryable(st.Code()) {
			return v, backoff.Permanent(err)
		}
		if st.Code() == codes.ResourceExhausted {
			refused.Add(1)
		} else {
			unavailable.Add(1)
		}
		if d := retryDelay(st); d > 0 {
			return v, &retryHint{err: err, delay: jitter(d)}
		}
		return v, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(*retryFor), backoff.WithMaxTries(*retryAttempts))
	if err != nil && retryable(status.Code(err)) {
		return v, fmt.Errorf("refused %d times over %s, giving up (--retry-for %s, --retry-attempts %d): %w",
			attempts, time.Since(start).Round(time.Millisecond), *retryFor, *retryAttempts, err)
	}
	return v, err
}
