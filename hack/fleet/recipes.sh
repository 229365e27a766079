# shellcheck shell=bash
# The fleet's build recipes: one function build_<component> per component (sourced by lib.sh).
#
# Each component is built into its own part directory,
#   $FLEET_PARTS/<component>-<version>-<key>/{bin,crds,src,...}
# where <key> hashes the component's name, its pinned version, the Go toolchain (version, OS,
# arch, cgo, GOFLAGS) and the text of its recipe: `declare -f build_<component>` plus every helper
# below that the recipe calls (found by name, transitively). So a pin bump, or an edit of one
# recipe, rebuilds that component only; editing a helper rebuilds the components that use it.
#
# A recipe runs in a subshell with its working directory and $PART set to the part being built
# (bin/ and src/ exist). It puts its binaries in $PART/bin, the CRDs it brings in $PART/crds, and
# any other files fleet.py reads in $PART/<folder>/ (linked as $FLEET_CACHE/<folder>). It must
# read nothing but its pinned module(s) through the Go module proxy: its output is cached by the
# key above and nothing else.

# Components, in build order, and the versions.env variable that pins each.
FLEET_COMPONENTS=(kubernetes etcd kwok training-operator jobset kuberay mpi-operator trainer)
declare -A FLEET_COMPONENT_PIN=(
  [kubernetes]=KUBERNETES_VERSION [etcd]=ETCD_VERSION [kwok]=KWOK_VERSION
  [training-operator]=TRAINING_OPERATOR_VERSION [jobset]=JOBSET_VERSION
  [kuberay]=KUBERAY_VERSION [mpi-operator]=MPI_OPERATOR_VERSION [trainer]=TRAINER_VERSION
)
# Shared helpers a recipe may call; each is part of the key of every recipe that calls it.
FLEET_RECIPE_HELPERS=(gobuild mod_dir mod_commit wrapper_build)

# `go build`/`go install` at a lower priority (FLEET_GO_NICE, default 10) with at most
# FLEET_GO_P (default 2) packages at once: the rest of the machine may be compiling too.
# Usage: gobuild build|install ARGS...
gobuild() {
  local cmd="$1"; shift
  nice -n "${FLEET_GO_NICE:-10}" go "$cmd" -p "${FLEET_GO_P:-2}" -trimpath "$@"
}

# Print the module-cache directory of MODULE@VERSION, downloading it if needed.
mod_dir() {
  go mod download -json "$1" | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(d["Error"]) if d.get("Error") else print(d["Dir"])'
}

# Print the commit of MODULE@VERSION's tag, as the module proxy records it (its .info Origin).
mod_commit() {
  go mod download -json "$1" | python3 -c \
    'import json,sys; print(json.load(open(json.load(sys.stdin)["Info"])).get("Origin",{}).get("Hash","unknown"))'
}

# Builds package PKG of MODULE@VERSION into OUT through a wrapper module ($PART/src) that requires
# that exact version: Go's minimal version selection then picks the module's own dependency
# versions, and the proxy is asked for that version only (not the version list `go install
# module@version` asks for). Usage: wrapper_build NAME MODULE@VERSION PKG OUT LDFLAGS
wrapper_build() {
  local name="$1" modver="$2" pkg="$3" out="$4" ld="$5" src="$PART/src"
  rm -rf "$src"; mkdir -p "$src"
  (
    cd "$src"
    go mod init "muster.local/fleet/$name" >/dev/null 2>&1
    go mod edit -require="$modver"
    gobuild build -ldflags "$ld" -o "$out" "$pkg"
  )
}

build_kubernetes() {
  local v="$KUBERNETES_VERSION" minor src="$PART/src" info gomod time
  minor="${v#v1.}"; minor="${minor%%.*}"
  fleet_log "kubernetes $v: writing wrapper module $src/go.mod"
  info="$(go mod download -json "k8s.io/kubernetes@$v")"
  gomod="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["GoMod"])' "$info")"
  time="$(python3 -c 'import json,sys; print(json.load(open(json.loads(sys.argv[1])["Info"]))["Time"])' "$info")"
  (
    cd "$src"
    go mod init muster.local/fleet/kubernetes >/dev/null 2>&1
    go mod edit -go="$(awk '$1=="go"{print $2; exit}' "$gomod")"
    go mod edit -require="k8s.io/kubernetes@$v"
    # Kubernetes' go.mod requires each staging module at v0.0.0 and replaces it with a local
    # path, which a dependent module does not see: pin each one to its published v0.<minor>.<patch>.
    local staging_v="v0.${v#v1.}" n=0
    while read -r name; do
      go mod edit -replace="$name=$name@$staging_v"; n=$((n+1))
    done < <(awk '/^require[ (]/{r=1} r && $2=="v0.0.0" && $1 ~ /^k8s\.io\//{print $1} /^\)/{r=0}' "$gomod" | sort -u)
    fleet_log "kubernetes $v: $n staging modules pinned to $staging_v"
    # Kubernetes' own godebug defaults.
    awk '$1=="godebug"{print}' "$gomod" >>go.mod
    local ld="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ld+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
      ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$time"
    done
    fleet_log "kubernetes $v: go build kube-apiserver kube-controller-manager kube-scheduler (slow the first time)"
    gobuild build -ldflags "$ld" -o "$PART/bin/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler
  )
  "$PART/bin/kube-apiserver" --version
}

build_etcd() {
  local v="$ETCD_VERSION" src="$PART/src"
  fleet_log "etcd $v: building from go.etcd.io/etcd/server/v3 via a wrapper module"
  (
    cd "$src"
    go mod init muster.local/fleet/etcd >/dev/null 2>&1
    go get "go.etcd.io/etcd/server/v3@$v"
    gobuild build -ldflags "-s -w" -o "$PART/bin/etcd" go.etcd.io/etcd/server/v3
  )
  "$PART/bin/etcd" --version
}

build_kwok() {
  local v="$KWOK_VERSION" dir s f
  fleet_log "kwok $v: go install sigs.k8s.io/kwok/cmd/kwok@$v"
  GOBIN="$PART/bin" GOFLAGS=-buildvcs=false gobuild install -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$v"
  dir="$(mod_dir "sigs.k8s.io/kwok@$v")"
  # kwok's own stages: "fast" (nodes Ready at once; bound pods Running at once; pods owned by a
  # batch Job complete) and the node heartbeat that keeps node conditions fresh (kwok renews the
  # node Leases itself).
  mkdir -p "$PART/kwok-stages"
  for s in node/fast node/heartbeat-with-lease pod/fast; do
    for f in "$dir/kustomize/stage/$s"/*.yaml; do
      [[ "$(basename "$f")" == kustomization.yaml ]] && continue
      cp "$f" "$PART/kwok-stages/${s//\//-}-$(basename "$f")"
    done
  done
  chmod u+w "$PART/kwok-stages"/*.yaml
}

build_training_operator() {
  local v="$TRAINING_OPERATOR_VERSION" d
  fleet_log "training-operator $v: go install github.com/kubeflow/training-operator/cmd/training-operator.v1@$v"
  GOBIN="$PART/bin" GOFLAGS=-buildvcs=false gobuild install -ldflags "-s -w" \
    "github.com/kubeflow/training-operator/cmd/training-operator.v1@$v"
  mv -f "$PART/bin/training-operator.v1" "$PART/bin/training-operator"
  d="$(mod_dir "github.com/kubeflow/training-operator@$v")"
  mkdir -p "$PART/crds"
  cp "$d"/manifests/base/crds/kubeflow.org_*.yaml "$PART/crds/"
  # Its MPIJob is kubeflow.org/v1; the fleet serves the MPI operator's v2beta1 under that name.
  rm -f "$PART/crds/kubeflow.org_mpijobs.yaml"
  chmod u+w "$PART/crds"/*.yaml
}

build_jobset() {
  local v="$JOBSET_VERSION" dir commit
  # The manager's main package is the module root (sigs.k8s.io/jobset, main.go). Not `go install
  # module@version`: that asks the proxy for the module's version list (for deprecations), which
  # the proxy here refuses for sigs.k8s.io/jobset (403). A wrapper module requiring the exact
  # version needs no list; Go's minimal version selection then picks jobset's own dependency versions.
  # The tag's commit, as the module proxy records it, for its version string.
  commit="$(mod_commit "sigs.k8s.io/jobset@$v")"
  fleet_log "jobset $v ($commit): building sigs.k8s.io/jobset via a wrapper module"
  wrapper_build jobset "sigs.k8s.io/jobset@$v" sigs.k8s.io/jobset "$PART/bin/jobset-controller" \
    "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$v -X sigs.k8s.io/jobset/pkg/version.GitCommit=$commit"
  dir="$(mod_dir "sigs.k8s.io/jobset@$v")"
  mkdir -p "$PART/crds" "$PART/jobset"
  cp "$dir"/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml "$PART/crds/"
  # Its admission webhook configurations (service-based; fleet.py points them at 127.0.0.1) and
  # the kustomize patches that give the pod webhooks their objectSelector.
  cp "$dir/config/components/webhook/manifests.yaml" "$PART/jobset/webhook-manifests.yaml"
  cp "$dir/config/components/webhook/patches/mutating-patch.yaml" \
     "$dir/config/components/webhook/patches/validating-patch.yaml" "$PART/jobset/"
  chmod u+w "$PART/crds"/*.yaml "$PART/jobset"/*.yaml
}

build_kuberay() {
  local v="$KUBERAY_VERSION" m=github.com/ray-project/kuberay/ray-operator d
  # The operator's main package is the module root (ray-operator/main.go); built through a
  # wrapper module, as JobSet is, so that only the exact version is asked of the proxy.
  fleet_log "kuberay $v: building $m via a wrapper module"
  wrapper_build kuberay "$m@$v" "$m" "$PART/bin/kuberay-operator" "-s -w"
  d="$(mod_dir "$m@$v")"
  mkdir -p "$PART/crds"
  # RayService too: muster does not manage it, but the KubeRay operator's RayService controller
  # waits for its CRD (an error every 10 s without it).
  cp "$d"/config/crd/bases/ray.io_rayjobs.yaml "$d"/config/crd/bases/ray.io_rayclusters.yaml \
     "$d"/config/crd/bases/ray.io_rayservices.yaml "$PART/crds/"
  chmod u+w "$PART/crds"/*.yaml
}

build_mpi_operator() {
  local v="$MPI_OPERATOR_VERSION" m=github.com/kubeflow/mpi-operator dir commit copy f
  # Its health server's port is a constant (healthCheckPort = 8080, on every interface) in
  # cmd/mpi-operator/app/server.go, so three cannot share a host. The wrapper module replaces the
  # module by a copy in $PART/src/mpi-operator, patched here: port and host from the environment
  # (MPI_OPERATOR_HEALTH_PORT, default 8080; MPI_OPERATOR_HEALTH_HOST, default all interfaces).
  dir="$(mod_dir "$m@$v")"
  commit="$(mod_commit "$m@$v")"
  copy="$PART/src/mpi-operator"
  mkdir -p "$PART/src"
  cp -r "$dir" "$copy"; chmod -R u+w "$copy"
  f="$copy/cmd/mpi-operator/app/server.go"
  fleet_log "mpi-operator $v ($commit): patching $f"
  sed -i 's/^\thealthCheckPort = 8080$/\thealthCheckPort = healthCheckPortFromEnv()/' "$f"
  grep -q $'^\thealthCheckPort = healthCheckPortFromEnv()$' "$f" \
    || fleet_die "mpi-operator $v: 'healthCheckPort = 8080' not found in $f: the patch needs updating"
  sed -i 's/^\t\tAddr:    fmt.Sprintf(":%d", healthCheckPort),$/\t\tAddr:    fmt.Sprintf("%s:%d", healthCheckHostFromEnv(), healthCheckPort),/' "$f"
  grep -q 'healthCheckHostFromEnv(), healthCheckPort)' "$f" \
    || fleet_die "mpi-operator $v: the health server's Addr line not found in $f: the patch needs updating"
  cat >"$copy/cmd/mpi-operator/app/zz_muster_fleet_health.go" <<'EOF'
package app

// Written by muster's hack/fleet/recipes.sh (build_mpi_operator): the health server's port and
// host from the environment, so that several operators can run on one host.

import (
	"fmt"
	"os"
	"strconv"
)

func healthCheckPortFromEnv() int {
	v := os.Getenv("MPI_OPERATOR_HEALTH_PORT")
	if v == "" {
		return 8080
	}
	p, err := strconv.Atoi(v)
	if err != nil || p < 1 || p > 65535 {
		fmt.Fprintf(os.Stderr, "MPI_OPERATOR_HEALTH_PORT=%q: not a port\n", v)
		os.Exit(2)
	}
	return p
}

func healthCheckHostFromEnv() string {
	return os.Getenv("MPI_OPERATOR_HEALTH_HOST")
}
EOF
  (
    cd "$PART/src"
    mkdir wrapper; cd wrapper
    go mod init muster.local/fleet/mpi-operator >/dev/null 2>&1
    go mod edit -require="$m@$v" -replace="$m=../mpi-operator"
    gobuild build -ldflags "-s -w -X $m/pkg/version.Version=$v -X $m/pkg/version.GitSHA=$commit" \
      -o "$PART/bin/mpi-operator" "$m/cmd/mpi-operator"
  )
  "$PART/bin/mpi-operator" -version
  mkdir -p "$PART/crds"
  # MPIJob kubeflow.org/v2beta1.
  cp "$dir/manifests/base/kubeflow.org_mpijobs.yaml" "$PART/crds/mpi-operator_kubeflow.org_mpijobs.yaml"
  chmod u+w "$PART/crds"/*.yaml
}

build_trainer() {
  local v="$TRAINER_VERSION" m=github.com/kubeflow/trainer/v2 d f
  fleet_log "trainer $v: building $m/cmd/trainer-controller-manager via a wrapper module"
  wrapper_build trainer "$m@$v" "$m/cmd/trainer-controller-manager" \
    "$PART/bin/trainer-controller-manager" "-s -w"
  d="$(mod_dir "$m@$v")"
  mkdir -p "$PART/crds" "$PART/trainer/runtimes"
  cp "$d"/manifests/base/crds/trainer.kubeflow.org_*.yaml "$PART/crds/"
  # Its webhook configurations (service-based; fleet.py points them at 127.0.0.1) with the
  # kustomize patches that name them, and the default ClusterTrainingRuntimes (the top-level
  # files; not the torchtune/ and data-cache/ kustomizations).
  cp "$d/manifests/base/webhook/manifests.yaml" "$PART/trainer/webhook-manifests.yaml"
  cp "$d/manifests/base/webhook/patch_mutating.yaml" "$d/manifests/base/webhook/patch_validating.yaml" \
     "$PART/trainer/"
  for f in "$d"/manifests/base/runtimes/*.yaml; do
    [[ "$(basename "$f")" == kustomization.yaml ]] && continue
    cp "$f" "$PART/trainer/runtimes/"
  done
  chmod u+w "$PART/crds"/*.yaml "$PART/trainer"/*.yaml "$PART/trainer/runtimes"/*.yaml
}
