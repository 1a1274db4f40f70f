package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"time"
)

// ticketDomain separates Flight ticket signatures from principal signatures.
const ticketDomain = "noetl.flight-ticket.v1"

// DefaultTicketTTL is how long a Flight ticket is accepted unless configured otherwise.
const DefaultTicketTTL = 5 * time.Minute

// Ticket is what a signed Arrow Flight ticket grants: reading one result of one tenant
// until it expires.
type Ticket struct {
	// Tenant owns the result.
	Tenant string `json:"tenant"`
	// ResultID names the result.
	ResultID string `json:"result_id"`
	// Exp is the expiry in Unix seconds.
	Exp int64 `json:"exp"`
}

func (t *Trust) ticketMAC(payload []byte) []byte {
	h := hmac.New(sha256.New, t.key)
	h.Write([]byte(ticketDomain))
	h.Write([]byte{0})
	h.Write(payload)
	return h.Sum(nil)
}

// SignTicket returns a ticket for reading result id of tenant, valid for ttl, and its
// expiry. The ticket is "<base64url JSON>.<base64url HMAC>": opaque to clients, checked
// by VerifyTicket with the same internal secret. A zero ttl means DefaultTicketTTL.
func (t *Trust) SignTicket(tenant, resultID string, ttl time.Duration) ([]byte, time.Time) {
	if ttl == 0 {
		ttl = DefaultTicketTTL
	}
	exp := t.now().Add(ttl)
	b, _ := json.Marshal(Ticket{Tenant: tenant, ResultID: resultID, Exp: exp.Unix()})
	payload := base64.RawURLEncoding.EncodeToString(b)
	sig := base64.RawURLEncoding.EncodeToString(t.ticketMAC([]byte(payload)))
	return []byte(payload + "." + sig), exp
}

// VerifyTicket checks a ticket's signature and expiry and returns what it grants; a forged,
// altered, malformed or expired ticket is an Unauthenticated error.
func (t *Trust) VerifyTicket(ticket []byte) (*Ticket, error) {
	payload, sig, ok := bytes.Cut(ticket, []byte("."))
	if !ok {
		return nil, unauthenticated("ticket: malformed")
	}
	got, err := base64.RawURLEncoding.Strict().DecodeString(string(sig))
	if err != nil || !hmac.Equal(got, t.ticketMAC(payload)) {
		return nil, unauthenticated("ticket: invalid signature")
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(string(payload))
	if err != nil {
		return nil, unauthenticated("ticket: malformed")
	}
	var tk Ticket
	if err := json.Unmarshal(raw, &tk); err != nil || tk.Tenant == "" || tk.ResultID == "" {
		return nil, unauthenticated("ticket: malformed")
	}
	if t.now().After(time.Unix(tk.Exp, 0)) {
		return nil, unauthenticated("ticket: expired")
	}
	return &tk, nil
}
