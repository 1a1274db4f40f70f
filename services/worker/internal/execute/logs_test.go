package execute

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

func logsExecutor() *Executor {
	ex := testExecutor()
	ex.Log = slog.New(slog.DiscardHandler)
	ex.Tools["python"] = &tools.Python{}
	return ex
}

func pythonCmd(code string) *eventv1.Command {
	cfg, _ := json.Marshal(map[string]any{"code": code})
	return &eventv1.Command{CommandId: "c1", ExecutionId: "x1", Tenant: "t", Step: "say", PlaybookPath: "p", Attempt: 1,
		Tools: []*eventv1.ToolCall{{Kind: "python", ConfigJson: cfg}}}
}

// logsOf returns the logs the outcome event of evs carries, requiring that exactly one
// event (of type typ) carries them.
func logsOf(t *testing.T, evs []*eventv1.Event, typ string) domain.CommandLogs {
	t.Helper()
	var found []domain.CommandLogs
	for _, ev := range evs {
		if l, ok := domain.LogsOf(ev.GetPayloadJson()); ok {
			require.Equal(t, typ, ev.GetType())
			found = append(found, l)
		}
	}
	require.Len(t, found, 1)
	return found[0]
}

func TestStepLogsTravelInTheOutcomeEvent(t *testing.T) {
	t.Parallel()
	ex := logsExecutor()
	evs := ex.Execute(context.Background(), pythonCmd("import sys\nprint('hello from the step')\nprint('a warning', file=sys.stderr)\nresult = {'n': 1}\n"))
	require.Len(t, evs, 1, "one outcome event")
	require.Nil(t, evs[0].GetError())
	logs := logsOf(t, evs, domain.EventCommandCompleted)
	require.Equal(t, []domain.LogText{
		{Tool: "python", Stream: "stdout", Text: "hello from the step\n", Bytes: 20},
		{Tool: "python", Stream: "stderr", Text: "a warning\n", Bytes: 10},
	}, logs.Entries)
	require.JSONEq(t, `{"n":1}`, string(evs[0].GetResultJson()), "the result is unchanged")

	// A failing step keeps what it printed before it failed, on command.failed.
	evs = ex.Execute(context.Background(), pythonCmd("print('about to fail')\nraise ValueError('boom')\n"))
	require.Equal(t, domain.EventCommandFailed, evs[0].GetType())
	logs = logsOf(t, evs, domain.EventCommandFailed)
	require.Equal(t, "about to fail\n", logs.Entries[0].Text)

	// A tool that writes nothing adds no payload.
	evs = ex.Execute(context.Background(), pythonCmd("result = 2\n"))
	for _, ev := range evs {
		require.Empty(t, ev.GetPayloadJson())
	}
}

func TestStepLogsNeverHoldAResolvedSecret(t *testing.T) {
	t.Parallel()
	ex := logsExecutor()
	// The first item resolves a credential (teaching the scrubber), the second prints its
	// password, its base64 and, past the tail bound, a line that cuts it at the tail's start.
	code := "import base64\n" +
		"print('pw is pw-SENTINEL-1')\n" +
		"print(base64.b64encode(b'pw-SENTINEL-1').decode())\n" +
		"print('x' * 200000 + 'pw-SENTINEL-1' + 'y' * (65536 - 6))\n" +
		"print('last line pw-SENTINEL-1')\n"
	cfg, _ := json.Marshal(map[string]any{"code": code})
	cmd := pythonCmd("")
	cmd.Tools = []*eventv1.ToolCall{{Kind: "echo", Label: "login", ConfigJson: []byte(`{}`)}, {Kind: "python", Label: "talk", ConfigJson: cfg}}
	evs := ex.Execute(context.Background(), cmd)
	require.Nil(t, evs[0].GetError(), "%v", evs[0].GetError())
	logs := logsOf(t, evs, domain.EventCommandCompleted)
	// Over the inline budget and with no resultstore: the end of each stream travels inline.
	require.Len(t, logs.Entries, 1)
	e := logs.Entries[0]
	require.Equal(t, "talk", e.Tool)
	require.True(t, e.Truncated)
	require.Greater(t, e.Bytes, int64(265000))
	require.True(t, strings.HasSuffix(e.Text, "last line ***\n"), e.Text[len(e.Text)-40:])
	for _, ev := range evs {
		b, err := proto.Marshal(ev)
		require.NoError(t, err)
		require.NotContains(t, string(b), "SENTINEL")
		require.NotContains(t, string(b), "SENTINEL-1"[2:])
	}
}

func TestStepLogEntriesAreBoundedAndScrubbedAtTheCut(t *testing.T) {
	t.Parallel()
	ex := logsExecutor()
	sc := ex.NewScrubber()
	sc.AddSecret("hunter2-topsecret")
	ctx, l := withLogs(context.Background())
	tl := toolLogOf(ctx, &eventv1.ToolCall{Kind: "shell"})
	// The secret ends 3 bytes into the kept tail: only its end would be left by a plain cut.
	_, _ = tl.Stdout().Write([]byte(strings.Repeat("a", 100000) + "hunter2-topsecret" + strings.Repeat("b", LogTailBytes+logGuardBytes-3)))
	_, _ = tl.Stderr().Write([]byte("small\n"))
	got := l.entries(sc)
	require.Len(t, got, 2)
	require.Equal(t, "shell", got[0].Tool)
	require.True(t, got[0].Truncated)
	require.EqualValues(t, 100000+17+LogTailBytes+logGuardBytes-3, got[0].Bytes)
	require.LessOrEqual(t, len(got[0].Text), LogTailBytes)
	require.Greater(t, len(got[0].Text), LogTailBytes-1024)
	require.Equal(t, strings.Repeat("b", len(got[0].Text)), got[0].Text, "no part of the secret")
	require.Equal(t, domain.LogText{Tool: "shell", Stream: "stderr", Text: "small\n", Bytes: 6}, got[1])

	// Outside Execute there is no collector, and a call's log discards.
	require.Nil(t, toolLogOf(context.Background(), &eventv1.ToolCall{Kind: "python"}))
}
