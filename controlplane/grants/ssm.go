package grants

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/ssm/types"
)

// ParameterReader is the one SSM call SeedFromSSM makes; *ssm.Client is
// one, and a test passes its own.
type ParameterReader interface {
	GetParameter(ctx context.Context, in *ssm.GetParameterInput, opts ...func(*ssm.Options)) (*ssm.GetParameterOutput, error)
}

// SeedFromSSM reads the control-plane seed from the SecureString parameter
// name, decrypted. Read once per container, at start: a claim must not
// wait on SSM, and a key rotation is a deployment (every paired device
// pinned the old public key and has to be told).
func SeedFromSSM(ctx context.Context, api ParameterReader, name string) ([]byte, error) {
	out, err := api.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(name), WithDecryption: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("grants: read parameter %s: %w", name, err)
	}
	if out.Parameter == nil || out.Parameter.Value == nil {
		return nil, fmt.Errorf("grants: parameter %s has no value", name)
	}
	// A String parameter is readable by anyone with ssm:GetParameter on it,
	// decryption or not; the key must have been stored as a SecureString.
	if out.Parameter.Type != types.ParameterTypeSecureString {
		return nil, errors.New("grants: parameter " + name + " is not a SecureString; store the key encrypted")
	}
	seed, err := ParseSeed(*out.Parameter.Value)
	if err != nil {
		return nil, fmt.Errorf("parameter %s: %w", name, err)
	}
	return seed, nil
}
