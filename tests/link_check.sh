#!/usr/bin/env bash
# No binary we build may load libpq together with BoringSSL (libpq brings
# OpenSSL 3; a process with both crashes in libpq's TLS code), and none may
# load both TLS libraries. Usage: link_check.sh BUILD_DIR
set -euo pipefail
dir=${1:?build dir}
checked=0; bad=0
while IFS= read -r -d '' f; do
  head -c4 "$f" 2>/dev/null | grep -q $'\x7fELF' || continue
  libs=$(ldd "$f" 2>/dev/null || true)
  checked=$((checked + 1))
  boring=$(grep -c '/android/' <<<"$libs" || true)
  pq=$(grep -c 'libpq\.so' <<<"$libs" || true)
  ossl=$(grep -cE 'lib(ssl|crypto)\.so\.3' <<<"$libs" || true)
  if [ "$boring" -gt 0 ] && { [ "$pq" -gt 0 ] || [ "$ossl" -gt 0 ]; }; then
    echo "FAIL: $f links BoringSSL together with libpq or OpenSSL 3"; bad=$((bad + 1))
  fi
done < <(find "$dir" -maxdepth 2 -type f -perm -u+x -print0)
echo "link_check: $checked binaries checked, $bad bad"
[ "$checked" -gt 0 ] && [ "$bad" = 0 ]
