#!/usr/bin/env bash
# gencerts.sh DIR: writes a throwaway PKI for TLS tests into DIR with the
# openssl CLI (a separate process, so it works whichever TLS library the test
# binary links):
#   ca.crt/ca.key                 the test CA
#   server.crt/server.key         CN=localhost, SAN DNS:localhost, IP:127.0.0.1, signed by ca
#   client.crt/client.key         CN=hp_admin (a client certificate for mTLS), signed by ca
#   other-ca.crt/other-ca.key     an unrelated CA: verifying server.crt against it must fail
#   wrongname.crt/wrongname.key   SAN DNS:wrong.example only, signed by ca (hostname mismatch)
# All certificates are signed with SHA-256 (the tls-server-end-point hash is
# then SHA-256 of the DER). Keys are P-256 ECDSA: fast to generate.
# Keys are 0600; the caller chowns DIR if another user must read them.
set -euo pipefail
dir=${1:?usage: gencerts.sh DIR}
mkdir -p "$dir"
cd "$dir"
umask 077

# openssl is chatty on stderr even when it succeeds: show its output only on failure.
ossl() {
  local err
  if ! err=$(openssl "$@" 2>&1 >/dev/null); then
    echo "gencerts.sh: openssl $* failed: $err" >&2
    return 1
  fi
}

key() { ossl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }

ca() {  # ca NAME CN
  key "$1.key"
  ossl req -x509 -new -sha256 -key "$1.key" -days 3650 -subj "/CN=$2" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
    -out "$1.crt"
}

leaf() {  # leaf NAME CN EXTFILE-CONTENT
  key "$1.key"
  ossl req -new -sha256 -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  printf '%s\n' "$3" >"$1.ext"
  ossl x509 -req -sha256 -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -extfile "$1.ext" -out "$1.crt"
  rm -f "$1.csr" "$1.ext"
}

ca ca "hyperpool test CA"
ca other-ca "hyperpool unrelated CA"
leaf server localhost "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:localhost,IP:127.0.0.1"
leaf client hp_admin "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
leaf wrongname wrong.example "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:wrong.example"
rm -f ca.srl
chmod 0644 ./*.crt
chmod 0600 ./*.key
