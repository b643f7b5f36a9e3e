# Fleet in Go — build, generate, verify and test.
#
# Tool versions are pinned in hack/tools/go.mod (controller-gen, helm) and
# hack/controlplane/go.mod (kube-apiserver, etcd). Nothing is downloaded except
# Go modules through the module proxy.

SHELL := /usr/bin/env bash -o pipefail
BIN   := $(CURDIR)/bin
CP    := $(BIN)/controlplane
GO    ?= go
# BUILD_TAGS are the tags of every binary (internal/version.BuildTags says why).
BUILD_TAGS := kustomize_disable_go_plugin_support
GOTESTFLAGS ?= -timeout 40m
# An execution count, not a duration: with a duration, Go 1.26's fuzz
# coordinator can report its own deadline as a failure on a loaded machine
# (go.dev/issue/75804, fixed in Go 1.27); a count has no deadline to race.
FUZZTIME ?= 5000x

CONTROLLER_GEN := $(BIN)/controller-gen
HELM           := $(BIN)/helm
CP_STAMP       := $(CP)/.stamp-$(shell sha256sum hack/controlplane/go.mod hack/controlplane/go.sum | sha256sum | cut -c1-12)
TOOLS_STAMP    := $(BIN)/.tools-$(shell sha256sum hack/tools/go.mod hack/tools/go.sum | sha256sum | cut -c1-12)

export KUBEBUILDER_ASSETS := $(CP)
export FLEET_HELM_BIN := $(HELM)

.PHONY: all
all: build

## build: the three binaries into bin/
.PHONY: build
build:
	$(GO) build -tags $(BUILD_TAGS) -o $(BIN)/ ./cmd/fleet ./cmd/fleet-controller ./cmd/fleet-agent

## quickstart: a whole Fleet on this machine (3 embedded clusters, manager, 2 agents, example GitRepo)
.PHONY: quickstart
quickstart: build
	$(BIN)/fleet dev up --no-build

## controlplane: kube-apiserver and etcd for tests, built from source (first time ~5-10 min)
.PHONY: controlplane
controlplane: $(CP_STAMP)

$(CP_STAMP): hack/controlplane/go.mod hack/controlplane/go.sum
	@mkdir -p $(CP)
	@echo ">> building etcd (pinned in hack/controlplane/go.mod)"
	cd hack/controlplane && $(GO) build -trimpath -ldflags='-s -w' -o $(CP)/etcd go.etcd.io/etcd/server/v3
	@echo ">> building kube-apiserver (pinned in hack/controlplane/go.mod; the first build takes several minutes)"
	cd hack/controlplane && $(GO) build -trimpath -ldflags='-s -w' -o $(CP)/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
	@rm -f $(CP)/.stamp-* && touch $@

## tools: controller-gen and helm
.PHONY: tools
tools: $(TOOLS_STAMP)

$(TOOLS_STAMP): hack/tools/go.mod hack/tools/go.sum
	@mkdir -p $(BIN)
	cd hack/tools && $(GO) build -o $(BIN)/controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen
	cd hack/tools && $(GO) build -o $(BIN)/helm helm.sh/helm/v4/cmd/helm
	@rm -f $(BIN)/.tools-* && touch $@

## generate: deepcopy functions and CRDs (into charts/fleet-crd/templates)
.PHONY: generate
generate: tools
	$(CONTROLLER_GEN) object paths=./api/...
	rm -f charts/fleet-crd/templates/fleet.cattle.io_*.yaml
	$(CONTROLLER_GEN) crd:allowDangerousTypes=false paths=./api/... output:crd:dir=charts/fleet-crd/templates

## verify: fails when generated files are stale, go.mod is untidy or Go code is not gofmt'ed
.PHONY: verify
verify: generate
	$(GO) mod tidy
	cd hack/tools && $(GO) mod tidy
	cd hack/controlplane && $(GO) mod tidy
	@if [ -n "$$(git status --porcelain -- api charts go.mod go.sum hack)" ]; then \
		echo "generated files or go.mod are out of date; run 'make generate' and 'go mod tidy':"; \
		git status --porcelain -- api charts go.mod go.sum hack; git diff --stat -- api charts go.mod go.sum hack; exit 1; fi
	@unformatted="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$unformatted" ]; then \
		echo "not gofmt'ed (run gofmt -w):"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

## test: verify (generated code, CRDs, go.mod, vet), then the whole suite against real kube-apiservers, then fuzzing
.PHONY: test
test: controlplane verify
	$(GO) test $(GOTESTFLAGS) ./...
	$(MAKE) fuzz

## fuzz: short fuzzing runs of the parsers that take outside input
.PHONY: fuzz
fuzz:
	@for target in $$(grep -rl --include='*_test.go' '^func Fuzz' internal | xargs -r -n1 dirname | sort -u); do \
		for f in $$(grep -h '^func Fuzz' $$target/*_test.go | sed 's/func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
			echo ">> fuzz $$target $$f"; \
			$(GO) test ./$$target -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) || exit 1; \
		done; \
	done

## bench: the scale benchmark (docs/scale.md); SCENARIOS="1k-1 50x50 10k-10 idle register-1k", BENCH_FLAGS="-idle 2m"
SCENARIOS   ?= tiny
BENCH_FLAGS ?=
BENCH_OUT   ?= $(CURDIR)/bin/bench
.PHONY: bench
bench: controlplane
	$(GO) run -tags $(BUILD_TAGS) ./test/scale -out $(BENCH_OUT) $(BENCH_FLAGS) $(SCENARIOS)

## images: the fleet-controller and fleet-agent container images, tagged as the charts expect
## (skipped with a message when no container engine is available)
CONTAINER_ENGINE ?= $(shell command -v docker 2>/dev/null || command -v podman 2>/dev/null)
IMAGE_REPO       ?= ghcr.io/fleetgo
IMAGE_TAG        ?= $(shell sed -n 's/^appVersion: //p' charts/fleet/Chart.yaml)
.PHONY: images
images:
	@if [ -z "$(CONTAINER_ENGINE)" ] || ! $(CONTAINER_ENGINE) info >/dev/null 2>&1; then \
		echo ">> images: no working container engine (docker or podman); skipping"; exit 0; fi; \
	for t in fleet-controller fleet-agent; do \
		$(CONTAINER_ENGINE) build -f build/Dockerfile --target $$t \
			--build-arg VERSION=$(IMAGE_TAG) --build-arg COMMIT=$$(git rev-parse --short HEAD) \
			-t $(IMAGE_REPO)/$$t:$(IMAGE_TAG) . || exit 1; \
	done

.PHONY: clean
clean:
	rm -rf $(BIN)
