// Package paramstore reads SSM Parameter Store parameters with one signed
// HTTPS call (the GetParameters action of SSM's JSON protocol), not the
// SDK's ssm client. A deployed function reads a parameter or two at start
// and about once a minute after; the ssm client's package initialisation
// alone allocated 1.44 MB and ~36 ms at every cold start of every function
// that linked it. The call is lambdafn/awscall's.
package paramstore

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/byorelay/byorelay/lambdafn/awscall"
)

// Parameter is one parameter as read, decrypted.
type Parameter struct {
	Name string `json:"Name"`
	// Type is "String", "StringList" or "SecureString".
	Type  string `json:"Type"`
	Value string `json:"Value"`
}

// SecureString is the Type of an encrypted parameter.
const SecureString = "SecureString"

// Client reads parameters.
type Client struct {
	call *awscall.Client
}

// New is a client for cfg's region and credentials. endpoint overrides the
// regional endpoint (a local stand-in); "" takes cfg.BaseEndpoint, and
// without that the region's public endpoint.
func New(cfg aws.Config, endpoint string) *Client {
	return &Client{call: awscall.New(cfg, "ssm", endpoint)}
}

// maxResponse bounds what a reply may be: ten parameters of at most 8 KB
// each, with room for the JSON around them.
const maxResponse = 1 << 20

// Get reads names (at most ten, SSM's limit for one call), decrypted.
// A name that does not exist is absent from the answer, not an error, as
// in GetParameters itself.
func (c *Client) Get(ctx context.Context, names ...string) ([]Parameter, error) {
	body, err := json.Marshal(struct {
		Names          []string
		WithDecryption bool
	}{names, true})
	if err != nil {
		return nil, err
	}
	reply, err := c.call.Post(ctx, http.Header{
		"Content-Type": {"application/x-amz-json-1.1"},
		"X-Amz-Target": {"AmazonSSM.GetParameters"},
	}, body, maxResponse)
	if err != nil {
		return nil, fmt.Errorf("paramstore: GetParameters: %w", err)
	}
	raw := reply.Body
	if reply.StatusCode != http.StatusOK {
		var e struct {
			Type    string `json:"__type"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(raw, &e)
		// The type arrives as "com.amazonaws...#AccessDeniedException" from
		// some endpoints; the part after '#' is the name.
		if i := strings.LastIndexByte(e.Type, '#'); i >= 0 {
			e.Type = e.Type[i+1:]
		}
		return nil, fmt.Errorf("paramstore: GetParameters: %s %s: %s", reply.Status, e.Type, e.Message)
	}
	var out struct {
		Parameters []Parameter
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("paramstore: GetParameters: reply: %w", err)
	}
	return out.Parameters, nil
}
