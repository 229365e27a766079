# The local fleet (hub + member-a/b/c on 127.0.0.1), included by the top-level Makefile.
# See docs/development.md. FLEET=path/to/fleet.yaml picks another fleet file for fleet-up.
.PHONY: fleet-build fleet-up fleet-down fleet-status

FLEET ?= examples/fleet.yaml
export FLEET

# Build kube-apiserver/controller-manager/scheduler, etcd, kwok and training-operator once,
# cached outside the repo by a hash of hack/fleet/versions.env.
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
