# muster — top-level make targets. The local fleet's targets live in hack/fleet/fleet.mk.
.PHONY: test sim lint fmt bench crds chart-dashboard helm chart-lint chart-template bench-kueue bench-dispatch
-include hack/fleet/fleet.mk

# The README's test command: unit, property, CLI and fleet integration tests.
test:
	cargo test --all-targets

# Run muster's main job on the embedded default scenario.
sim:
	cargo run --release -- sim

lint:
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings

fmt:
	cargo fmt --all

# The CRDs, generated from the Rust types (src/controller/crd.rs): crds/ and the chart's copy.
# tests/crds.rs fails when the committed files differ from the types.
crds:
	rm -f crds/*.yaml charts/muster/crds/*.yaml
	cargo run --quiet -- crds --dir crds
	cargo run --quiet -- crds --dir charts/muster/crds

# The chart's copy of the Grafana dashboard (Helm reads files inside the chart only).
chart-dashboard:
	@if [ -f dashboards/muster.json ]; then \
	  mkdir -p charts/muster/dashboards && cp dashboards/muster.json charts/muster/dashboards/muster.json && \
	  echo "charts/muster/dashboards/muster.json"; \
	else echo "no dashboards/muster.json in this tree" >&2; exit 1; fi

# helm, built from its Go module once and cached (hack/helm/build.sh prints its path).
helm:
	@hack/helm/build.sh

chart-lint:
	"$$(hack/helm/build.sh)" lint --strict charts/muster

# The chart rendered with its defaults (namespace muster-system), CRDs included.
chart-template:
	@"$$(hack/helm/build.sh)" template muster charts/muster --namespace muster-system --include-crds

# Kueue v0.17.1's scheduler benchmark (baseline config, workload counts / SCALE) and the same
# workload through muster on a fleet of its own (ports 17400+), side by side: docs/benchmarks.md.
SCALE ?= 10
bench-kueue:
	@SCALE=$(SCALE) hack/bench-kueue/bench.sh

# JOBS one-pod Jobs dispatched to three members by muster and by Kueue v0.17.1's MultiKueue,
# each on a fresh fleet of its own (ports 17400+): docs/benchmarks.md.
JOBS ?= 1000
bench-dispatch:
	@JOBS=$(JOBS) hack/bench-kueue/dispatch.sh
