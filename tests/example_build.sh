# example_build.sh — sourced by the example-project tests: installs spikehunt
# from BUILD_DIR to a temporary prefix, configures and builds
# examples/EXAMPLE (or the project at SOURCE_DIR/EXAMPLE, e.g.
# tests/legacy_project) against it with find_package(spikehunt), and defines
# $build $src $project $work (removed on exit), fail() and expect().
# Usage: . tests/example_build.sh BUILD_DIR SOURCE_DIR EXAMPLE
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
example=$3
project="$src/examples/$example"
[ -d "$project" ] || project="$src/$example"
work=$(mktemp -d "/tmp/spikehunt-$(basename "$example").XXXXXX")
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/expect.sh
. "$src/tests/expect.sh"

# The example is a user's project: it includes spikehunt's public headers only.
if grep -nE '#include *[<"](base|scenarios|harness|generators|cli)/' "$project"/*.cpp $(ls "$project"/*.h 2> /dev/null); then
  fail "$example includes an internal header: users include <spikehunt/...> only"
fi

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/lib/cmake/spikehunt/spikehuntConfig.cmake" || fail "no spikehuntConfig.cmake installed"
test -f "$work/prefix/include/spikehunt/spikehunt.h" || fail "no spikehunt.h installed"
test -f "$work/prefix/include/spikehunt/internal/harness/burst.h" || fail "the internal headers are not under include/spikehunt/internal/"
test ! -e "$work/prefix/include/spikehunt/harness" || fail "an internal folder is installed beside the public headers"

generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
cmake -S "$project" -B "$work/build" "${generator[@]}" -DCMAKE_PREFIX_PATH="$work/prefix" \
  > "$work/configure.log" 2>&1 || { cat "$work/configure.log"; fail "configure"; }
cmake --build "$work/build" -j "$(nproc)" > "$work/build.log" 2>&1 || { tail -n 60 "$work/build.log"; fail "build"; }
