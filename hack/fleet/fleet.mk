# The local fleet (hub + member-a/b/c on 127.0.0.1), included by the top-level Makefile.
# See docs/development.md. FLEET=path/to/fleet.yaml picks another fleet file for fleet-up.
.PHONY: fleet-build fleet-up fleet-down fleet-status

FLEET ?= examples/fleet.yaml
export FLEET

# Build every component once, each cached outside the repo by its pin in hack/fleet/versions.env,
# the Go version and its recipe (hack/fleet/recipes.sh).
fleet-build:
	@hack/fleet/build.sh

# Build if needed, start everything, create the fake nodes, wait until ready (idempotent).
fleet-up:
	@hack/fleet/fleet.sh up

# Stop every process fleet-up started, by pid; fails if a fleet port is still open.
fleet-down:
	@hack/fleet/fleet.sh down

fleet-status:
	@hack/fleet/fleet.sh status
