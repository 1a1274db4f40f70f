package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"strings"
)

// APIKeyPrefix starts every API key: noetl_<id>_<secret>.
const APIKeyPrefix = "noetl_"

// Key part sizes in random bytes: the id is public (the key's name), the secret has 256 bits
// of entropy, so one SHA-256 (no slow hash) is enough to store it.
const (
	keyIDBytes     = 8
	keySecretBytes = 32
)

var keyEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewAPIKey returns a new random key, its id and the SHA-256 digest of its secret (what is
// stored).
func NewAPIKey() (key, id string, digest []byte, err error) {
	b := make([]byte, keyIDBytes+keySecretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", "", nil, err
	}
	id = keyEncoding.EncodeToString(b[:keyIDBytes])
	secret := keyEncoding.EncodeToString(b[keyIDBytes:])
	sum := sha256.Sum256([]byte(secret))
	return APIKeyPrefix + id + "_" + secret, id, sum[:], nil
}

// ParseAPIKey splits a presented key into its id and the SHA-256 digest of its secret; ok
// is false when key does not have the form of an API key.
func ParseAPIKey(key string) (id string, digest []byte, ok bool) {
	rest, found := strings.CutPrefix(key, APIKeyPrefix)
	if !found {
		return "", nil, false
	}
	id, secret, found := strings.Cut(rest, "_")
	if !found || len(id) != keyEncoding.EncodedLen(keyIDBytes) || len(secret) != keyEncoding.EncodedLen(keySecretBytes) {
		return "", nil, false
	}
	if _, err := keyEncoding.DecodeString(id); err != nil {
		return "", nil, false
	}
	if _, err := keyEncoding.DecodeString(secret); err != nil {
		return "", nil, false
	}
	sum := sha256.Sum256([]byte(secret))
	return id, sum[:], true
}

// LooksLikeAPIKey reports whether s has an API key's prefix (as opposed to a JWT).
func LooksLikeAPIKey(s string) bool { return strings.HasPrefix(s, APIKeyPrefix) }

// DigestEqual compares two secret digests in constant time.
func DigestEqual(a, b []byte) bool {
	return len(a) == sha256.Size && subtle.ConstantTimeCompare(a, b) == 1
}
