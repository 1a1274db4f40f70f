package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	"github.com/noetl/noetl/internal/testkit"
)

const dailyV1 = `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: daily, path: tests/daily}
workflow:
  - step: start
    next: end
  - step: end
    tool: {kind: noop, result: {n: 1}}
`

// dailyV2 changes the result of dailyV1: what `playbooks diff` must show.
var dailyV2 = strings.Replace(dailyV1, "{n: 1}", "{n: 2}", 1)

// TestDailyCommands runs the read and credential commands against a real mesh in every
// output format.
func TestDailyCommands(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("NOETL_API_KEY", "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := mesh.Start(ctx, mesh.Config{StateDir: t.TempDir(), PostgresURL: testkit.StartPostgres(t), NATSURL: testkit.StartNATS(t)})
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	noetl := func(args ...string) (string, error) {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(io.Discard)
		root.SetIn(strings.NewReader(`{"user": "u", "password": "from-stdin-secret"}`))
		root.SetArgs(append([]string{"--gateway", m.GRPCAddr, "--api-key", m.AdminKey}, args...))
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	_, err = noetl("register", write("v1.yaml", dailyV1))
	require.NoError(t, err)
	_, err = noetl("playbooks", "diff", "tests/daily")
	require.ErrorContains(t, err, `playbook "tests/daily" has one version: nothing to compare`)
	_, err = noetl("register", write("v2.yaml", dailyV2))
	require.NoError(t, err)
	out, err := noetl("run", "tests/daily", "--wait")
	require.NoError(t, err, out)
	var run Outcome
	require.NoError(t, json.Unmarshal([]byte(out), &run))
	id := run.ExecutionID

	t.Run("executions list", func(t *testing.T) {
		out, err := noetl("executions", "list", "-o", "table")
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Regexp(t, `^EXECUTION\s+PLAYBOOK\s+VERSION\s+STATUS\s+STARTED\s+TOOK\s+LABELS$`, lines[0])
		require.Len(t, lines, 2, out)
		require.Regexp(t, `^`+id+`\s+tests/daily\s+2\s+COMPLETED\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+\S+\s*$`, lines[1])

		out, err = noetl("executions", "list") // not a terminal: JSON Lines
		require.NoError(t, err)
		var x map[string]any
		require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &x), out)
		require.Equal(t, id, x["executionId"])

		out, err = noetl("executions", "list", "-o", "yaml", "--status", "completed", "--path", "tests/daily")
		require.NoError(t, err)
		var docs []map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(out), &docs), out)
		require.Len(t, docs, 1)
		require.Equal(t, "EXECUTION_STATUS_COMPLETED", docs[0]["status"])

		out, err = noetl("executions", "list", "--status", "failed")
		require.NoError(t, err)
		require.Empty(t, out, "no failed execution")
		_, err = noetl("executions", "list", "--status", "done")
		require.EqualError(t, err, `--status "done": want running, completed, failed or cancelled`)
		_, err = noetl("executions", "list", "-o", "xml")
		require.EqualError(t, err, `--output "xml": want table, json or yaml`)

		// The admin key is also a system key: it lists every tenant's, or another's.
		out, err = noetl("executions", "list", "--tenant", "-", "-o", "table")
		require.NoError(t, err)
		lines = strings.Split(strings.TrimSpace(out), "\n")
		require.Regexp(t, `^EXECUTION\s+TENANT\s+PLAYBOOK\s+`, lines[0])
		require.Regexp(t, `^`+id+`\s+default\s+tests/daily\s+2\s+COMPLETED`, lines[1])
		out, err = noetl("executions", "list", "--tenant", "elsewhere")
		require.NoError(t, err)
		require.Empty(t, out, "no execution in tenant elsewhere")
	})

	t.Run("status and events", func(t *testing.T) {
		out, err := noetl("status", id, "-o", "table")
		require.NoError(t, err)
		require.Regexp(t, `(?m)^Status:\s+COMPLETED$`, out)
		require.Regexp(t, `(?m)^Playbook:\s+tests/daily \(version 2\)$`, out)
		require.Regexp(t, `(?m)^Result:\s+\{"n":2\}$`, out)
		require.Regexp(t, `(?m)^end\s+COMPLETED\s+1\s*$`, out)
		out, err = noetl("executions", "get", id, "-o", "json")
		require.NoError(t, err)
		require.Contains(t, out, `"status": "EXECUTION_STATUS_COMPLETED"`)

		out, err = noetl("events", id, "-o", "table")
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Regexp(t, `^SEQ\s+TYPE\s+STEP\s+ATTEMPT\s+COMMITTED\s+DETAIL$`, lines[0])
		require.Regexp(t, `^1\s+playbook\.started\s`, lines[1])
		require.Regexp(t, `playbook\.completed\s.*\{"n":2\}$`, lines[len(lines)-1])
		out, err = noetl("events", id)
		require.NoError(t, err)
		require.Equal(t, len(lines)-1, strings.Count(out, "\n"), "JSON Lines: one event per line")
	})

	t.Run("playbooks", func(t *testing.T) {
		out, err := noetl("playbooks", "list", "-o", "table")
		require.NoError(t, err)
		require.Regexp(t, `(?m)^tests/daily\s+2\s+daily\s+\d{4}-`, out)
		out, err = noetl("playbooks", "versions", "tests/daily", "-o", "table")
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 3, out)
		require.Regexp(t, `^tests/daily\s+2\s`, lines[1], "newest first")
		require.Regexp(t, `^tests/daily\s+1\s`, lines[2])
		_, err = noetl("playbooks", "versions", "tests/none")
		require.ErrorContains(t, err, `playbook "tests/none" not found`)

		out, err = noetl("playbooks", "get", "tests/daily", "--version", "1", "-o", "table")
		require.NoError(t, err)
		require.Equal(t, dailyV1, out, "a table is the source itself")
		out, err = noetl("playbooks", "get", "tests/daily", "-o", "yaml")
		require.NoError(t, err)
		var pb map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(out), &pb))
		require.Equal(t, dailyV2, pb["content"])

		out, err = noetl("playbooks", "diff", "tests/daily")
		require.NoError(t, err)
		require.Contains(t, out, "--- tests/daily version 1\n+++ tests/daily version 2\n")
		require.Contains(t, out, "\n-    tool: {kind: noop, result: {n: 1}}\n+    tool: {kind: noop, result: {n: 2}}\n")
		out, err = noetl("playbooks", "diff", "tests/daily", "1", "1")
		require.NoError(t, err)
		require.Equal(t, "versions 1 and 1 of tests/daily are identical\n", out)
		_, err = noetl("playbooks", "diff", "tests/daily", "x")
		require.EqualError(t, err, `version "x": want a positive number`)
	})

	t.Run("credentials", func(t *testing.T) {
		out, err := noetl("credentials", "set", "pg_main", "--type", "postgres", "--from-file", "-")
		require.NoError(t, err)
		require.Equal(t, "stored: pg_main\n", out)
		_, err = noetl("credentials", "set", "pg_other", "--type", "postgres", "--data", `{"password": "inline-secret"}`)
		require.NoError(t, err)
		_, err = noetl("credentials", "set", "pg_bad", "--data", `["not-an-object-secret"]`)
		require.EqualError(t, err, "credential data: must be a JSON object", "the data is never quoted")
		out, err = noetl("credentials", "list", "-o", "table")
		require.NoError(t, err)
		require.Regexp(t, `(?m)^pg_main\s+postgres\s+\d{4}-`, out)
		require.Regexp(t, `(?m)^pg_other\s+postgres\s+\d{4}-`, out)
		for _, format := range []string{"table", "json", "yaml"} {
			out, err := noetl("credentials", "list", "-o", format)
			require.NoError(t, err)
			require.NotContains(t, out, "secret", "no format shows credential data")
		}
		out, err = noetl("credentials", "delete", "pg_other")
		require.NoError(t, err)
		require.Equal(t, "deleted: pg_other\n", out)
		_, err = noetl("credentials", "delete", "pg_other")
		require.ErrorContains(t, err, `credential "pg_other" not found`)
	})

	t.Run("tls", func(t *testing.T) {
		ca, certPEM, keyPEM := testCA(t, "gateway.noetl.test")
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		require.NoError(t, err)
		addr := tlsProxy(t, m.GRPCAddr, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
		caFile := filepath.Join(dir, "ca.pem")
		require.NoError(t, os.WriteFile(caFile, ca, 0o600))
		remote := func(args ...string) (string, error) {
			return noetl(append([]string{"--gateway", addr}, args...)...)
		}
		out, err := remote("--ca-file", caFile, "--server-name", "gateway.noetl.test", "status", id, "-o", "json")
		require.NoError(t, err)
		require.Contains(t, out, id)
		_, err = remote("--tls", "status", id)
		require.ErrorContains(t, err, "certificate", "the system roots do not know the test CA")
		_, err = remote("--ca-file", caFile, "--server-name", "other.noetl.test", "status", id)
		require.ErrorContains(t, err, "other.noetl.test", "the certificate is for another name")
		_, err = remote("--ca-file", filepath.Join(dir, "v1.yaml"), "status", id)
		require.ErrorContains(t, err, "no PEM certificate")
	})

	t.Run("completion", func(t *testing.T) {
		out, err := noetl("completion", "bash")
		require.NoError(t, err)
		require.Contains(t, out, "__start_noetl")
	})
}

// testCA returns a CA certificate (PEM) and a server certificate and key for host that it
// signed.
func testCA(t *testing.T, host string) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "noetl test CA"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// tlsProxy terminates TLS on a loopback port and forwards each connection to target, as
// an ingress in front of a gateway does; it returns the port's address.
func tlsProxy(t *testing.T, target string, cfg *tls.Config) string {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = lis.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { _ = in.Close() }()
				out, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer func() { _ = out.Close() }()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
				go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return lis.Addr().String()
}
