#!/usr/bin/env bash
# Builds helm from its Go module (nothing prebuilt is downloaded) and prints the binary's path.
# Cached in ${MUSTER_HELM_CACHE:-~/.cache/muster/helm}/<version>-<go version>/bin/helm; rebuilt
# only when HELM_VERSION or the Go toolchain changes. Concurrent runs serialize on a lock.
#
#   hack/helm/build.sh            # build if needed; print the path of the helm binary
#   "$(hack/helm/build.sh)" version
set -euo pipefail

HELM_MODULE=helm.sh/helm/v3
HELM_VERSION=v3.22.0

export GOTOOLCHAIN=local
export GOFLAGS="-mod=mod -buildvcs=false"

log() { printf '[helm %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
command -v go >/dev/null || { echo "[helm] ERROR: go is needed to build helm" >&2; exit 1; }

cache_root="${MUSTER_HELM_CACHE:-$HOME/.cache/muster/helm}"
dir="$cache_root/$HELM_VERSION-$(go env GOVERSION)"
bin="$dir/bin/helm"
mkdir -p "$dir"

if [[ ! -x "$bin" ]]; then
  exec 9>"$dir/.lock"
  flock 9
  if [[ ! -x "$bin" ]]; then
    started=$(date +%s)
    log "building $HELM_MODULE@$HELM_VERSION into $dir (once; a few minutes)"
    # helm's Makefile sets the default Kubernetes version of `helm template` (.Capabilities)
    # from the k8s.io/client-go it was built with; do the same.
    GOFLAGS= go mod download "$HELM_MODULE@$HELM_VERSION" >&2
    modfile="$(GOFLAGS= go mod download -json "$HELM_MODULE@$HELM_VERSION" \
      | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')"
    cgo_ver="$(awk '$1 == "k8s.io/client-go" { print $2; exit }' "$modfile")"
    k8s_minor="$(echo "$cgo_ver" | cut -d. -f2)"
    [[ "$k8s_minor" =~ ^[0-9]+$ ]] || { echo "[helm] ERROR: no k8s.io/client-go version in $modfile" >&2; exit 1; }
    ldflags="-w -s -X $HELM_MODULE/internal/version.version=$HELM_VERSION"
    ldflags+=" -X $HELM_MODULE/internal/version.gitTreeState=clean"
    for pkg in pkg/chartutil pkg/lint/rules; do
      ldflags+=" -X $HELM_MODULE/$pkg.k8sVersionMajor=1 -X $HELM_MODULE/$pkg.k8sVersionMinor=$k8s_minor"
    done
    tmp="$dir/bin.tmp"
    rm -rf "$tmp" && mkdir -p "$tmp"
    CGO_ENABLED=0 GOBIN="$tmp" nice -n 10 go install -trimpath -ldflags "$ldflags" \
      "$HELM_MODULE/cmd/helm@$HELM_VERSION" >&2
    "$tmp/helm" version --short >&2
    rm -rf "$dir/bin" && mv "$tmp" "$dir/bin"
    log "built in $(( $(date +%s) - started )) s"
  fi
  exec 9>&-
fi
echo "$bin"
