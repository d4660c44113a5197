// Package e2e holds the end-to-end tests: Go sites and Go daemons
// (client/site, client/daemon) against the local stack, every function of
// template.yaml behind the local API server over DynamoDB Local, exactly as
// CI runs it. The tests are the package; there is no library here.
package e2e
