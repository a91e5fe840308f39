# qdr-operator: build, test and run targets. `make help` lists them.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
CARGO ?= cargo
CARGO_TARGET_DIR_OR_DEFAULT := $(or $(CARGO_TARGET_DIR),target)

.PHONY: help testbin router-image test fmt lint crd monitoring docs api-reference bench run run-real images bundle deploy dev-cluster clean-testbin validate-command

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

testbin: ## Build (once, cached) etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok, kubelet, kube-proxy, pause, helm and CoreDNS; print where
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

crd: ## Regenerate the committed CRD (deploy/ and the Helm chart's copy) from the API types
	$(CARGO) run --locked -q -p qdr-api --bin crdgen > deploy/crds/interconnects.interconnectedcloud.github.io.yaml
	cp deploy/crds/interconnects.interconnectedcloud.github.io.yaml deploy/helm/qdr-operator/crds/

bundle: ## Regenerate the OLM bundle (bundle/: CSV, CRD, metadata, scorecard config, bundle.Dockerfile) from deploy/ and deploy/olm/ (make test fails when it is stale)
	$(CARGO) run --locked -q -p qdr-api --bin bundlegen

monitoring: ## Copy the monitoring component's files (deploy/components/monitoring) into the Helm chart's files/
	cp deploy/components/monitoring/pod-monitors.yaml deploy/components/monitoring/prometheus-rule.yaml \
	  deploy/components/monitoring/dashboard.json deploy/helm/qdr-operator/files/

# The install tests run the operator's images on the real node: they are built from the
# release binaries, so those are built first; the router tests run the router image.
test: lint images router-image ## Everything CI runs: lint, unit tests and integration tests on a real control plane (and a real node with real routers)
	testbin="$$(tools/testbin/build.sh)"; QDR_TESTBIN="$$testbin" $(CARGO) test --workspace --locked

images: ## Build the operator's images as deploy/docker/*.Dockerfile define them: the release binaries (qdr-controller, qdr-webhook) and each image's root filesystem (deploy/docker/rootfs.sh) in target/images/
	$(CARGO) build --locked --release -p qdr-controller -p qdr-webhook --bin qdr-controller --bin qdr-webhook
	rm -rf $(CARGO_TARGET_DIR_OR_DEFAULT)/images/controller $(CARGO_TARGET_DIR_OR_DEFAULT)/images/webhook
	deploy/docker/rootfs.sh $(CARGO_TARGET_DIR_OR_DEFAULT)/release/qdr-controller $(CARGO_TARGET_DIR_OR_DEFAULT)/images/controller
	deploy/docker/rootfs.sh $(CARGO_TARGET_DIR_OR_DEFAULT)/release/qdr-webhook $(CARGO_TARGET_DIR_OR_DEFAULT)/images/webhook

bench: router-image ## Benchmarks: per-object cost, the admission handler alone, webhook over HTTPS, API server, controller convergence, day two on real routers, the cost of reading the routers (one table)
	$(CARGO) bench --locked -p qdr-controller --bench per_object
	$(CARGO) bench --locked -p qdr-webhook --bench handler
	$(CARGO) build --locked --release --bins
	testbin="$$(tools/testbin/build.sh)"; QDR_TESTBIN="$$testbin" $(CARGO_TARGET_DIR_OR_DEFAULT)/release/qdr-bench

validate-command: ## Build qdr-validate (offline manifest checks) into the release directory
	$(CARGO) build --locked --release -p qdr-webhook --features validate-command --bin qdr-validate
	@echo "$(CARGO_TARGET_DIR_OR_DEFAULT)/release/qdr-validate"

run: ## Run the whole system on a local control plane with the examples, until Ctrl-C
	$(CARGO) build --locked --bins
	testbin="$$(tools/testbin/build.sh)"; QDR_TESTBIN="$$testbin" $(CARGO_TARGET_DIR_OR_DEFAULT)/debug/local-run

run-real: images router-image ## Like `run`, on a real node (kubelet, containerd; as root): the operator installed from deploy/ as pods, and real routers from the image built from source, with the mesh they see and messages through it
	$(CARGO) build --locked -p qdr-tests --bin local-run
	testbin="$$(tools/testbin/build.sh)"; QDR_TESTBIN="$$testbin" $(CARGO_TARGET_DIR_OR_DEFAULT)/debug/local-run --real

deploy: ## Install deploy/ into the cluster of the current kubeconfig (kubectl apply -k)
	kubectl apply -k deploy/

dev-cluster: ## Run the local control plane (kube-controller-manager, kube-scheduler, 3 kwok nodes) until Ctrl-C
	testbin="$$(tools/testbin/build.sh)"; QDR_TESTBIN="$$testbin" $(CARGO) run --locked -p qdr-tests --bin dev-cluster

clean-testbin: ## Remove the cached control-plane binaries
	rm -rf "$$(dirname "$$(tools/testbin/build.sh --print)")"
