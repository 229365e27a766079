#!/usr/bin/env bash
# Builds Kueue's scheduler performance benchmark (the runner and minimalkueue of
# test/performance/scheduler) and Kueue's manager (cmd/kueue, for the MultiKueue comparison of
# dispatch.sh) from Kueue's Go module through a wrapper module, once, into
#   ${MUSTER_BENCH_CACHE:-~/.cache/muster/bench-kueue}/kueue-<version>-<key>/{bin,crds,configs}
# <key> hashes the version, `go env GOVERSION GOOS GOARCH CGO_ENABLED`, GOFLAGS and this recipe's
# text, so a version bump, another Go or an edited recipe builds again. Prints the folder.
# KUEUE_VERSION (default v0.17.1) picks the version.
set -euo pipefail

KUEUE_VERSION="${KUEUE_VERSION:-v0.17.1}"
export GOTOOLCHAIN=local
export GOFLAGS="-mod=mod -buildvcs=false"
CACHE_ROOT="${MUSTER_BENCH_CACHE:-$HOME/.cache/muster/bench-kueue}"

log() { printf '[bench-kueue %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[bench-kueue] ERROR: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null || die "go is not on PATH"

build_kueue() {
  local v="$KUEUE_VERSION" info dir commit ld pkg=sigs.k8s.io/kueue/test/performance/scheduler
  info="$(go mod download -json "sigs.k8s.io/kueue@$v")"
  dir="$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); sys.exit(d["Error"]) if d.get("Error") else print(d["Dir"])' "$info")"
  commit="$(python3 -c 'import json,sys; print(json.load(open(json.loads(sys.argv[1])["Info"])).get("Origin",{}).get("Hash","unknown"))' "$info")"
  # A wrapper module that requires exactly that version: minimal version selection then takes
  # Kueue's own dependency versions (its go.mod has no replace lines).
  (
    cd "$PART/src"
    go mod init muster.local/bench-kueue/kueue >/dev/null 2>&1
    go mod edit -go="$(awk '$1=="go"{print $2; exit}' "$dir/go.mod")"
    go mod edit -require="sigs.k8s.io/kueue@$v"
    ld="-X sigs.k8s.io/kueue/pkg/version.GitVersion=$v -X sigs.k8s.io/kueue/pkg/version.GitCommit=$commit"
    nice -n "${BENCH_GO_NICE:-10}" go build -p "${BENCH_GO_P:-2}" -trimpath -ldflags "$ld" \
      -o "$PART/bin/" "$pkg/minimalkueue" "$pkg/runner" sigs.k8s.io/kueue/cmd/kueue
  )
  # What the runner reads: Kueue's CRDs (--crds) and its benchmark configs, as published.
  cp "$dir"/config/components/crd/bases/*.yaml "$PART/crds/"
  cp -r "$dir/test/performance/scheduler/configs/." "$PART/configs/"
  chmod -R u+w "$PART/crds" "$PART/configs"
  printf '%s %s\n' "$v" "$commit" >"$PART/version"
}

key="$({ printf 'kueue %s\ngo %s GOFLAGS=%s\n' "$KUEUE_VERSION" "$(go env GOVERSION GOOS GOARCH CGO_ENABLED | tr '\n' ' ')" "$GOFLAGS"
         declare -f build_kueue; } | sha256sum | cut -c1-16)"
PART_DIR="$CACHE_ROOT/kueue-$KUEUE_VERSION-$key"
if [[ -f "$PART_DIR/stamp" ]]; then
  log "kueue $KUEUE_VERSION: cached ($PART_DIR)"
  printf '%s\n' "$PART_DIR"; exit 0
fi
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.build.lock"
flock 9
if [[ ! -f "$PART_DIR/stamp" ]]; then
  log "kueue $KUEUE_VERSION: building runner, minimalkueue and kueue (a few minutes the first time)"
  t=$SECONDS
  rm -rf "$PART_DIR.tmp"; mkdir -p "$PART_DIR.tmp"/{bin,src,crds,configs}
  ( PART="$PART_DIR.tmp"; build_kueue )
  declare -f build_kueue >"$PART_DIR.tmp/recipe.sh"
  go env GOVERSION GOOS GOARCH CGO_ENABLED >"$PART_DIR.tmp/toolchain"
  date -u +%FT%TZ >"$PART_DIR.tmp/stamp"
  rm -rf "$PART_DIR"; mv "$PART_DIR.tmp" "$PART_DIR"
  log "kueue $KUEUE_VERSION: built in $((SECONDS - t))s ($PART_DIR)"
fi
printf '%s\n' "$PART_DIR"
