package domain

import (
	"fmt"

	"google.golang.org/protobuf/types/known/durationpb"
)

// CheckDuration refuses a request's duration field (a wait or a timeout) that is malformed
// or negative, naming the field; an unset one passes. Callers answer the error with
// InvalidArgument.
func CheckDuration(field string, d *durationpb.Duration) error {
	if d != nil && (!d.IsValid() || d.AsDuration() < 0) {
		return fmt.Errorf("%s: must be a non-negative duration", field)
	}
	return nil
}
