#!/usr/bin/env bash
# Makes a private CA and the certificates of a trainctl cluster with OpenSSL:
#
#   deploy/make_certs.sh OUTDIR [--server-name NAME]... NODE...
#
#   OUTDIR/ca.crt, ca.key            the CA (keep ca.key offline; every other
#                                    file is signed by it)
#   OUTDIR/coordinator.crt, .key     the coordinator's server certificate:
#                                    SANs localhost, 127.0.0.1, ::1, this host's
#                                    name and each --server-name
#                                    (trainctl-coordinator --tls-cert/--tls-key,
#                                    --tls-ca OUTDIR/ca.crt)
#   OUTDIR/gateway.crt, .key         a user-facing server certificate with the
#                                    same SANs (the REST gateway's HTTPS, or a
#                                    TLS-terminating proxy in front of users)
#   OUTDIR/nodes/NODE.crt, .key      one client certificate per node, CN=NODE:
#                                    the coordinator lets that agent register
#                                    as NODE only (trainctl-agent --node-name
#                                    NODE --tls-cert/--tls-key, --tls-ca
#                                    OUTDIR/ca.crt)
#
# Users and training ranks need only ca.crt (server TLS) and a bearer token.
# Keys are EC P-256, certificates valid 825 days. Re-running with an existing
# OUTDIR keeps the CA and adds or replaces the other certificates.
set -euo pipefail

usage() {
  sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}
[[ $# -ge 1 ]] || usage
out=$1
shift
server_names=()
nodes=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --server-name) server_names+=("$2"); shift 2 ;;
    -h|--help) usage ;;
    *) nodes+=("$1"); shift ;;
  esac
done
for n in "${nodes[@]}" "${server_names[@]}"; do
  if [[ ! $n =~ ^[A-Za-z0-9._-]+$ ]]; then
    echo "make_certs.sh: \"$n\" is not a host or node name ([A-Za-z0-9._-]+)" >&2
    exit 2
  fi
done
command -v openssl >/dev/null || { echo "make_certs.sh: openssl not found (apt-get install openssl)" >&2; exit 1; }

days=825
mkdir -p "$out/nodes"
umask 077
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

if [[ ! -f $out/ca.key ]]; then
  newkey "$out/ca.key"
  openssl req -x509 -new -key "$out/ca.key" -days 3650 -subj "/CN=trainctl CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" -out "$out/ca.crt"
fi

# sign NAME KEY CRT EXTFILE
sign() {
  openssl req -new -key "$2" -subj "/CN=$1" -out "$tmp/req.csr"
  openssl x509 -req -in "$tmp/req.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" \
    -CAcreateserial -CAserial "$tmp/ca.srl" -days "$days" -extfile "$4" \
    -out "$3" 2>/dev/null
}

sans="DNS:localhost,IP:127.0.0.1,IP:::1,DNS:$(hostname)"
for n in "${server_names[@]}"; do
  if [[ $n =~ ^[0-9.]+$ ]]; then sans+=",IP:$n"; else sans+=",DNS:$n"; fi
done
cat > "$tmp/server.ext" <<EXT
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=$sans
EXT
for s in coordinator gateway; do
  newkey "$out/$s.key"
  sign "trainctl $s" "$out/$s.key" "$out/$s.crt" "$tmp/server.ext"
done

for n in "${nodes[@]}"; do
  cat > "$tmp/node.ext" <<EXT
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth
subjectAltName=DNS:$n
EXT
  newkey "$out/nodes/$n.key"
  sign "$n" "$out/nodes/$n.key" "$out/nodes/$n.crt" "$tmp/node.ext"
done
chmod 644 "$out"/*.crt "$out"/nodes/*.crt 2>/dev/null || true
echo "certificates in $out: ca.crt, coordinator.{crt,key}, gateway.{crt,key}; nodes/NODE.{crt,key} for: ${nodes[*]:-(none)}; server SANs: $sans"
