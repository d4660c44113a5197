package admincli

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// sigV4Service is what API Gateway's IAM authorisation checks signatures
// for.
const sigV4Service = "execute-api"

// SigV4Transport signs each request with AWS Signature Version 4 for
// execute-api before sending it.
type SigV4Transport struct {
	base   http.RoundTripper
	creds  aws.CredentialsProvider
	region string
	signer *v4.Signer
	// now is the signing time; the host clock (SigV4 is checked against
	// AWS's clock, so there is nothing to inject but tests).
	now func() time.Time
}

// NewSigV4Transport signs with creds for region and sends through base
// (http.DefaultTransport if nil).
func NewSigV4Transport(base http.RoundTripper, creds aws.CredentialsProvider, region string) *SigV4Transport {
	if base == nil {
		base = http.DefaultTransport
	}
	return &SigV4Transport{base: base, creds: creds, region: region, signer: v4.NewSigner(), now: time.Now}
}

// RoundTrip signs a copy of req and sends it.
func (t *SigV4Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	signed := req.Clone(req.Context())
	signed.Body = io.NopCloser(bytes.NewReader(body))
	signed.ContentLength = int64(len(body))
	signed.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	creds, err := t.creds.Retrieve(req.Context())
	if err != nil {
		return nil, fmt.Errorf("AWS credentials: %w", err)
	}
	sum := sha256.Sum256(body)
	if err := t.signer.SignHTTP(req.Context(), creds, signed, hex.EncodeToString(sum[:]), sigV4Service, t.region, t.now()); err != nil {
		return nil, fmt.Errorf("sign request: %w", err)
	}
	return t.base.RoundTrip(signed)
}
