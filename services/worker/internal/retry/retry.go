// Package retry runs a worker's call again while its failure is worth another attempt:
// the resultstore restarting, NATS electing a stream leader. One policy for all of them:
// waits growing exponentially from 100 ms to 5 s, each randomised by ±50% so that the
// workers of a pool do not come back in step, within a bound on the whole call.
package retry

import (
	"context"
	"errors"
	"fmt"
	"time"

	cbackoff "github.com/cenkalti/backoff/v5"
)

// Do runs op until it succeeds, fails with an error retry does not accept, bound has
// passed since Do began or ctx ends; notify, when set, hears of each failure before the
// wait for the next attempt. The first attempt is made at once; most calls end with it
// and pay for no backoff. A call that ends with ctx reports op's last failure too.
func Do[T any](ctx context.Context, bound time.Duration, retry func(error) bool, notify cbackoff.Notify, op func() (T, error)) (T, error) {
	// The first attempt is made here, as Retry would make it. A failure worth another
	// attempt is handed to Retry as its first attempt's outcome, with the time the attempt
	// took taken off the bound.
	begun := time.Now()
	first, firstErr := op()
	if firstErr == nil || !retry(firstErr) {
		return first, firstErr
	}
	b := cbackoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.MaxInterval = 5 * time.Second
	b.Multiplier = 2
	b.RandomizationFactor = 0.5
	last := firstErr
	attempted := false
	opts := []cbackoff.RetryOption{cbackoff.WithBackOff(b), cbackoff.WithMaxElapsedTime(max(bound-time.Since(begun), time.Nanosecond))}
	if notify != nil {
		opts = append(opts, cbackoff.WithNotify(notify))
	}
	v, err := cbackoff.Retry(ctx, func() (T, error) {
		if !attempted {
			attempted = true
			return first, firstErr
		}
		v, err := op()
		if err != nil && !retry(err) {
			return v, cbackoff.Permanent(err)
		}
		last = err
		return v, err
	}, opts...)
	if err != nil && last != nil && ctx.Err() != nil && errors.Is(err, context.Cause(ctx)) {
		// Retry reports the end of ctx; what failed is more telling.
		err = fmt.Errorf("%w (after: %w)", last, err)
	}
	return v, err
}
