package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// retryFor bounds how long the bench retries one call the gateway refuses.
var retryFor = flag.Duration("retry-for", 5*time.Minute, "chain, concurrent, fanout: how long one call the gateway refuses with RESOURCE_EXHAUSTED (its per-tenant rate or in-flight limit) is retried, after the delay the refusal asks for (RetryInfo) or with exponential backoff and jitter, before the bench gives up")

// shed counts the calls the gateway refused (RESOURCE_EXHAUSTED) and the bench retried.
type shed struct {
	starts, waits, reads atomic.Int64
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

// retryDelay is the delay a status's RetryInfo detail asks for, 0 if none.
func retryDelay(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// retryExhausted calls call until it returns anything but RESOURCE_EXHAUSTED, counting each
// refusal in refused. A refusal with a RetryInfo delay is retried after that delay plus up
// to a fifth more (so that the clients the gateway refused at once do not all come back in
// the same instant); one without, after an exponential backoff with jitter. It gives up
// after *retryFor, returning the last refusal.
func retryExhausted[T any](ctx context.Context, refused *atomic.Int64, call func() (T, error)) (T, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 50*time.Millisecond, 5*time.Second
	start := time.Now()
	v, err := backoff.Retry(ctx, func() (T, error) {
		v, err := call()
		if err == nil {
			return v, nil
		}
		st, ok := status.FromError(err)
		if !ok || st.Code() != codes.ResourceExhausted {
			return v, backoff.Permanent(err)
		}
		refused.Add(1)
		if d := retryDelay(st); d > 0 {
			return v, &retryHint{err: err, delay: d + rand.N(d/5+1)}
		}
		return v, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(*retryFor))
	if err != nil && status.Code(err) == codes.ResourceExhausted {
		return v, fmt.Errorf("refused for %s, giving up (--retry-for): %w", time.Since(start).Round(time.Second), err)
	}
	return v, err
}
