// trainctl-gateway: REST/JSON front end of the trainctl coordinator's user
// API (trainctl.v1.Coordinator), built with grpc-gateway v1 from the same
// protos as the C++ code. The REST paths are in trainctl_http.yaml; build
// with deploy/gateway/build.sh.
//
// Errors come back as HTTP status codes (INVALID_ARGUMENT -> 400,
// NOT_FOUND -> 404, UNAVAILABLE -> 503, ...) with a JSON body
// {"error", "message", "code"}. The caller's `Authorization` header is
// forwarded to the coordinator as gRPC metadata `authorization` (grpc-gateway's
// runtime.AnnotateContext does this for every request), so a coordinator run
// with --tokens-file authenticates the HTTP caller's bearer token.
//
// TLS: -tls-ca verifies a coordinator run with --tls-cert (server TLS; the
// gateway needs no client certificate, it speaks for users, not nodes);
// -tls-cert/-tls-key serve HTTPS (deploy/make_certs.sh: gateway.crt/key).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/grpc-ecosystem/grpc-gateway/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	pb "trainctl/v1"
)

// writeJSONError writes {"error", "message", "code"} (code: the gRPC code),
// like grpc-gateway's own error bodies, for errors the gateway makes itself
// (unknown path, wrong method).
func writeJSONError(w http.ResponseWriter, msg string, httpCode int) {
	code := codes.Unknown
	switch httpCode {
	case http.StatusBadRequest:
		code = codes.InvalidArgument
	case http.StatusNotFound:
		code = codes.NotFound
	case http.StatusMethodNotAllowed:
		code = codes.Unimplemented
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpCode)
	json.NewEncoder(w).Encode(map[string]interface{}{"error": msg, "message": msg, "code": code})
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "HTTP address to serve on (port 0: a free port)")
	coordinator := flag.String("coordinator", "127.0.0.1:50051", "gRPC address of trainctl-coordinator")
	tlsCA := flag.String("tls-ca", "", "PEM CA certificate to verify a TLS coordinator with (default: plaintext)")
	tlsCert := flag.String("tls-cert", "", "PEM certificate to serve HTTPS with (with -tls-key; default: HTTP)")
	tlsKey := flag.String("tls-key", "", "PEM private key of -tls-cert")
	flag.Parse()
	if (*tlsCert == "") != (*tlsKey == "") {
		log.Fatalf("trainctl-gateway: -tls-cert and -tls-key go together")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	runtime.OtherErrorHandler = func(w http.ResponseWriter, _ *http.Request, msg string, code int) {
		writeJSONError(w, msg, code)
	}
	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard,
			&runtime.JSONPb{OrigName: true, EmitDefaults: true}))
	opts := []grpc.DialOption{grpc.WithInsecure()}
	if *tlsCA != "" {
		creds, err := credentials.NewClientTLSFromFile(*tlsCA, "")
		if err != nil {
			log.Fatalf("trainctl-gateway: -tls-ca: %v", err)
		}
		opts = []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	}
	if err := pb.RegisterCoordinatorHandlerFromEndpoint(ctx, gw, *coordinator, opts); err != nil {
		log.Fatalf("trainctl-gateway: %v", err)
	}

	mux := http.NewServeMux()
	mux.Handle("/v1/", gw)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSONError(w, "not found: the REST API is under /v1/", http.StatusNotFound)
	})

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("trainctl-gateway: listen on %s: %v", *listen, err)
	}
	// Same convention as trainctl-coordinator: tests read the port here.
	fmt.Printf("listening on port %d\n", ln.Addr().(*net.TCPAddr).Port)
	os.Stdout.Sync()
	log.Printf("trainctl-gateway: serving /v1/ on %s, coordinator %s", ln.Addr(), *coordinator)

	srv := &http.Server{Handler: mux}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		<-sig
		srv.Close()
	}()
	serve := func() error { return srv.Serve(ln) }
	if *tlsCert != "" {
		serve = func() error { return srv.ServeTLS(ln, *tlsCert, *tlsKey) }
	}
	if err := serve(); err != nil && err != http.ErrServerClosed {
		log.Fatalf("trainctl-gateway: %v", err)
	}
}
