package tools

import (
	"fmt"
	"net/netip"
	"strings"
	"syscall"
)

// Egress is the http tool's policy on the addresses it may connect to. Each policy adds
// to the one before it. No policy allows link-local addresses, cloud metadata endpoints,
// unspecified, multicast or reserved addresses.
type Egress int

const (
	// EgressPublic allows public unicast addresses only: the production default.
	EgressPublic Egress = iota
	// EgressLoopback also allows loopback (127.0.0.0/8, ::1): the dev mesh's default, so
	// that playbooks reach services on the developer's machine and nothing else local.
	EgressLoopback
	// EgressPrivate also allows private-use ranges: 10.0.0.0/8, 172.16.0.0/12,
	// 192.168.0.0/16, the shared address space 100.64.0.0/10 (carrier-grade NAT, and pod
	// networks on some clusters) and IPv6 unique local fc00::/7.
	EgressPrivate
)

// EgressSetting is the worker variable that chooses the policy; refusals name it.
const EgressSetting = "NOETL_HTTP_EGRESS"

// ParseEgress reads a policy by name: public, loopback or private.
func ParseEgress(s string) (Egress, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "public":
		return EgressPublic, nil
	case "loopback":
		return EgressLoopback, nil
	case "private":
		return EgressPrivate, nil
	}
	return 0, fmt.Errorf("unknown http egress policy %q (want public, loopback or private)", s)
}

// String returns the policy's name, as ParseEgress reads it.
func (e Egress) String() string {
	switch e {
	case EgressPublic:
		return "public"
	case EgressLoopback:
		return "loopback"
	case EgressPrivate:
		return "private"
	}
	return fmt.Sprintf("Egress(%d)", int(e))
}

// describe says what the policy allows.
func (e Egress) describe() string {
	switch e {
	case EgressLoopback:
		return "public and loopback addresses only"
	case EgressPrivate:
		return "public, loopback and private addresses only"
	}
	return "public addresses only"
}

// addrClass is the kind of an address, as the policies see it.
type addrClass int

const (
	classPublic addrClass = iota
	classLoopback
	classPrivate
	// The classes below are refused by every policy.
	classMetadata
	classLinkLocal
	classUnspecified
	classMulticast
	classReserved
)

// allows reports whether the policy lets the tool connect to an address of class c.
func (e Egress) allows(c addrClass) bool {
	switch c {
	case classPublic:
		return true
	case classLoopback:
		return e >= EgressLoopback
	case classPrivate:
		return e >= EgressPrivate
	}
	return false
}

// metadataAddrs are the instance metadata and credential endpoints of cloud providers.
// They are refused by every policy, even the few that are not link-local.
var metadataAddrs = map[netip.Addr]string{
	netip.MustParseAddr("169.254.169.254"): "cloud metadata",                    // AWS, GCP, Azure, OpenStack, Oracle, DigitalOcean
	netip.MustParseAddr("169.254.170.2"):   "cloud metadata",                    // AWS ECS task credentials
	netip.MustParseAddr("169.254.170.23"):  "cloud metadata",                    // AWS EKS Pod Identity
	netip.MustParseAddr("fd00:ec2::254"):   "cloud metadata",                    // AWS IMDS over IPv6
	netip.MustParseAddr("fd00:ec2::23"):    "cloud metadata",                    // AWS EKS Pod Identity over IPv6
	netip.MustParseAddr("fd20:ce::254"):    "cloud metadata",                    // GCP metadata over IPv6
	netip.MustParseAddr("100.100.100.200"): "cloud metadata",                    // Alibaba Cloud
	netip.MustParseAddr("168.63.129.16"):   "cloud metadata (Azure WireServer)", // public, but the Azure host's own endpoint
}

// specialRanges are ranges netip's predicates do not name, with their class.
var specialRanges = []struct {
	prefix netip.Prefix
	class  addrClass
	name   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), classReserved, "this-network"},
	{netip.MustParsePrefix("100.64.0.0/10"), classPrivate, "shared (carrier-grade NAT)"},
	{netip.MustParsePrefix("192.0.0.0/24"), classReserved, "IETF protocol assignment"},
	{netip.MustParsePrefix("192.0.2.0/24"), classReserved, "documentation"},
	{netip.MustParsePrefix("198.51.100.0/24"), classReserved, "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), classReserved, "documentation"},
	{netip.MustParsePrefix("198.18.0.0/15"), classReserved, "benchmarking"},
	{netip.MustParsePrefix("240.0.0.0/4"), classReserved, "reserved"},
	{netip.MustParsePrefix("2001:db8::/32"), classReserved, "documentation"},
	{netip.MustParsePrefix("2001::/32"), classReserved, "Teredo"},
}

var (
	// nat64 is the well-known NAT64 prefix: its addresses embed an IPv4 address (last 4 bytes).
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
	// sixToFour is 6to4: its addresses embed an IPv4 address (bytes 2 to 5).
	sixToFour = netip.MustParsePrefix("2002::/16")
	// globalUnicast is the only IPv6 space allocated for public unicast.
	globalUnicast = netip.MustParsePrefix("2000::/3")
)

// classify returns the class of an address and its name for messages. An IPv4-mapped
// IPv6 address is its IPv4 address; a NAT64 or 6to4 address that embeds a non-public
// IPv4 address is of that address's class, since a translator would deliver it there.
func classify(a netip.Addr) (addrClass, string) {
	if !a.IsValid() {
		return classReserved, "invalid"
	}
	a = a.Unmap()
	if name, ok := metadataAddrs[a]; ok {
		return classMetadata, name
	}
	if a.Is6() {
		var v4 netip.Addr
		b := a.As16()
		switch {
		case nat64.Contains(a):
			v4 = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		case sixToFour.Contains(a):
			v4 = netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})
		}
		if v4.IsValid() {
			if c, name := classify(v4); c != classPublic {
				return c, name
			}
			return classPublic, ""
		}
	}
	switch {
	case a.IsLoopback():
		return classLoopback, "loopback"
	case a.IsUnspecified():
		return classUnspecified, "unspecified"
	case a.IsLinkLocalUnicast():
		return classLinkLocal, "link-local"
	case a.IsMulticast(), a.IsLinkLocalMulticast(), a.IsInterfaceLocalMulticast():
		return classMulticast, "multicast"
	case a.IsPrivate():
		return classPrivate, "private"
	}
	for _, r := range specialRanges {
		if r.prefix.Contains(a) {
			return r.class, r.name
		}
	}
	if a.Is6() && !globalUnicast.Contains(a) {
		return classReserved, "reserved IPv6"
	}
	return classPublic, ""
}

// blockedAddrError is returned by the dial-time check for a refused address.
type blockedAddrError struct {
	addr   string
	class  addrClass
	name   string
	policy Egress
}

func (e *blockedAddrError) Error() string {
	head := fmt.Sprintf("refusing to connect to %s (%s address)", e.addr, e.name)
	var wider Egress
	switch e.class {
	case classLoopback:
		wider = EgressLoopback
	case classPrivate:
		wider = EgressPrivate
	default:
		return fmt.Sprintf("%s: no %s setting allows it", head, EgressSetting)
	}
	return fmt.Sprintf("%s: %s=%s allows %s; %s=%s (noetl dev --http-egress %s) allows %s ones",
		head, EgressSetting, e.policy, e.policy.describe(), EgressSetting, wider, wider, e.name)
}

// check returns a *blockedAddrError unless the policy allows address (host:port).
func (e Egress) check(address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &blockedAddrError{addr: address, class: classReserved, name: "unparsable", policy: e}
	}
	if c, name := classify(ap.Addr()); !e.allows(c) {
		return &blockedAddrError{addr: address, class: c, name: name, policy: e}
	}
	return nil
}

// control is a net.Dialer Control hook: it runs on the resolved address after the socket
// is made and before it connects, so a refused address gets no packet at all.
func (e Egress) control(_, address string, _ syscall.RawConn) error { return e.check(address) }
