package grants_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/byorelay/byorelay/controlplane/grants"
)

func TestASeedRoundTripsThroughItsStoredForm(t *testing.T) {
	seed, err := grants.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{
		grants.EncodeSeed(seed),
		grants.EncodeSeed(seed) + "\n",
		base64.RawURLEncoding.EncodeToString(seed),
	} {
		got, err := grants.ParseSeed(text)
		if err != nil || !bytes.Equal(got, seed) {
			t.Fatalf("ParseSeed(%q) = %x, %v", text, got, err)
		}
	}
}

func TestParseSeedRefusesWithoutQuotingTheValue(t *testing.T) {
	for _, text := range []string{"", "not base64 at all!", base64.StdEncoding.EncodeToString([]byte("sixteen byte key"))} {
		_, err := grants.ParseSeed(text)
		if err == nil {
			t.Fatalf("ParseSeed(%q) accepted", text)
		}
		if text != "" && strings.Contains(err.Error(), text) {
			t.Fatalf("the error %q quotes the secret", err)
		}
	}
}

func TestTheLocalSeedFileIsMadeOnceOwnerOnlyAndReused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demo", "control-plane.key")
	first, err := grants.LoadOrCreateSeedFile(path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("the key file is %v, want owner-only", info.Mode().Perm())
	}
	again, err := grants.LoadOrCreateSeedFile(path)
	if err != nil || !bytes.Equal(first, again) {
		t.Fatal("a second start made a new key: every device paired before would refuse every grant")
	}
}

type fakeSSM struct {
	param *types.Parameter
	err   error
	asked *ssm.GetParameterInput
}

func (f *fakeSSM) GetParameter(_ context.Context, in *ssm.GetParameterInput, _ ...func(*ssm.Options)) (*ssm.GetParameterOutput, error) {
	f.asked = in
	if f.err != nil {
		return nil, f.err
	}
	return &ssm.GetParameterOutput{Parameter: f.param}, nil
}

func TestTheSeedIsReadDecryptedFromASecureStringParameter(t *testing.T) {
	seed, _ := grants.NewSeed()
	api := &fakeSSM{param: &types.Parameter{Type: types.ParameterTypeSecureString, Value: aws.String(grants.EncodeSeed(seed))}}
	got, err := grants.SeedFromSSM(context.Background(), api, "/byorelay/grant-key")
	if err != nil || !bytes.Equal(got, seed) {
		t.Fatalf("SeedFromSSM = %x, %v", got, err)
	}
	if aws.ToString(api.asked.Name) != "/byorelay/grant-key" || !aws.ToBool(api.asked.WithDecryption) {
		t.Fatalf("asked %+v, want the named parameter, decrypted", api.asked)
	}
}

func TestTheSeedIsRefusedFromAPlainParameterOrAFailedRead(t *testing.T) {
	seed, _ := grants.NewSeed()
	tests := []struct {
		name string
		api  *fakeSSM
	}{
		{"a plain String parameter", &fakeSSM{param: &types.Parameter{Type: types.ParameterTypeString, Value: aws.String(grants.EncodeSeed(seed))}}},
		{"a parameter with no value", &fakeSSM{param: &types.Parameter{Type: types.ParameterTypeSecureString}}},
		{"a value that is not a seed", &fakeSSM{param: &types.Parameter{Type: types.ParameterTypeSecureString, Value: aws.String("c2hvcnQ=")}}},
		{"a failed read", &fakeSSM{err: errors.New("AccessDenied")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := grants.SeedFromSSM(context.Background(), tt.api, "/p"); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
