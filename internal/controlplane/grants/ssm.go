package grants

import (
	"errors"
	"fmt"
)

// SeedFromParameter is the control-plane seed held in the SSM parameter
// name, read decrypted, of type paramType ("SecureString", "String", …)
// and value. It does no I/O: the deployed function reads the parameter
// once per container, at start (a claim must not wait on SSM, and a key
// rotation is a deployment: every paired device pinned the old public key
// and has to be told).
func SeedFromParameter(name, paramType, value string) ([]byte, error) {
	// A String parameter is readable by anyone with ssm:GetParameter on it,
	// decryption or not; the key must have been stored as a SecureString.
	if paramType != "SecureString" {
		return nil, errors.New("grants: parameter " + name + " is not a SecureString; store the key encrypted")
	}
	if value == "" {
		return nil, fmt.Errorf("grants: parameter %s has no value", name)
	}
	seed, err := ParseSeed(value)
	if err != nil {
		return nil, fmt.Errorf("parameter %s: %w", name, err)
	}
	return seed, nil
}
