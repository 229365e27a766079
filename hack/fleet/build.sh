#!/usr/bin/env bash
# Build the fleet's components once, from their Go modules, into a cache outside the repo:
#   ${MUSTER_FLEET_CACHE:-~/.cache/muster/fleet}/<pins-hash>/{bin,crds,kwok-stages,jobset}
# The hash covers hack/fleet/versions.env and the Go version, so the build reruns only when a
# pin changes. Each component has its own stamp, so an interrupted build resumes where it stopped.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

command -v go >/dev/null || fleet_die "go is not on PATH (needs Go >= 1.26 for Kubernetes ${KUBERNETES_VERSION})"
command -v flock >/dev/null || fleet_die "flock (util-linux) is needed"

mkdir -p "$FLEET_BIN" "$FLEET_CACHE/src" "$FLEET_CACHE/stamps"
exec 9>"$FLEET_CACHE/.build.lock"
flock 9

if [[ -f "$FLEET_CACHE/stamps/all" ]]; then
  fleet_log "build cached: $FLEET_BIN (pins $FLEET_PINS_HASH)"
  exit 0
fi

# Both goroutines of the machine, but no more: the rest of the machine may be compiling too.
GOBUILD_P="${FLEET_GO_P:-2}"
# Go builds run at a lower priority (FLEET_GO_NICE, default 10).
GO_NICE="${FLEET_GO_NICE:-10}"
START_ALL=$SECONDS

stamp() { date -u +%FT%TZ >"$FLEET_CACHE/stamps/$1"; }
done_() { [[ -f "$FLEET_CACHE/stamps/$1" ]]; }

# Print the module-cache directory of MODULE@VERSION, downloading it if needed.
mod_dir() {
  go mod download -json "$1" | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(d["Error"]) if d.get("Error") else print(d["Dir"])'
}

# Builds package PKG of MODULE@VERSION into OUT through a wrapper module (src/NAME) that requires
# that exact version: Go's minimal version selection then picks the module's own dependency
# versions, and the proxy is asked for that version only (not the version list `go install
# module@version` asks for). Usage: wrapper_build NAME MODULE@VERSION PKG OUT LDFLAGS
wrapper_build() {
  local name="$1" modver="$2" pkg="$3" out="$4" ld="$5" src="$FLEET_CACHE/src/$1"
  rm -rf "$src"; mkdir -p "$src"
  (
    cd "$src"
    go mod init "muster.local/fleet/$name" >/dev/null 2>&1
    go mod edit -require="$modver"
    nice -n "$GO_NICE" go build -p "$GOBUILD_P" -trimpath -ldflags "$ld" -o "$out" "$pkg"
  )
}

build_kubernetes() {
  done_ kubernetes && return 0
  local v="$KUBERNETES_VERSION" minor src info gomod time
  minor="${v#v1.}"; minor="${minor%%.*}"
  src="$FLEET_CACHE/src/kubernetes"
  rm -rf "$src"; mkdir -p "$src"
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
    nice -n "$GO_NICE" go build -p "$GOBUILD_P" -trimpath -ldflags "$ld" -o "$FLEET_BIN/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler
  )
  "$FLEET_BIN/kube-apiserver" --version
  stamp kubernetes
}

build_etcd() {
  done_ etcd && return 0
  local v="$ETCD_VERSION" src="$FLEET_CACHE/src/etcd"
  rm -rf "$src"; mkdir -p "$src"
  fleet_log "etcd $v: building from go.etcd.io/etcd/server/v3 via a wrapper module"
  (
    cd "$src"
    go mod init muster.local/fleet/etcd >/dev/null 2>&1
    go get "go.etcd.io/etcd/server/v3@$v"
    nice -n "$GO_NICE" go build -p "$GOBUILD_P" -trimpath -ldflags "-s -w" -o "$FLEET_BIN/etcd" go.etcd.io/etcd/server/v3
  )
  "$FLEET_BIN/etcd" --version
  stamp etcd
}

build_kwok() {
  done_ kwok && return 0
  local v="$KWOK_VERSION" dir
  fleet_log "kwok $v: go install sigs.k8s.io/kwok/cmd/kwok@$v"
  GOBIN="$FLEET_BIN" GOFLAGS=-buildvcs=false nice -n "$GO_NICE" go install -p "$GOBUILD_P" -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$v"
  dir="$(mod_dir "sigs.k8s.io/kwok@$v")"
  rm -rf "$FLEET_STAGES"; mkdir -p "$FLEET_STAGES"
  # kwok's own stages: "fast" (nodes Ready at once; bound pods Running at once; pods owned by a
  # batch Job complete) and the node heartbeat that keeps node conditions fresh (kwok renews the
  # node Leases itself).
  local s f
  for s in node/fast node/heartbeat-with-lease pod/fast; do
    for f in "$dir/kustomize/stage/$s"/*.yaml; do
      [[ "$(basename "$f")" == kustomization.yaml ]] && continue
      cp "$f" "$FLEET_STAGES/${s//\//-}-$(basename "$f")"
    done
  done
  chmod u+w "$FLEET_STAGES"/*.yaml
  stamp kwok
}

build_training_operator() {
  done_ training-operator && return 0
  local v="$TRAINING_OPERATOR_VERSION"
  fleet_log "training-operator $v: go install github.com/kubeflow/training-operator/cmd/training-operator.v1@$v"
  GOBIN="$FLEET_BIN" GOFLAGS=-buildvcs=false nice -n "$GO_NICE" go install -p "$GOBUILD_P" -trimpath -ldflags "-s -w" \
    "github.com/kubeflow/training-operator/cmd/training-operator.v1@$v"
  mv -f "$FLEET_BIN/training-operator.v1" "$FLEET_BIN/training-operator"
  stamp training-operator
}

build_jobset() {
  done_ jobset && return 0
  local v="$JOBSET_VERSION" dir commit
  # The manager's main package is the module root (sigs.k8s.io/jobset, main.go). Not `go install
  # module@version`: that asks the proxy for the module's version list (for deprecations), which
  # the proxy here refuses for sigs.k8s.io/jobset (403). A wrapper module requiring the exact
  # version needs no list; Go's minimal version selection then picks jobset's own dependency versions.
  # The tag's commit, as the module proxy records it, for its version string.
  commit="$(go mod download -json "sigs.k8s.io/jobset@$v" | python3 -c \
    'import json,sys; print(json.load(open(json.load(sys.stdin)["Info"])).get("Origin",{}).get("Hash","unknown"))')"
  fleet_log "jobset $v ($commit): building sigs.k8s.io/jobset via a wrapper module"
  wrapper_build jobset "sigs.k8s.io/jobset@$v" sigs.k8s.io/jobset "$FLEET_BIN/jobset-controller" \
    "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$v -X sigs.k8s.io/jobset/pkg/version.GitCommit=$commit"
  # Its admission webhook configurations (service-based; fleet.py points them at 127.0.0.1) and
  # the kustomize patches that give the pod webhooks their objectSelector.
  dir="$(mod_dir "sigs.k8s.io/jobset@$v")"
  rm -rf "$FLEET_JOBSET"; mkdir -p "$FLEET_JOBSET"
  cp "$dir/config/components/webhook/manifests.yaml" "$FLEET_JOBSET/webhook-manifests.yaml"
  cp "$dir/config/components/webhook/patches/mutating-patch.yaml" \
     "$dir/config/components/webhook/patches/validating-patch.yaml" "$FLEET_JOBSET/"
  chmod u+w "$FLEET_JOBSET"/*.yaml
  stamp jobset
}

build_kuberay() {
  done_ kuberay && return 0
  local v="$KUBERAY_VERSION" m=github.com/ray-project/kuberay/ray-operator
  # The operator's main package is the module root (ray-operator/main.go); built through a
  # wrapper module, as JobSet is, so that only the exact version is asked of the proxy.
  fleet_log "kuberay $v: building $m via a wrapper module"
  wrapper_build kuberay "$m@$v" "$m" "$FLEET_BIN/kuberay-operator" "-s -w"
  stamp kuberay
}

collect_crds() {
  done_ crds && return 0
  local d tmp="$FLEET_CRDS.tmp"
  rm -rf "$tmp"; mkdir -p "$tmp"
  d="$(mod_dir "github.com/kubeflow/training-operator@$TRAINING_OPERATOR_VERSION")"
  cp "$d"/manifests/base/crds/kubeflow.org_*.yaml "$tmp/"
  # Its MPIJob is kubeflow.org/v1; the fleet serves the MPI operator's v2beta1 under that name.
  rm -f "$tmp/kubeflow.org_mpijobs.yaml"
  d="$(mod_dir "sigs.k8s.io/jobset@$JOBSET_VERSION")"
  cp "$d"/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml "$tmp/"
  d="$(mod_dir "github.com/ray-project/kuberay/ray-operator@$KUBERAY_VERSION")"
  # RayService too: muster does not manage it, but the KubeRay operator's RayService controller
  # waits for its CRD (an error every 10 s without it).
  cp "$d"/config/crd/bases/ray.io_rayjobs.yaml "$d"/config/crd/bases/ray.io_rayclusters.yaml \
     "$d"/config/crd/bases/ray.io_rayservices.yaml "$tmp/"
  d="$(mod_dir "github.com/kubeflow/mpi-operator@$MPI_OPERATOR_VERSION")"
  # MPIJob v2beta1 (see docs/development.md).
  cp "$d"/manifests/base/kubeflow.org_mpijobs.yaml "$tmp/mpi-operator_kubeflow.org_mpijobs.yaml"
  chmod u+w "$tmp"/*.yaml
  rm -rf "$FLEET_CRDS"; mv "$tmp" "$FLEET_CRDS"
  stamp crds
}

for step in ${FLEET_BUILD_STEPS:-build_kubernetes build_etcd build_kwok build_training_operator build_jobset build_kuberay collect_crds}; do
  t=$SECONDS
  "$step"
  fleet_log "$step: done in $((SECONDS - t))s"
done
if [[ -z "${FLEET_BUILD_STEPS:-}" ]]; then
  cp "$FLEET_HACK_DIR/versions.env" "$FLEET_CACHE/versions.env"
  stamp all
  fleet_log "build complete in $((SECONDS - START_ALL))s: $FLEET_BIN"
fi
