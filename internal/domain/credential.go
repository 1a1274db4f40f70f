package domain

import "fmt"

// Limits of a stored credential, the same at the gateway and in the orchestrator.
const (
	// MaxCredentialName is the longest credential name.
	MaxCredentialName = 128
	// MaxCredentialType is the longest credential type.
	MaxCredentialType = 64
	// MaxCredentialBytes is the largest credential payload (its JSON data).
	MaxCredentialBytes = 64 << 10
)

// CheckCredentialName returns an error naming the field ("name: ...") unless name is 1 to
// MaxCredentialName characters of A-Z, a-z, 0-9, '_', '.' and '-'. Callers at the API
// report it as InvalidArgument.
func CheckCredentialName(name string) error {
	if name == "" {
		return fmt.Errorf("name: required")
	}
	if len(name) > MaxCredentialName {
		return fmt.Errorf("name: %d characters exceeds the limit of %d", len(name), MaxCredentialName)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return fmt.Errorf("name: %q may hold only letters, digits, '_', '.' and '-'", name)
		}
	}
	return nil
}

// CheckCredential checks a credential to store: its name (CheckCredentialName), its type
// (at most MaxCredentialType characters) and the size of its JSON data (at most
// MaxCredentialBytes). The error names the field and never quotes the data.
func CheckCredential(name, typ string, dataBytes int) error {
	if err := CheckCredentialName(name); err != nil {
		return err
	}
	if len(typ) > MaxCredentialType {
		return fmt.Errorf("type: %d characters exceeds the limit of %d", len(typ), MaxCredentialType)
	}
	if dataBytes > MaxCredentialBytes {
		return fmt.Errorf("data: %d bytes exceeds the limit of %d", dataBytes, MaxCredentialBytes)
	}
	return nil
}
