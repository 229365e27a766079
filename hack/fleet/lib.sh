# shellcheck shell=bash
# Shared helpers for hack/fleet/*.sh. Source it; it sets FLEET_* variables.
set -euo pipefail

FLEET_HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
FLEET_REPO_ROOT="$(cd "$FLEET_HACK_DIR/../.." && pwd)"
# shellcheck source=versions.env
source "$FLEET_HACK_DIR/versions.env"

export GOTOOLCHAIN=local
export GOFLAGS="-mod=mod -buildvcs=false"

fleet_log() { printf '[fleet %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
fleet_die() { printf '[fleet] ERROR: %s\n' "$*" >&2; exit 1; }

# shellcheck source=recipes.sh
source "$FLEET_HACK_DIR/recipes.sh"

FLEET_CACHE_ROOT="${MUSTER_FLEET_CACHE:-$HOME/.cache/muster/fleet}"
FLEET_PARTS="$FLEET_CACHE_ROOT/parts"
# What of the Go toolchain a built binary depends on.
FLEET_GO_ENV="$(go env GOVERSION GOOS GOARCH CGO_ENABLED | tr '\n' ' ') GOFLAGS=$GOFLAGS"

# The recipe of component $1: build_<component> and every helper it calls, transitively.
fleet_recipe_text() {
  local text h seen=" " found=1 re
  text="$(declare -f "build_${1//-/_}")" || fleet_die "no recipe build_${1//-/_} for component $1"
  while ((found)); do
    found=0
    for h in "${FLEET_RECIPE_HELPERS[@]}"; do
      [[ "$seen" == *" $h "* ]] && continue
      re="(^|[^[:alnum:]_])$h([^[:alnum:]_]|$)"
      if [[ "$text" =~ $re ]]; then
        text+=$'\n'"$(declare -f "$h")"; seen+="$h "; found=1
      fi
    done
  done
  printf '%s\n' "$text"
}

# The part directory name of component $1: <component>-<version>-<key16> (see recipes.sh).
fleet_part_id() {
  local pin="${FLEET_COMPONENT_PIN[$1]}" key
  [[ -n "${!pin:-}" ]] || fleet_die "$pin is not set in versions.env (component $1)"
  key="$({ printf 'component %s\nversion %s\ngo %s\n' "$1" "${!pin}" "$FLEET_GO_ENV"
           fleet_recipe_text "$1"; } | sha256sum | cut -c1-16)"
  printf '%s-%s-%s\n' "$1" "${!pin}" "$key"
}

# Fills directory $1 from the parts (relative symlinks into ../parts): every part's bin/* and
# crds/* into bin/ and crds/ (a name given by two parts is an error), any other folder of a part
# (kwok-stages/, jobset/, trainer/) linked whole; src/ and the part's own files stay in the part.
fleet_assemble() {
  local out="$1" name id d base f
  mkdir -p "$out/bin" "$out/crds"
  for name in "${FLEET_COMPONENTS[@]}"; do
    id="$(fleet_part_id "$name")"
    [[ -f "$FLEET_PARTS/$id/stamp" ]] || fleet_die "part $id is not built"
    for d in "$FLEET_PARTS/$id"/*/; do
      base="$(basename "$d")"
      case "$base" in
        src) ;;
        bin|crds)
          for f in "$d"*; do
            [[ -e "$f" ]] || continue
            [[ -e "$out/$base/${f##*/}" ]] && fleet_die "$base/${f##*/} comes from two parts (the second: $id)"
            ln -s "../../parts/$id/$base/${f##*/}" "$out/$base/${f##*/}"
          done ;;
        *)
          [[ -e "$out/$base" ]] && fleet_die "$base/ comes from two parts (the second: $id)"
          ln -s "../parts/$id/$base" "$out/$base" ;;
      esac
    done
    printf '%s\n' "$id" >>"$out/parts"
  done
}

# The assembled build: a hash of every part's id and of the assembly itself.
fleet_build_key() {
  { for name in "${FLEET_COMPONENTS[@]}"; do fleet_part_id "$name"; done
    declare -f fleet_assemble; } | sha256sum | cut -c1-16
}

# True if the assembled build is complete and every link in it still leads to its part.
fleet_cache_ready() {
  [[ -f "$FLEET_CACHE/stamp" ]] || return 1
  [[ -z "$(find -L "$FLEET_CACHE" -maxdepth 2 -type l -print -quit)" ]]
}

FLEET_BUILD_KEY="$(fleet_build_key)"
FLEET_CACHE="$FLEET_CACHE_ROOT/$FLEET_BUILD_KEY"
FLEET_BIN="$FLEET_CACHE/bin"
FLEET_CRDS="$FLEET_CACHE/crds"
FLEET_STAGES="$FLEET_CACHE/kwok-stages"
FLEET_JOBSET="$FLEET_CACHE/jobset"
FLEET_TRAINER="$FLEET_CACHE/trainer"
FLEET_STATE="${MUSTER_FLEET_STATE:-$FLEET_REPO_ROOT/.fleet}"
FLEET_MEMBERS=(member-a member-b member-c)
FLEET_CLUSTERS=(hub "${FLEET_MEMBERS[@]}")
