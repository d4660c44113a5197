// Package lambdafn wires byorelay's Lambda functions: the registry of every
// function the template deploys (Functions), configuration from the
// environment (Env), the sweeper (SweepHandler) with its
// EventBridge Scheduler wake-ups (Waker), CloudWatch metrics in embedded
// metric format (EMF) and churn reports to SNS (ChurnPublisher).
//
// What both stacks' functions share (the AWS configuration from Lambda's
// environment, the API Gateway HTTP API payload 2.0 translation, Start) is
// in internal/platform/container, which the site stack (sitefn) imports instead of
// this package and its clients.
//
// # AWS calls
//
// Every call to an AWS service goes through the SDK's own client for it:
// DynamoDB for the store, and internal/platform/paramstore (SSM), internal/platform/objects
// (S3), Waker (EventBridge Scheduler) and ChurnPublisher (SNS), so the
// SDK keeps their addressing, signing, error decoding and retries right.
// Those four build their client on first use, not at init: most
// containers never offload an envelope, report churn or set a wake-up.
// All take the aws.Config internal/platform/container reads from Lambda's
// environment, with the same AWS_ENDPOINT_URL_<SERVICE> overrides.
//
// functions/<name>/main.go calls Start with its name and nothing else; all
// the logic is here, testable without Lambda, and the local server
// (localtest/apiserver) runs the very same handlers in-process. Developer
// tooling (the runtime interface emulator, `byorelay invoke`, the demo
// world) lives in localtest/lambdadev and localtest/demo: every function
// links this package, so nothing only a developer needs belongs here.
//
// # One router, many functions
//
// API Gateway picks a function by route; every relay function then runs the
// relay's shared router on the request. The reference's dispatch quirks
// (version check before anything on /byollm/* and /relay/*, last-segment
// dispatch under the base path, JSON 404s) so come out identical whichever
// function answers, and the catch-all ($default route) answers everything
// else exactly as the reference does. What differs per function is its IAM
// policy (template.yaml).
//
// # Size limits near the protocol's 6 MiB envelope
//
// A synchronous Lambda invocation carries at most 6 MB of event and 6 MB of
// response, and API Gateway wraps the request body in the event JSON
// (escaped, and base64-encoded for a non-text content type: 4/3 larger).
// So a payload or result whose envelope approaches the protocol's
// MAX_ENVELOPE_BYTES never reaches the relay's own size check: the client
// gets API Gateway's error for a failed invocation (a 5xx with API
// Gateway's {"message": ...} body, not a BYOLLM error body; the exact
// status is not verified here), and a fetch of such an envelope fails the
// same way on the way out. In practice an application/json body (what
// daemons and sites send) fits up to a little under 6 MB, the event's own
// JSON and headers taking the rest; a body API Gateway base64-encodes (a
// non-text content type) fits only up to about 4.5 MB. The S3 offload in
// store/dynamo keeps items small but does not lift this transport limit.
package lambdafn
