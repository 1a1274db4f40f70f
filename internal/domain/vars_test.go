package domain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// TestVarsUpdatedFoldsIntoTheState folds a log with vars.updated events: a set keeps a
// variable's first create time, unset and clear drop variables, and the render scope binds
// the values as vars (an empty mapping without any, so {{ vars.x }} is undefined).
func TestVarsUpdatedFoldsIntoTheState(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) *timestamppb.Timestamp { return timestamppb.New(t0.Add(time.Duration(s) * time.Second)) }
	st := NewState("e")
	seq := int64(0)
	apply := func(typ, payload string) {
		t.Helper()
		seq++
		require.NoError(t, Apply(st, &eventv1.Event{Seq: seq, Type: typ, PayloadJson: []byte(payload), CommitTime: at(int(seq))}))
	}
	apply(EventPlaybookStarted, `{"path":"p","workload":{"vars":"shadowed"}}`)
	require.Empty(t, st.GetVars(), "a log without vars.updated folds as before")
	require.Nil(t, VarsJSON(st))
	require.Equal(t, map[string]any{}, (&Scope{}).Vars()["vars"])

	apply(EventVarsUpdated, `{"set":{"a":{"value":1,"type":"user_defined"},"b":{"value":{"x":[true]},"type":"computed","source_step":"s1"}}}`)
	require.Len(t, st.GetVars(), 2)
	require.JSONEq(t, `{"x":[true]}`, string(st.GetVars()["b"].GetValueJson()))
	require.Equal(t, "computed", st.GetVars()["b"].GetType())
	require.Equal(t, "s1", st.GetVars()["b"].GetSourceStep())
	require.Equal(t, at(2).AsTime(), st.GetVars()["a"].GetCreateTime().AsTime())

	apply(EventVarsUpdated, `{"set":{"a":{"value":"two"}}}`)
	a := st.GetVars()["a"]
	require.JSONEq(t, `"two"`, string(a.GetValueJson()))
	require.Equal(t, at(2).AsTime(), a.GetCreateTime().AsTime(), "an update keeps the first create time")
	require.Equal(t, at(3).AsTime(), a.GetUpdateTime().AsTime())
	require.Equal(t, `{"a":"two","b":{"x":[true]}}`, string(VarsJSON(st)), "sorted keys: equal states, equal bytes")

	sc := &Scope{Workload: map[string]any{"vars": "shadowed"}, Variables: VarsJSON(st)}
	require.Equal(t, map[string]any{"a": "two", "b": map[string]any{"x": []any{true}}}, sc.Vars()["vars"], "vars is a reserved name")

	apply(EventVarsUpdated, `{"unset":["a"]}`)
	require.NotContains(t, st.GetVars(), "a")
	require.Contains(t, st.GetVars(), "b")
	apply(EventVarsUpdated, `{"clear":true,"set":{"c":{"value":null}}}`)
	require.Equal(t, []string{"c"}, keys(st.GetVars()), "clear comes before set")
	require.JSONEq(t, `null`, string(st.GetVars()["c"].GetValueJson()))

	seq++
	require.Error(t, Apply(st, &eventv1.Event{Seq: seq, Type: EventVarsUpdated, PayloadJson: []byte(`{"set":[1]}`)}), "a malformed payload is an error, not a silent skip")
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestCheckVarName(t *testing.T) {
	for _, ok := range []string{"a", "_", "A_1", "token", string(make([]byte, 0)) + "x9"} {
		require.NoError(t, CheckVarName(ok), ok)
	}
	long := make([]byte, MaxVarName+1)
	for i := range long {
		long[i] = 'a'
	}
	for _, bad := range []string{"", "1a", "a-b", "a.b", "a b", "é", string(long)} {
		require.ErrorIs(t, CheckVarName(bad), ErrVarName, bad)
	}
}
