package main

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/kms"

	"github.com/byorelay/byorelay/internal/controlplane/grants"
)

// kmsAuthor is the author over the KMS key keyID: the signer the deployed
// claim function uses, with the AWS configuration the SDK finds for a
// person (environment, shared files, SSO; AWS_ENDPOINT_URL_KMS for a
// stand-in). It reads the key's public half now, so a key devices could
// not verify stops serve before the banner. where names the key's ARN for
// the banner.
func kmsAuthor(ctx context.Context, keyID string) (author *grants.Author, where string, err error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("--grant-kms-key: %w", err)
	}
	signer, err := grants.NewKMSSigner(ctx, kms.NewFromConfig(cfg), keyID)
	if err != nil {
		return nil, "", fmt.Errorf("--grant-kms-key: %w", err)
	}
	return grants.NewWithSigner(signer, grants.Options{}), "KMS " + signer.KeyARN(), nil
}
