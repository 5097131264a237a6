#!/usr/bin/env bash
# Builds the REST gateway (grpc-gateway v1, Debian 12's Go packages) from the
# same protos as the C++ build. Usage: deploy/gateway/build.sh BUILD_DIR
# Generated Go code goes to BUILD_DIR/gopath (nothing generated is committed);
# the binary to BUILD_DIR/bin/trainctl-gateway. GOPATH mode, offline.
# Exits 0 with "skipped: ..." when the Go toolchain or the packages are absent.
set -euo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(mkdir -p "${1:?usage: build.sh BUILD_DIR}" && cd "$1" && pwd)
GOCODE=/usr/share/gocode/src
skip() { echo "trainctl-gateway skipped: Go toolchain or grpc-gateway packages missing ($1)"; exit 0; }
for t in go protoc protoc-gen-go protoc-gen-grpc-gateway; do
  command -v "$t" >/dev/null || skip "no $t"
done
for d in github.com/grpc-ecosystem/grpc-gateway/runtime google.golang.org/grpc \
         github.com/golang/protobuf/proto google.golang.org/genproto/googleapis/rpc/status; do
  [[ -d $GOCODE/$d ]] || skip "no $GOCODE/$d"
done

GOPATH_DIR=$BUILD/gopath
PKG=$GOPATH_DIR/src/trainctl/v1   # import path of the protos (no go_package option)
rm -rf "$PKG"
mkdir -p "$GOPATH_DIR/src" "$BUILD/bin"
protoc -I "$SRC/proto" \
  --go_out=plugins=grpc:"$GOPATH_DIR/src" \
  --grpc-gateway_out=logtostderr=true,grpc_api_configuration="$SRC/deploy/gateway/trainctl_http.yaml":"$GOPATH_DIR/src" \
  "$SRC/proto/trainctl/v1/types.proto" "$SRC/proto/trainctl/v1/preflight.proto" \
  "$SRC/proto/trainctl/v1/telemetry.proto" \
  "$SRC/proto/trainctl/v1/service.proto"

export GOPATH=$GOPATH_DIR:/usr/share/gocode GO111MODULE=off GOPROXY=off GOFLAGS=
export GOCACHE=${GOCACHE:-$BUILD/gocache}
go build -o "$BUILD/bin/trainctl-gateway" "$SRC/deploy/gateway/main.go"
echo "built $BUILD/bin/trainctl-gateway"
