package playbook

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// A step carries the entries its tools and input read, with the entries those read, in
// document order; a step that reads none carries nothing.
func TestStepKeychain(t *testing.T) {
	t.Parallel()
	pb := mustParse(t, doc(`keychain:
  - {name: creds, kind: postgres_credential, auth: "{{ workload.cred }}"}
  - name: tok
    kind: oauth2
    endpoint: "{{ workload.token_url }}"
    data: {client_id: "{{ keychain.creds.client_id }}", client_secret: "{{ keychain.creds.client_secret }}"}
  - {name: other, kind: credential}
workbook:
  - name: call
    tool: {kind: http, url: "https://x", headers: {X: "{{ keychain.other.key }}"}}
workflow:
  - step: start
    tool: {kind: http, url: "https://x", headers: {Authorization: "Bearer {{ keychain.tok.access_token }}"}}
    next: [{step: wb}]
  - step: wb
    tool: {kind: workbook, name: call}
    next: [{step: plain}]
  - step: plain
    tool: {kind: noop}
`))
	var got []map[string]any
	require.NoError(t, json.Unmarshal(pb.Step("start").Keychain, &got))
	require.Len(t, got, 2)
	require.Equal(t, "creds", got[0]["name"])
	require.Equal(t, "credential", got[0]["kind"], "the alias is spelled as this engine does")
	require.Equal(t, "tok", got[1]["name"])
	require.JSONEq(t, `[{"name":"other","kind":"credential"}]`, string(pb.Step("wb").Keychain))
	require.Nil(t, pb.Step("plain").Keychain)
	require.Empty(t, pb.Warnings)
}

func TestKeychainErrors(t *testing.T) {
	t.Parallel()
	const steps = "workflow:\n  - step: start\n    tool: {kind: noop}\n"
	for _, tc := range []struct {
		name, src, want string
	}{
		{"not a list", "keychain: {a: 1}\n" + steps, "must be a list"},
		{"no name", "keychain:\n  - {kind: credential}\n" + steps, "a keychain entry needs a name"},
		{"bad name", "keychain:\n  - {name: a-b, kind: credential}\n" + steps, `keychain entry name "a-b" must be letters`},
		{"no kind", "keychain:\n  - {name: a}\n" + steps, `keychain entry "a" needs a kind (one of credential, oauth2)`},
		{"unknown kind", "keychain:\n  - {name: a, kind: vault}\n" + steps, `keychain entry "a": kind "vault" is not supported (this engine resolves: credential, oauth2)`},
		{"secret manager", "keychain:\n  - {name: a, kind: secret_manager, provider: gcp}\n" + steps, "declare kind: credential"},
		{"duplicate", "keychain:\n  - {name: a, kind: credential}\n  - {name: a, kind: credential}\n" + steps, `duplicate keychain entry "a"`},
		{"oauth2 without endpoint", "keychain:\n  - {name: a, kind: oauth2}\n" + steps, `keychain entry "a" (oauth2) needs an endpoint`},
		{"entry reads undeclared", "keychain:\n  - {name: a, kind: oauth2, endpoint: 'https://t', data: {s: '{{ keychain.b.x }}'}}\n" + steps, `keychain entry "a" reads keychain.b, which the keychain does not declare`},
		{"cycle", "keychain:\n  - {name: a, kind: oauth2, endpoint: '{{ keychain.b.x }}'}\n  - {name: b, kind: oauth2, endpoint: '{{ keychain.a.x }}'}\n" + steps, "keychain entries read each other in a cycle: a -> b -> a"},
		{"step reads undeclared", "keychain:\n  - {name: a, kind: credential}\nworkflow:\n  - step: start\n    tool: {kind: http, url: '{{ keychain.nope.url }}'}\n", "step start reads keychain.nope, which the keychain does not declare"},
		{"step reads undeclared without keychain", "workflow:\n  - step: start\n    tool: {kind: http, url: '{{ keychain.nope.url }}'}\n", "step start reads keychain.nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(doc(tc.src))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// The orchestrator renders set, next, loop and when: a keychain reference there is
// undefined, and registration says so.
func TestKeychainInOrchestratorTemplatesWarns(t *testing.T) {
	t.Parallel()
	pb := mustParse(t, doc(`keychain:
  - {name: a, kind: credential, color: red}
workflow:
  - step: start
    tool: {kind: noop}
    set: {x: "{{ keychain.a.password }}"}
`))
	require.Len(t, pb.Warnings, 2)
	require.Contains(t, pb.Warnings[0].Msg, `"keychain.a.color" is not read by this engine`)
	require.Contains(t, pb.Warnings[1].Msg, "in the step's set it is undefined")
}
