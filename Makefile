# qdr-operator: build, test and run targets. `make help` lists them.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
CARGO ?= cargo
CARGO_TARGET_DIR_OR_DEFAULT := $(or $(CARGO_TARGET_DIR),target)
# The project's canonical home (image registry, source, chart repository, docs site).
include deploy/project.env

# A release (make release): the version (the workspace's unless given), the registry (the
# project's home unless given) and where it is written.
VERSION ?= $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' Cargo.toml | head -1)
REGISTRY ?= $(QDR_IMAGE_REGISTRY)
DIST ?= dist
# cargo-auditable embeds each program's dependency list in it, which syft reads for the SBOM.
CARGO_AUDITABLE_VERSION := 0.7.7

.PHONY: help testbin router-image test fmt lint flags-reference helm-values-reference crd monitoring docs api-reference bench run run-real images release bundle deploy dev-cluster clean-testbin validate-command

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

testbin: ## Build (once, cached) every Go test tool: the control plane and kwok (core), the real node's kubelet, kube-proxy, pause and CoreDNS (node), helm, Prometheus with its operator (monitoring), OLM (olm); print where
	@tools/testbin/build.sh

router-image: ## Build (once, cached) the router image from source: qpid-proton 0.37.0 and qpid-dispatch 1.19.0 from $$QDR_ROUTER_SOURCES (unset: the pinned git tags); print the archive
	@tools/router-image/build.sh

fmt: ## Format the code
	$(CARGO) fmt --all

lint: ## rustfmt check and clippy with warnings as errors
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

docs: api-reference ## Build the book (docs/, mdBook) into target/book and redraw its pictures (docs/diagrams/*.svg, from the .dot files); open target/book/index.html
	tools/book/build.sh $(CARGO_TARGET_DIR_OR_DEFAULT)/book
	cp $(CARGO_TARGET_DIR_OR_DEFAULT)/book.src/diagrams/*.svg docs/diagrams/

api-reference: ## Regenerate docs/api-reference.md from the CRD (make test fails when it is stale)
	$(CARGO) run --locked -q -p qdr-api --bin docgen > docs/api-reference.md

flags-reference: ## Regenerate docs/flags.md (every flag and environment variable of both programs, from their argument parsers; make test fails when it is stale)
	$(CARGO) build --locked -p qdr-controller -p qdr-webhook --bin qdr-controller --bin qdr-webhook
	tools/flags/reference.sh $(CARGO_TARGET_DIR_OR_DEFAULT)/debug > docs/flags.md

helm-values-reference: ## Regenerate docs/helm-values.md (every value of the Helm chart, from the comments of its values.yaml; make test fails when it is stale)
	$(CARGO) run --locked -q -p qdr-tests --bin helm-values-reference > docs/helm-values.md

crd: ## Regenerate the committed CRDs (Interconnect, AccessGrant, Link: deploy/crds/ and the Helm chart's copies) from the API types
	for c in interconnects accessgrants links; do \
	  $(CARGO) run --locked -q -p qdr-api --bin crdgen $$c > deploy/crds/$$c.interconnectedcloud.github.io.yaml; \
	  cp deploy/crds/$$c.interconnectedcloud.github.io.yaml deploy/helm/qdr-operator/crds/; \
	done

bundle: ## Regenerate the OLM bundle (bundle/: CSV, CRD, metadata, scorecard config, bundle.Dockerfile) from deploy/ and deploy/olm/ (make test fails when it is stale)
	$(CARGO) run --locked -q -p qdr-api --bin bundlegen

monitoring: ## Copy the monitoring component's files (deploy/components/monitoring) into the Helm chart's files/
	cp deploy/components/monitoring/pod-monitors.yaml deploy/components/monitoring/prometheus-rule.yaml \
	  deploy/components/monitoring/dashboard.json deploy/helm/qdr-operator/files/

# `make test` runs as a graph (make's own parallelism, TEST_JOBS jobs at once), so the builds
# and the tests overlap on a 2-core machine:
#   - one Rust build (`cargo test --no-run`: every test executable and every binary, in the
#     dev profile; the tests' images and `make run` use those same binaries), then lint;
#   - the Go test tools by group (tools/testbin/build.sh core, node, helm, monitoring, olm),
#     one group after another, beside the Rust build; the router image beside both;
#   - each test executable as soon as what it runs is built: those that need no real node in
#     one lane, those that run the real node (one per machine, tests/src/real_node.rs) in a
#     second, each lane one executable after another (more lanes made the slowest tests no
#     faster and the timing-sensitive ones flaky on 2 cores).
# Builds run at the lowest CPU priority (nice 19), so a compile does not squeeze a test's
# timing; the control-plane lane runs at nice 5, below the real node's lane, whose
# kubelet, probes and routers are the most timing-sensitive (a router that misses its
# liveness probe under load is restarted). `make -k`: every executable runs even after one fails; the exit status says
# whether all passed, and the last lines list each executable's time and result.
TEST_JOBS ?= 6
# `make -n test` (the docs test dry-runs every target the docs name) only prints the graph.
DRY_RUN := $(findstring n,$(firstword -$(MAKEFLAGS)))
T := $(CARGO_TARGET_DIR_OR_DEFAULT)
# Builds under make -j: cargo and rustc would read make's jobserver from MAKEFLAGS, whose
# descriptors they are not given (only $(MAKE) lines get them); they run on their own.
NICE := env -u MAKEFLAGS -u MFLAGS nice -n 19
TESTBIN = $$(tools/testbin/build.sh --print)
# The test sources, by lane. Those that start a real node say so in their source; IT_REAL
# lists them in the order their lane runs them.
# A test program is a file in a crate's tests/, or a folder there with a main.rs.
IT_ALL := $(sort $(wildcard $(foreach c,api certs controller webhook tests,$(c)/tests/*.rs $(c)/tests/*/main.rs)))
IT_REAL := tests/tests/real_node.rs tests/tests/routers/main.rs tests/tests/install.rs tests/tests/day_two.rs \
  tests/tests/local_run.rs tests/tests/monitoring.rs tests/tests/olm.rs tests/tests/bench_smoke.rs
IT_REAL_FOUND := $(sort $(shell grep -l 'real_node' $(IT_ALL) 2>/dev/null))
IT_PLAIN := $(filter-out $(IT_REAL),$(IT_ALL))
# The others, in one lane (A then B: the longest first); the chart tests last (they wait for helm).
IT_LANE_A := controller/tests/hostile.rs controller/tests/faults.rs controller/tests/edits.rs \
  controller/tests/rbac.rs tests/tests/docs.rs webhook/tests/e2e.rs controller/tests/lease.rs
IT_LANE_B := $(filter-out $(IT_LANE_A) tests/tests/deploy.rs,$(IT_PLAIN)) tests/tests/deploy.rs

test: ## Everything CI runs: lint, unit tests and integration tests on a real control plane (and a real node with real routers); builds and tests overlap (TEST_JOBS)
	@rm -rf $(T)/test-results.txt $(T)/test-logs
	@mkdir -p $(T)
	@[[ "$(sort $(IT_REAL))" == "$(IT_REAL_FOUND)" ]] || { echo "Makefile: IT_REAL ($(IT_REAL)) must list exactly the test sources that start a real node ($(IT_REAL_FOUND))" >&2; exit 1; }
	@if [[ -n "$(DRY_RUN)" ]]; then $(MAKE) --no-print-directory test-graph; exit 0; fi; \
	  start=$$(date +%s); rc=0; \
	  $(MAKE) --no-print-directory -k -j$(TEST_JOBS) --output-sync=target test-graph || rc=$$?; \
	  echo "== test executables (seconds, result, source):"; sort -k3 $(T)/test-results.txt 2>/dev/null | sed 's/^/   /'; \
	  for src in unit $(IT_ALL); do \
	    grep -qx "[0-9]* ok $$src" $(T)/test-results.txt 2>/dev/null || { echo "== did not pass: $$src"; rc=1; \
	      grep -h -A4 -e "panicked at" $(T)/test-logs/$${src//\//_}.log 2>/dev/null | grep -v "^stack backtrace:" | head -30 | sed 's/^/   | /' || true; }; \
	  done; \
	  if ((rc)); then echo "== disk at the end:"; df -h $(T) $${TMPDIR:-/tmp} | sed 's/^/   /'; fi; \
	  echo "== make test: $$( ((rc)) && echo FAILED || echo passed) in $$(( $$(date +%s) - start ))s"; exit $$rc

.PHONY: test-graph test-build test-lint test-unit test-doc test-router-image
test-graph: test-lint test-doc test-unit $(addprefix test-run/,$(IT_ALL))

# The one Rust build: cargo prints where each test executable is (run by tools/test/run.sh).
test-build:
	$(NICE) $(CARGO) test --workspace --locked --no-run --message-format=json-render-diagnostics > $(T)/test-executables.json.tmp
	mv $(T)/test-executables.json.tmp $(T)/test-executables.json
# Lint after the build (cargo takes one build at a time): the tests are running by then.
test-lint: test-build
	env -u MAKEFLAGS -u MFLAGS $(CARGO) fmt --all --check
	$(NICE) $(CARGO) clippy --workspace --all-targets --locked -- -D warnings
test-doc: test-lint
	$(NICE) $(CARGO) test --workspace --locked --doc
test-unit: test-build
	@tools/test/run.sh $(T)/test-executables.json $(T)/test-results.txt unit

# The Go tools, a group at a time (each group reuses the Go build cache the one before filled).
testbin-%:
	@$(NICE) tools/testbin/build.sh $* >/dev/null
testbin-node: testbin-core
testbin-helm: testbin-node
testbin-monitoring: testbin-helm
testbin-olm: testbin-monitoring
test-router-image:
	@$(NICE) tools/router-image/build.sh >/dev/null

# One target per test source; each waits for what it runs, and the one before it in its lane.
test-run/%: test-build testbin-core
	@QDR_TESTBIN="$(TESTBIN)" $(if $(filter $(IT_REAL),$*),,nice -n 5) tools/test/run.sh $(T)/test-executables.json $(T)/test-results.txt $*
test-run/tests/tests/deploy.rs: testbin-helm
test-run/tests/tests/real_node.rs: testbin-node
test-run/tests/tests/routers/main.rs: testbin-node test-router-image
test-run/tests/tests/install.rs: testbin-helm test-router-image
test-run/tests/tests/day_two.rs: test-router-image
test-run/tests/tests/local_run.rs: test-router-image
test-run/tests/tests/monitoring.rs: testbin-monitoring test-router-image
test-run/tests/tests/olm.rs: testbin-olm
test-run/tests/tests/bench_smoke.rs: testbin-node test-router-image
# chain(sources): each source's run after the run of the one before it.
chain = $(if $(word 2,$(1)),$(eval test-run/$(word 2,$(1)): | test-run/$(word 1,$(1)))$(call chain,$(wordlist 2,$(words $(1)),$(1))))
$(call chain,$(IT_REAL))
$(call chain,$(IT_LANE_A) $(IT_LANE_B))

images: ## Build the operator's images as deploy/docker/*.Dockerfile define them: the release binaries (qdr-controller, qdr-webhook) and each image's root filesystem (deploy/docker/rootfs.sh) in target/images/
	$(CARGO) build --locked --release -p qdr-controller -p qdr-webhook --bin qdr-controller --bin qdr-webhook
	rm -rf $(CARGO_TARGET_DIR_OR_DEFAULT)/images/controller $(CARGO_TARGET_DIR_OR_DEFAULT)/images/webhook
	deploy/docker/rootfs.sh $(CARGO_TARGET_DIR_OR_DEFAULT)/release/qdr-controller $(CARGO_TARGET_DIR_OR_DEFAULT)/images/controller
	deploy/docker/rootfs.sh $(CARGO_TARGET_DIR_OR_DEFAULT)/release/qdr-webhook $(CARGO_TARGET_DIR_OR_DEFAULT)/images/webhook

release: ## Write a release into dist/ (VERSION=… REGISTRY=… DIST=…; defaults: the workspace version, the project's registry): OCI archives of the controller, the webhook and the router built from source (this machine's architecture), install.yaml and install-namespaced.yaml with every image by digest, the Helm chart, the OLM bundle, the kubectl-qdr and qdr-validate programs, an SBOM per image (syft) and SHA256SUMS (docs/releasing.md)
	$(CARGO) install --locked --quiet cargo-auditable@$(CARGO_AUDITABLE_VERSION) --root $(abspath $(T))/tools
	PATH="$(abspath $(T))/tools/bin:$$PATH" $(CARGO) auditable build --locked --release -p qdr-controller -p qdr-webhook \
	  --bin qdr-controller --bin qdr-webhook --bin kubectl-qdr
	PATH="$(abspath $(T))/tools/bin:$$PATH" $(CARGO) auditable build --locked --release -p qdr-webhook \
	  --features validate-command --bin qdr-validate
	$(CARGO) build --locked -p qdr-tests --bin qdr-release
	router="$$(tools/router-image/build.sh | tail -1)"; testbin="$$(tools/testbin/build.sh core helm release)"; \
	  QDR_TESTBIN="$$testbin" $(T)/debug/qdr-release --version "$(VERSION)" --registry "$(REGISTRY)" --out "$(DIST)" \
	    --binaries $(T)/release --router-archive "$$router" --syft "$$testbin/syft"

bench: router-image ## Benchmarks: per-object cost, the admission handler alone, webhook over HTTPS, API server, controller convergence, day two on real routers, the cost of reading the routers (one table)
	$(CARGO) bench --locked -p qdr-controller --bench per_object
	$(CARGO) bench --locked -p qdr-webhook --bench handler
	$(CARGO) build --locked --release --bins
	testbin="$$(tools/testbin/build.sh)"; QDR_TESTBIN="$$testbin" $(CARGO_TARGET_DIR_OR_DEFAULT)/release/qdr-bench

validate-command: ## Build qdr-validate (offline manifest checks) into the release directory
	$(CARGO) build --locked --release -p qdr-webhook --features validate-command --bin qdr-validate
	@echo "$(CARGO_TARGET_DIR_OR_DEFAULT)/release/qdr-validate"

run: ## Run the whole system on a local control plane with the examples, until Ctrl-C (builds the binaries and, once, the control plane: nothing else)
	$(CARGO) build --locked --bins
	testbin="$$(tools/testbin/build.sh core)"; QDR_TESTBIN="$$testbin" $(CARGO_TARGET_DIR_OR_DEFAULT)/debug/local-run

run-real: router-image ## Like `run`, on a real node (kubelet, containerd; as root): the operator installed from deploy/ as pods (images of the binaries `run` builds), and real routers from the image built from source, with the mesh they see and messages through it
	$(CARGO) build --locked --bins
	testbin="$$(tools/testbin/build.sh core node)"; QDR_TESTBIN="$$testbin" $(CARGO_TARGET_DIR_OR_DEFAULT)/debug/local-run --real

deploy: ## Install deploy/ into the cluster of the current kubeconfig (kubectl apply -k)
	kubectl apply -k deploy/

dev-cluster: ## Run the local control plane (kube-controller-manager, kube-scheduler, 3 kwok nodes) until Ctrl-C
	$(CARGO) build --locked --bins
	testbin="$$(tools/testbin/build.sh core)"; QDR_TESTBIN="$$testbin" $(CARGO_TARGET_DIR_OR_DEFAULT)/debug/dev-cluster

clean-testbin: ## Remove the cached control-plane binaries
	rm -rf "$$(dirname "$$(tools/testbin/build.sh --print)")"
