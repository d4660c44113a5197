// Package lambdadev runs byorelay's functions the way Lambda does, on a
// developer's machine, the relay's and the site stack's: each built as
// deployed (BuildBootstrap, BuildAll) and started under the pinned Lambda
// runtime interface emulator (StartEmulator), or its handler called in-process (InvokeInProcess,
// InvokeSiteInProcess), with the sample events in events/ re-signed by the
// demo keys (PrepareEvent, PrepareSiteEvent).
// `byorelay invoke`, `make invoke` and the bench's cold starts use it.
//
// It is not in lambdafn because every function links lambdafn: what only a
// developer needs would otherwise be in every deployed binary.
package lambdadev
