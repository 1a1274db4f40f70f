package plugin

import (
	"bytes"
	"compress/gzip"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// module is a minimal WebAssembly binary (the header and a custom section naming n, so
// that each n is other bytes).
func module(n string) []byte {
	b := append([]byte{}, wasmMagic...)
	b = append(b, 0, byte(len(n)+1), byte(len(n)))
	return append(b, n...)
}

func gz(b []byte) []byte {
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	_, _ = w.Write(b)
	_ = w.Close()
	return z.Bytes()
}

func code(t *testing.T, err error, want codes.Code, msg string) {
	t.Helper()
	require.Equal(t, want, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), msg)
}

// Registering stores dense versions per tenant and path; the same bytes again answer the
// latest version; a gzip-compressed module is stored uncompressed; listing and reading see
// what was stored, and a tenant sees only its own plug-ins.
func TestRegisterGetList(t *testing.T) {
	bg := context.Background()
	db, err := pgxext.Open(bg, testkit.StartMigratedPostgres(t), 4)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	s := &Service{DB: db}
	admin := auth.NewContext(bg, &auth.Principal{Tenant: "acme", Subject: "apikey:admin", Roles: []string{auth.RoleAdmin}})
	reg := func(path string, mod []byte) *orchv1.RegisterPluginResponse {
		t.Helper()
		resp, err := s.RegisterPlugin(admin, &orchv1.RegisterPluginRequest{Tenant: "acme", Path: path, Module: mod, Description: "d"})
		require.NoError(t, err)
		return resp
	}
	r1 := reg("acme/greeter", module("one"))
	require.EqualValues(t, 1, r1.GetPlugin().GetVersion())
	require.False(t, r1.GetUnchanged())
	require.Equal(t, "apikey:admin", r1.GetPlugin().GetCreatedBy())
	again := reg("/acme/greeter/", gz(module("one")))
	require.True(t, again.GetUnchanged(), "the same bytes, compressed, are the same version")
	require.EqualValues(t, 1, again.GetPlugin().GetVersion())
	r2 := reg("acme/greeter", gz(module("two")))
	require.EqualValues(t, 2, r2.GetPlugin().GetVersion())
	require.EqualValues(t, len(module("two")), r2.GetPlugin().GetSizeBytes())
	reg("acme/other", module("x"))

	got, err := s.GetPlugin(bg, &orchv1.GetPluginRequest{Tenant: "acme", Path: "acme/greeter", IncludeModule: true})
	require.NoError(t, err)
	require.EqualValues(t, 2, got.GetPlugin().GetVersion())
	require.Equal(t, module("two"), got.GetPlugin().GetModule())
	require.Equal(t, r2.GetPlugin().GetContentSha256(), got.GetPlugin().GetContentSha256())
	got, err = s.GetPlugin(bg, &orchv1.GetPluginRequest{Tenant: "acme", Path: "acme/greeter", Version: 1})
	require.NoError(t, err)
	require.Empty(t, got.GetPlugin().GetModule(), "no bytes unless asked for")
	require.Equal(t, r1.GetPlugin().GetContentSha256(), got.GetPlugin().GetContentSha256())
	_, err = s.GetPlugin(bg, &orchv1.GetPluginRequest{Tenant: "globex", Path: "acme/greeter"})
	code(t, err, codes.NotFound, `plug-in "acme/greeter" (version 0) not found`)

	list, err := s.ListPlugins(bg, &orchv1.ListPluginsRequest{Tenant: "acme"})
	require.NoError(t, err)
	require.Len(t, list.GetPlugins(), 2)
	require.Equal(t, "acme/greeter", list.GetPlugins()[0].GetPath())
	require.EqualValues(t, 2, list.GetPlugins()[0].GetVersion())
	page, err := s.ListPlugins(bg, &orchv1.ListPluginsRequest{Tenant: "acme", Path: "acme/greeter", PageSize: 1})
	require.NoError(t, err)
	require.EqualValues(t, 2, page.GetPlugins()[0].GetVersion())
	page, err = s.ListPlugins(bg, &orchv1.ListPluginsRequest{Tenant: "acme", Path: "acme/greeter", PageToken: page.GetNextPageToken()})
	require.NoError(t, err)
	require.EqualValues(t, 1, page.GetPlugins()[0].GetVersion())
	none, err := s.ListPlugins(bg, &orchv1.ListPluginsRequest{Tenant: "globex"})
	require.NoError(t, err)
	require.Empty(t, none.GetPlugins())

	// Bad input is refused naming the field.
	_, err = s.RegisterPlugin(admin, &orchv1.RegisterPluginRequest{Tenant: "acme", Path: "acme/x", Module: []byte("#!/bin/sh")})
	code(t, err, codes.InvalidArgument, "module: not a WebAssembly binary")
	_, err = s.RegisterPlugin(admin, &orchv1.RegisterPluginRequest{Tenant: "acme", Path: "acme/x"})
	code(t, err, codes.InvalidArgument, "module: the WebAssembly binary is required")
	_, err = s.RegisterPlugin(admin, &orchv1.RegisterPluginRequest{Tenant: "acme", Path: "a/../b", Module: module("x")})
	code(t, err, codes.InvalidArgument, "path: ")
	_, err = s.RegisterPlugin(admin, &orchv1.RegisterPluginRequest{Tenant: "acme", Path: "system/x", Module: module("x")})
	code(t, err, codes.PermissionDenied, "path: registering system/ plug-ins requires the system role")
	system := auth.NewContext(bg, &auth.Principal{Tenant: "acme", Subject: "apikey:sys", Roles: []string{auth.RoleAdmin, auth.RoleSystem}})
	_, err = s.RegisterPlugin(system, &orchv1.RegisterPluginRequest{Tenant: "acme", Path: "system/x", Module: module("x")})
	require.NoError(t, err)
	_, err = s.ListPlugins(bg, &orchv1.ListPluginsRequest{Tenant: "acme", Path: "acme/greeter", PageToken: "x"})
	code(t, err, codes.InvalidArgument, "page_token")

	// A playbook's wasm steps must name a registered module of their class.
	check := func(path, tool string) error {
		pb, err := playbook.Parse([]byte("apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: p, path: " + path + "}\nworkflow:\n- step: start\n  tool: " + tool + "\n"))
		require.NoError(t, err)
		return s.CheckSteps(bg, "acme", pb, path)
	}
	require.NoError(t, check("acme/p", "{kind: wasm, module: acme/greeter}"))
	require.NoError(t, check("acme/p", "{kind: wasm, module: acme/greeter, version: 1}"))
	require.NoError(t, check("acme/p", "{kind: wasm, module: '{{ workload.m }}'}"))
	require.NoError(t, check("system/p", "{kind: wasm, module: system/x}"))
	code(t, check("acme/p", "{kind: wasm, module: acme/missing}"), codes.FailedPrecondition, `step "start": module "acme/missing" is not registered`)
	code(t, check("acme/p", "{kind: wasm, module: acme/greeter, version: 9}"), codes.FailedPrecondition, `module "acme/greeter" has no version 9`)
	code(t, check("acme/p", "{kind: wasm}"), codes.InvalidArgument, "tool kind wasm needs module")
	code(t, check("acme/p", "{kind: wasm, module: system/x}"), codes.InvalidArgument, "is a system/ plug-in, which only system/ playbooks run")
	code(t, check("system/p", "{kind: wasm, module: acme/greeter}"), codes.InvalidArgument, "a system/ playbook runs only system/ plug-ins")
}
