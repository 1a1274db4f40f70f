// Package clientaddr tells the address of a gateway caller, the key the throttle of failed
// authentication counts by: the TCP peer, or, behind a trusted proxy (Proxies), the address
// its X-Forwarded-For names. A REST caller's address is handed to the gateway's own gRPC
// server, over the in-memory loopback connection, in the metadata key MetadataKey.
// Invariant: that key is read only from the loopback connection, and the REST layer never
// passes on a caller's header of that name (HeaderMatcher), so no caller picks its address.
package clientaddr

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// MetadataKey is the gRPC metadata key in which the gateway's REST layer hands its own
// gRPC server, over the in-memory loopback connection, the address of a REST caller. The
// gRPC side reads it only from the loopback connection, and the REST layer never passes on
// a caller's header of that name (HeaderMatcher).
const MetadataKey = "x-noetl-client-address"

// unknownAddr stands for a caller whose address cannot be told.
const unknownAddr = "unknown"

// Proxies are the trusted proxies (the gateway's Config.TrustedProxies): the
// X-Forwarded-For of a request is read only when its TCP peer is one of them. Empty (the
// default) trusts none, so the client address is always the TCP peer.
type Proxies []netip.Prefix

// Parse reads a comma-separated list of IP addresses and CIDR prefixes.
func Parse(s string) (Proxies, error) {
	var out Proxies
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an IP address or a CIDR prefix", f)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// Check is the configuration check of the gateway's Config.TrustedProxies.
func Check(s string) error {
	_, err := Parse(s)
	return err
}

func (p Proxies) trusted(a netip.Addr) bool {
	for _, pre := range p {
		if pre.Contains(a) {
			return true
		}
	}
	return false
}

// clientAddr is the address of the caller of a connection from peer (host:port): the peer
// itself, unless it is a trusted proxy, in which case the right-most address of the
// X-Forwarded-For values that is not a trusted proxy. The result is the key the throttle of
// failed authentication counts by (bucketKey).
func (p Proxies) clientAddr(peer string, xff []string) string {
	a, ok := parseHost(peer)
	if !ok {
		return unknownAddr
	}
	if !p.trusted(a) {
		return bucketKey(a)
	}
	var hops []string
	for _, v := range xff {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		h, ok := parseHost(strings.TrimSpace(hops[i]))
		if !ok {
			return bucketKey(a) // a malformed hop: no telling who is behind it
		}
		if !p.trusted(h) {
			return bucketKey(h)
		}
		a = h
	}
	return bucketKey(a)
}

// parseHost reads an IP address, with or without a port.
func parseHost(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

// bucketKey is what failed authentication is counted by: an IPv4 address itself, an IPv6
// address its /64 (what one host is usually given).
func bucketKey(a netip.Addr) string {
	if a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}

// restClientKey is the context key of a REST request's client address.
type restClientKey struct{}

// WithAddr returns r carrying its client address (clientAddr of its TCP peer and
// X-Forwarded-For), for FromREST.
func (p Proxies) WithAddr(r *http.Request) *http.Request {
	addr := p.clientAddr(r.RemoteAddr, r.Header.Values("X-Forwarded-For"))
	return r.WithContext(context.WithValue(r.Context(), restClientKey{}, addr))
}

// FromREST is the client address WithAddr put in ctx.
func FromREST(ctx context.Context) string {
	if a, ok := ctx.Value(restClientKey{}).(string); ok {
		return a
	}
	return unknownAddr
}

// FromGRPC is the client address of a call to the gRPC server: for a call over the
// loopback connection (a REST call), the address the REST layer passed; otherwise the TCP
// peer, or the address its X-Forwarded-For names when the peer is a trusted proxy.
func (p Proxies) FromGRPC(ctx context.Context, md metadata.MD) string {
	pr, ok := peer.FromContext(ctx)
	if !ok || pr.Addr == nil {
		return unknownAddr
	}
	if pr.Addr.Network() == loopbackNetwork {
		if v := md.Get(MetadataKey); len(v) == 1 {
			return v[0]
		}
		return unknownAddr
	}
	return p.clientAddr(pr.Addr.String(), md.Get("x-forwarded-for"))
}

// loopbackNetwork is the network of the in-memory loopback connection (bufconn).
const loopbackNetwork = "bufconn"

// HeaderMatcher is the REST layer's header matcher (runtime.WithIncomingHeaderMatcher): it
// passes x-api-key to the gRPC server besides grpc-gateway's defaults (Authorization is
// always passed), and never a caller's header that would pass as the client address the
// REST layer hands the gRPC server (MetadataKey).
func HeaderMatcher(key string) (string, bool) {
	if strings.EqualFold(key, "X-Api-Key") {
		return "x-api-key", true
	}
	k, ok := runtime.DefaultHeaderMatcher(key)
	if ok && strings.EqualFold(k, MetadataKey) {
		return "", false
	}
	return k, ok
}

// Metadata is the metadata the REST layer adds to every call it makes to the gRPC server
// (runtime.WithMetadata): the client address (MetadataKey).
func Metadata(ctx context.Context, _ *http.Request) metadata.MD {
	return metadata.Pairs(MetadataKey, FromREST(ctx))
}
