package decide

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/internal/playbook/template"
)

// A command carries the keychain declarations its step's templates reference, and only
// those: names, kinds and templates, for the worker to resolve; a step that reads none
// carries nothing.
func TestCommandCarriesTheStepsKeychainDeclarations(t *testing.T) {
	pb, err := playbook.Parse([]byte(`
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: kc, path: t/kc}
keychain:
  - {name: api, kind: credential, auth: svc_api}
  - {name: unused, kind: credential}
workflow:
  - step: start
    tool: {kind: http, url: "https://example.com", headers: {X-Key: "{{ keychain.api.key }}"}}
    next: [{step: end}]
  - step: end
    tool: {kind: noop}
`))
	require.NoError(t, err)
	c := Compile(pb, "t/kc", 1, template.NewRenderer())
	st := domain.NewState("exec-1")
	started := &eventv1.Event{EventId: domain.EventID("exec-1", domain.EventPlaybookStarted), ExecutionId: "exec-1", Tenant: "t", Type: domain.EventPlaybookStarted, Seq: 1,
		PayloadJson: []byte(`{"path":"t/kc","version":1}`)}
	require.NoError(t, domain.Apply(st, started))
	evs, err := Decide(c, st)
	require.NoError(t, err)
	var cmd *eventv1.Command
	for _, ev := range evs {
		if ev.GetType() == domain.EventCommandIssued {
			cmd = ev.GetCommand()
		}
	}
	require.NotNil(t, cmd)
	var decls []map[string]any
	require.NoError(t, json.Unmarshal(cmd.GetKeychainJson(), &decls))
	require.Equal(t, []map[string]any{{"name": "api", "kind": "credential", "auth": "svc_api"}}, decls)
	require.Nil(t, pb.Step("end").Keychain)
}
