#!/usr/bin/env bash
# Build the fleet's components from their Go modules into a cache outside the repo, one part per
# component (recipes in recipes.sh):
#   ${MUSTER_FLEET_CACHE:-~/.cache/muster/fleet}/parts/<component>-<version>-<key>/
# keyed by the component's pin, the Go toolchain and its recipe's text, so a pin bump or a recipe
# edit rebuilds that one component. A part is built in <part>.tmp and renamed when done, so an
# interrupted build resumes with the component it stopped in. Then the build the fleet runs,
#   ${MUSTER_FLEET_CACHE:-~/.cache/muster/fleet}/<build-key>/{bin,crds,kwok-stages,jobset,trainer}
# (<build-key> hashes all the part names), is assembled from symlinks into the parts: instant.
# FLEET_BUILD_COMPONENTS="jobset trainer" builds only those parts (and assembles nothing).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

command -v go >/dev/null || fleet_die "go is not on PATH (needs Go >= 1.26 for Kubernetes ${KUBERNETES_VERSION})"
command -v flock >/dev/null || fleet_die "flock (util-linux) is needed"

mkdir -p "$FLEET_PARTS"
exec 9>"$FLEET_CACHE_ROOT/.build.lock"
flock 9

if [[ -z "${FLEET_BUILD_COMPONENTS:-}" ]] && fleet_cache_ready; then
  fleet_log "build cached: $FLEET_BIN (build $FLEET_BUILD_KEY)"
  exit 0
fi

START_ALL=$SECONDS
BUILDING=
trap 'rc=$?; [[ $rc -eq 0 || -z "$BUILDING" ]] || fleet_log "ERROR: build of $BUILDING failed (exit $rc)"' EXIT

build_part() {
  local name="$1" id dir t=$SECONDS
  id="$(fleet_part_id "$name")"
  dir="$FLEET_PARTS/$id"
  if [[ -f "$dir/stamp" ]]; then
    fleet_log "$name: cached ($id)"
    return 0
  fi
  rm -rf "$dir.tmp"; mkdir -p "$dir.tmp/bin" "$dir.tmp/src"
  # Plainly, not under `||` or `if`: that would switch `set -e` off inside the recipe.
  BUILDING="$name ($dir.tmp)"
  ( PART="$dir.tmp"; cd "$PART"; "build_${name//-/_}" )
  BUILDING=
  # What the part was built from, for whoever looks at it later.
  fleet_recipe_text "$name" >"$dir.tmp/recipe.sh"
  printf 'go %s\n' "$FLEET_GO_ENV" >"$dir.tmp/toolchain"
  date -u +%FT%TZ >"$dir.tmp/stamp"
  rm -rf "$dir"; mv "$dir.tmp" "$dir"
  fleet_log "$name: built in $((SECONDS - t))s ($id)"
}

for name in ${FLEET_BUILD_COMPONENTS:-${FLEET_COMPONENTS[*]}}; do
  [[ -n "${FLEET_COMPONENT_PIN[$name]:-}" ]] || fleet_die "unknown component $name (known: ${FLEET_COMPONENTS[*]})"
  build_part "$name"
done
if [[ -z "${FLEET_BUILD_COMPONENTS:-}" ]]; then
  tmp="$FLEET_CACHE.tmp"
  rm -rf "$tmp"
  fleet_assemble "$tmp"
  cp "$FLEET_HACK_DIR/versions.env" "$tmp/versions.env"
  date -u +%FT%TZ >"$tmp/stamp"
  rm -rf "$FLEET_CACHE"; mv "$tmp" "$FLEET_CACHE"
  fleet_log "build complete in $((SECONDS - START_ALL))s: $FLEET_BIN (build $FLEET_BUILD_KEY)"
fi
