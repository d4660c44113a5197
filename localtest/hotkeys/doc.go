// Package hotkeys is the partition-key count: the relay as deployed
// (every HTTP function of template.yaml over one lambdafn.Stack on
// DynamoDB Local, behind the local API server), its projection imported
// through the control plane's Admin, driven by real Go clients (the
// client/daemon daemons and client/site sites) through 1,000 signed
// protocol requests, while SDK middleware on the stack's AWS config names
// the partition keys of every DynamoDB call each request makes
// (internal/bench/partkey, the same names the bench meters by).
//
// DynamoDB serves one partition key from one partition, at most 3,000
// strongly consistent reads and 1,000 writes a second, and cannot split an
// item. A key that a fixed share of all requests touch therefore caps the
// whole relay at that partition's rate, however many sites and daemons
// share it. The test fails when any key is touched by more than an eighth
// of the requests, printing the ten hottest. It runs two fleets of 100
// devices of 100 owners: over ten sites (TestNoPartitionKeyIsHot), and all
// consenting to one site (TestNoPartitionKeyIsHotForOneSite), where every
// request names the same site, so a key of that site's alone that each of
// its requests touches caps one site at one partition's rate.
//
//	go run ./localtest/withservices -- go test -count=1 -run TestNoPartitionKeyIsHot ./localtest/hotkeys/
package hotkeys
