package scrub

import "context"

// ctxKey carries the running command's scrubber in a context.
type ctxKey struct{}

// NewContext returns ctx carrying sc, the scrubber of the command ctx runs.
func NewContext(ctx context.Context, sc *Scrubber) context.Context {
	return context.WithValue(ctx, ctxKey{}, sc)
}

// FromContext returns the scrubber of the command ctx runs, or nil (which scrubs nothing).
func FromContext(ctx context.Context) *Scrubber {
	sc, _ := ctx.Value(ctxKey{}).(*Scrubber)
	return sc
}

// Register adds a secret value to the scrubber of the command ctx runs: the tools that
// fetch secrets (secrets, nats, keychain) register every value they fetch through it.
func Register(ctx context.Context, v string) { FromContext(ctx).AddSecret(v) }
