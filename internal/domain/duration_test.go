package domain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestCheckDurationRefusesNegativeAndMalformedNamingTheField(t *testing.T) {
	require.NoError(t, CheckDuration("wait", nil))
	require.NoError(t, CheckDuration("wait", durationpb.New(0)))
	require.NoError(t, CheckDuration("wait", durationpb.New(time.Minute)))
	require.EqualError(t, CheckDuration("wait", durationpb.New(-time.Second)), "wait: must be a non-negative duration")
	require.EqualError(t, CheckDuration("timeout", &durationpb.Duration{Seconds: 1, Nanos: -1}), "timeout: must be a non-negative duration")
}
