package clientaddr

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestClientAddressIsTheTCPPeerUnlessAProxyIsTrusted(t *testing.T) {
	t.Parallel()
	none, err := Parse("")
	require.NoError(t, err)
	require.Empty(t, none)
	// X-Forwarded-For is ignored by default: a caller cannot pick its own address.
	require.Equal(t, "203.0.113.9", none.clientAddr("203.0.113.9:4242", []string{"198.51.100.1"}))
	require.Equal(t, "unknown", none.clientAddr("bufconn", nil))
	// An IPv6 caller is counted by its /64; an IPv4-mapped one as IPv4.
	require.Equal(t, "2001:db8:1:2::/64", none.clientAddr("[2001:db8:1:2:aaaa::1]:443", nil))
	require.Equal(t, "2001:db8:1:2::/64", none.clientAddr("[2001:db8:1:2:bbbb::7]:443", nil))
	require.Equal(t, "192.0.2.1", none.clientAddr("[::ffff:192.0.2.1]:80", nil))

	p, err := Parse(" 10.0.0.0/8, 192.0.2.7 ,")
	require.NoError(t, err)
	require.Len(t, p, 2)
	// From a trusted proxy: the right-most hop that is not one of them.
	require.Equal(t, "198.51.100.1", p.clientAddr("10.1.2.3:555", []string{"203.0.113.5, 198.51.100.1", "10.9.9.9"}))
	require.Equal(t, "198.51.100.1", p.clientAddr("192.0.2.7:555", []string{"198.51.100.1"}))
	// All hops trusted: the left-most; no header: the proxy; a malformed hop: the last trusted.
	require.Equal(t, "10.0.0.2", p.clientAddr("10.0.0.1:1", []string{"10.0.0.2, 10.0.0.3"}))
	require.Equal(t, "10.0.0.1", p.clientAddr("10.0.0.1:1", nil))
	require.Equal(t, "10.0.0.3", p.clientAddr("10.0.0.1:1", []string{"garbage, 10.0.0.3"}))
	// Not from a trusted proxy: the header is ignored.
	require.Equal(t, "203.0.113.9", p.clientAddr("203.0.113.9:1", []string{"10.0.0.1"}))

	_, err = Parse("10.0.0.0/8,proxy.internal")
	require.EqualError(t, err, `"proxy.internal" is not an IP address or a CIDR prefix`)
}

func TestHeaderMatcherNeverPassesTheClientAddressKey(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"Grpc-Metadata-X-Noetl-Client-Address", "grpc-metadata-x-noetl-client-address"} {
		_, ok := HeaderMatcher(h)
		require.False(t, ok, h)
	}
	k, ok := HeaderMatcher("X-Api-Key")
	require.True(t, ok)
	require.Equal(t, "x-api-key", k)
	k, ok = HeaderMatcher("Authorization")
	require.True(t, ok)
	require.Equal(t, "grpcgateway-Authorization", k)
}
