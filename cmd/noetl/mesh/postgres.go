package mesh

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"

	"github.com/noetl/noetl/internal/schema"
)

// PostgresURLs are the URLs the services connect to Postgres with, each as its own login
// role (schema.LoginRole), a member of the service's group role: only the materializer's
// may write noetl.event.
type PostgresURLs struct {
	Orchestrator, Materializer, Statebuilder, Resultstore string
}

// Through returns the URLs with the host and port of local (a URL naming a unix socket
// directory in its host parameter, such as pgembed.SocketURL): the same roles, passwords
// and database, reached through local's socket.
func (u PostgresURLs) Through(local string) (PostgresURLs, error) {
	l, err := url.Parse(local)
	if err != nil {
		return PostgresURLs{}, fmt.Errorf("mesh: local Postgres URL: %w", err)
	}
	through := func(s string) (string, error) {
		r, err := url.Parse(s)
		if err != nil {
			return "", fmt.Errorf("mesh: Postgres URL: %w", err)
		}
		q := r.Query()
		q.Set("host", l.Query().Get("host"))
		q.Set("port", l.Query().Get("port"))
		r.Host, r.RawQuery = "", q.Encode()
		return r.String(), nil
	}
	var out PostgresURLs
	for _, p := range []struct{ in, out *string }{
		{&u.Orchestrator, &out.Orchestrator}, {&u.Materializer, &out.Materializer},
		{&u.Statebuilder, &out.Statebuilder}, {&u.Resultstore, &out.Resultstore},
	} {
		if *p.out, err = through(*p.in); err != nil {
			return PostgresURLs{}, err
		}
	}
	return out, nil
}

// PrepareDatabase is the migrate step of a mesh (`noetl dev`, the tests, the benchmarks),
// run once before the services start: on the database of adminURL (a role that owns the
// schema and may create roles, such as the private cluster's superuser) it applies the
// migrations and the services' privileges, creates or updates each service's login role,
// and returns the URL each service connects with.
//
// Roles belong to the whole Postgres cluster, so the meshes of all databases of one
// cluster share the login roles; their passwords derive from adminURL's credentials and
// server (not its database), so every mesh on that server gives a role the same password
// and none breaks another's connections.
func PrepareDatabase(ctx context.Context, adminURL string, log *slog.Logger) (PostgresURLs, error) {
	base, err := url.Parse(adminURL)
	if err != nil || (base.Scheme != "postgres" && base.Scheme != "postgresql") {
		return PostgresURLs{}, fmt.Errorf("mesh: the Postgres URL must be a postgres:// URL (the services get URLs of their own roles derived from it)")
	}
	urls := map[string]string{}
	var logins []schema.Login
	for _, s := range schema.Services() {
		user, pw := schema.LoginRole(s), loginPassword(base, schema.LoginRole(s))
		u := *base
		u.User = url.UserPassword(user, pw)
		urls[s] = u.String()
		logins = append(logins, schema.Login{Service: s, User: user, Password: pw})
	}
	if err := schema.Setup(ctx, adminURL, logins, log); err != nil {
		return PostgresURLs{}, err
	}
	return PostgresURLs{
		Orchestrator: urls[schema.Orchestrator], Materializer: urls[schema.Materializer],
		Statebuilder: urls[schema.Statebuilder], Resultstore: urls[schema.Resultstore],
	}, nil
}

// loginPassword derives the password of a mesh's login role from the admin URL's user,
// password, host and port: whoever knows it holds the cluster already.
func loginPassword(admin *url.URL, role string) string {
	key := admin.User.String() + "@" + admin.Host
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte("noetl mesh login " + role))
	return hex.EncodeToString(mac.Sum(nil))[:32]
}
