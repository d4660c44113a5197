package paramstore_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/byorelay/byorelay/internal/platform/paramstore"
	"github.com/byorelay/byorelay/localtest"
)

func TestMain(m *testing.M) { localtest.Main(m) }

// Parameters written to moto's SSM read back through Get: a SecureString
// decrypted with its type, a String as it is, and a name that does not
// exist simply absent.
func TestGetReadsParametersWrittenByTheSDK(t *testing.T) {
	ctx := context.Background()
	cfg := localtest.AWSConfig(localtest.MotoEndpoint(t))
	sdk := ssm.NewFromConfig(cfg)
	base := "/" + localtest.UniqueName("paramstore")
	put := func(name, value string, typ types.ParameterType) {
		t.Helper()
		if _, err := sdk.PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String(name), Value: aws.String(value), Type: typ}); err != nil {
			t.Fatal(err)
		}
	}
	put(base+"/secret", "s3cr=t+/\"value", types.ParameterTypeSecureString)
	put(base+"/plain", "plain value", types.ParameterTypeString)

	got, err := paramstore.New(cfg, "").Get(ctx, base+"/secret", base+"/plain", base+"/missing")
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(a, b paramstore.Parameter) int { return strings.Compare(a.Name, b.Name) })
	want := []paramstore.Parameter{
		{Name: base + "/plain", Type: "String", Value: "plain value"},
		{Name: base + "/secret", Type: paramstore.SecureString, Value: "s3cr=t+/\"value"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Get = %+v\nwant %+v", got, want)
	}
}

// A refusal from the service is an error that names it, not an empty read.
func TestGetReportsTheServicesRefusal(t *testing.T) {
	cfg := localtest.AWSConfig(localtest.MotoEndpoint(t))
	names := make([]string, 11) // SSM takes at most ten names per call
	for i := range names {
		names[i] = "/p" + string(rune('a'+i))
	}
	_, err := paramstore.New(cfg, "").Get(context.Background(), names...)
	if err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("Get of eleven names = %v, want the service's 400 refusal", err)
	}
}
