package credentials

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// KeySize is the length of a credential encryption key in bytes (AES-256).
const KeySize = 32

// sealVersion is the first byte of every ciphertext; it names the format (AES-256-GCM,
// 12-byte nonce, additional data from sealAD) so that a later format or key rotation can
// tell rows apart.
const sealVersion byte = 1

// ErrUnsealable is returned by Sealer.Open when a ciphertext does not authenticate: it was
// sealed with another key, for another tenant or name, or it is corrupt.
var ErrUnsealable = errors.New("credential cannot be decrypted with the configured NOETL_ENCRYPTION_KEY")

// ParseKey decodes a base64 (standard or URL alphabet, padded or not) encryption key of
// KeySize bytes. Its errors never contain the key.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil {
			if len(k) != KeySize {
				return nil, fmt.Errorf("NOETL_ENCRYPTION_KEY: decodes to %d bytes, want %d", len(k), KeySize)
			}
			return k, nil
		}
	}
	return nil, errors.New("NOETL_ENCRYPTION_KEY: not base64")
}

// Sealer encrypts and decrypts credential data with AES-256-GCM. Every Seal draws a fresh
// random nonce; the tenant and credential name are authenticated as additional data, so a
// ciphertext copied to another row does not open. It is safe for concurrent use.
type Sealer struct {
	aead cipher.AEAD
}

// NewSealer returns a Sealer for a KeySize-byte key.
func NewSealer(key []byte) (*Sealer, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("encryption key: %d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// sealAD is the additional data binding a ciphertext to its format, tenant and name.
// Postgres text holds no NUL byte, so the separator keeps the fields apart.
func sealAD(tenant, name string) []byte {
	return []byte("noetl.credential\x00" + string(sealVersion) + "\x00" + tenant + "\x00" + name)
}

// Seal encrypts plaintext for the credential tenant/name: version byte, nonce, sealed data.
func (s *Sealer) Seal(tenant, name string, plaintext []byte) ([]byte, error) {
	ns := s.aead.NonceSize()
	out := make([]byte, 1+ns, 1+ns+len(plaintext)+s.aead.Overhead())
	out[0] = sealVersion
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, fmt.Errorf("credential nonce: %w", err)
	}
	return s.aead.Seal(out, out[1:1+ns], plaintext, sealAD(tenant, name)), nil
}

// Open decrypts a ciphertext made by Seal for the same tenant and name.
func (s *Sealer) Open(tenant, name string, ciphertext []byte) ([]byte, error) {
	ns := s.aead.NonceSize()
	if len(ciphertext) < 1+ns+s.aead.Overhead() || ciphertext[0] != sealVersion {
		return nil, ErrUnsealable
	}
	pt, err := s.aead.Open(nil, ciphertext[1:1+ns], ciphertext[1+ns:], sealAD(tenant, name))
	if err != nil {
		return nil, ErrUnsealable
	}
	return pt, nil
}
