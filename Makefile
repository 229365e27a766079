# muster — top-level make targets. The local fleet's targets live in hack/fleet/fleet.mk.
.PHONY: test sim lint fmt bench
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
