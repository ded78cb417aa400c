#!/usr/bin/env bash
# Checks that every tracked C++ file is formatted as .clang-format says (clang-format 14, from
# Debian's clang-format package). Prints the files that are not and exits 1; `--fix` rewrites
# them in place instead. Usage: scripts/check_format.sh [--fix]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
formatter=$(command -v clang-format-14 || command -v clang-format) || {
  echo "check_format: clang-format not found (scripts/setup.sh installs it)" >&2
  exit 2
}
# The tracked files; outside a git checkout (an unpacked archive), the same folders by find.
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | grep -v '^fuzz/corpus/')
else
  mapfile -t files < <(find include src tools tests bench fuzz python examples -type f \
    \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -not -path 'fuzz/corpus/*' \
    -not -path '*/.venv*' 2> /dev/null | sort)
fi
if [[ ${1:-} == --fix ]]; then
  "$formatter" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$formatter" --dry-run -Werror "$f" > /dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  printf 'check_format: %d file(s) not formatted (scripts/check_format.sh --fix):\n' "${#bad[@]}"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
