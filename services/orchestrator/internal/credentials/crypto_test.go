package credentials

import (
	"bytes"
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSealerRoundTripsAndBindsTenantAndName(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{7}, KeySize)
	s, err := NewSealer(key)
	require.NoError(t, err)
	secret := []byte(`{"password":"hunter2"}`)

	a, err := s.Seal("acme", "pg", secret)
	require.NoError(t, err)
	b, err := s.Seal("acme", "pg", secret)
	require.NoError(t, err)
	require.NotEqual(t, a, b, "every seal draws a fresh nonce")
	require.False(t, bytes.Contains(a, []byte("hunter2")))

	got, err := s.Open("acme", "pg", a)
	require.NoError(t, err)
	require.Equal(t, secret, got)

	other, err := NewSealer(bytes.Repeat([]byte{8}, KeySize))
	require.NoError(t, err)
	tampered := bytes.Clone(a)
	tampered[len(tampered)-1] ^= 1
	for name, open := range map[string]func() ([]byte, error){
		"other tenant": func() ([]byte, error) { return s.Open("other", "pg", a) },
		"other name":   func() ([]byte, error) { return s.Open("acme", "pg2", a) },
		"other key":    func() ([]byte, error) { return other.Open("acme", "pg", a) },
		"tampered":     func() ([]byte, error) { return s.Open("acme", "pg", tampered) },
		"truncated":    func() ([]byte, error) { return s.Open("acme", "pg", a[:10]) },
		"empty":        func() ([]byte, error) { return s.Open("acme", "pg", nil) },
	} {
		_, err := open()
		require.ErrorIs(t, err, ErrUnsealable, name)
	}
}

func TestParseKeyWantsThirtyTwoBytesAndHidesTheKey(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{0xfb}, KeySize)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		got, err := ParseKey(" " + enc.EncodeToString(key) + "\n")
		require.NoError(t, err)
		require.Equal(t, key, got)
	}
	short := base64.StdEncoding.EncodeToString(key[:16])
	_, err := ParseKey(short)
	require.ErrorContains(t, err, "16 bytes")
	require.NotContains(t, err.Error(), short)
	_, err = ParseKey("not base64!")
	require.ErrorContains(t, err, "not base64")
	_, err = NewSealer(key[:31])
	require.Error(t, err)
}
