// trainctl-gateway: REST/JSON front end of the trainctl coordinator's user
// API (trainctl.v1.Coordinator), built with grpc-gateway v1 from the same
// protos as the C++ code. The REST paths are in trainctl_http.yaml; build
// with deploy/gateway/build.sh. The files of this package:
//
//	main.go     flags and the composition of the handler (newHandler)
//	marshal.go  the JSON marshaler: text logs, unknown fields refused
//	hints.go    coordinator error texts rephrased for REST callers
//	routes.go   what the gateway answers itself: /healthz, /readyz,
//	            /v1/sweeps, the short state names of ?states=
//	openapi.go  /v1/openapi.json: the generated description plus the above
//	terminal.go /v1/terminal: a WebSocket carrying one interactive session
//	            (the dashboard's terminal)
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
//
// With -static-dir DIR it also serves the files of DIR (the web dashboard
// built from client/web/, whose index.html calls /v1/) at every path outside
// /v1/; without it those paths answer a JSON 404.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	pb "trainctl/v1"
)

// gatewayConfig is what newHandler needs; only main reads flags.
type gatewayConfig struct {
	// gRPC address of trainctl-coordinator, dialled lazily.
	CoordinatorAddr string
	// Files served outside /v1/ (the web dashboard); empty: a JSON 404 there.
	StaticDir string
	// How to dial the coordinator (TLS or plaintext); the gateway adds its
	// interceptors (hints.go).
	DialOptions []grpc.DialOption
	// /readyz waits this long for the coordinator's answer. 0 means 1 s.
	ReadyTimeout time.Duration
	// Largest request body read, bytes; 0 means maxBodyBytes (the
	// coordinator's gRPC message limit: nothing larger could be sent on).
	MaxBodyBytes int64
	// Refuse a /v1/ request without an `Authorization` header (401) before
	// reading its body: set where the coordinator authenticates
	// (--tokens-file), so that anonymous callers cannot make the gateway
	// read and buffer bodies.
	RequireAuth bool
}

// maxBodyBytes is trainctl-coordinator's largest gRPC message (16 MiB,
// kMaxMessageBytes in coordinator/grpc_service.cc).
const maxBodyBytes = 16 << 20

// limitRequests answers 413 for a body over maxBytes (declared or read) and,
// with requireAuth, 401 for a /v1/ request without credentials, before
// anything of the body is read. Four anonymous 100 MB POSTs raised the
// gateway's memory from 16 MiB to 2.1 GiB before this.
func limitRequests(h http.Handler, maxBytes int64, requireAuth bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requireAuth && strings.HasPrefix(r.URL.Path, "/v1/") && r.URL.Path != "/v1/openapi.json" &&
			!hasCredentials(r) {
			w.Header().Set("WWW-Authenticate", "Bearer")
			writeJSONErrorCode(w, "unauthenticated: send Authorization: Bearer TOKEN", http.StatusUnauthorized, codes.Unauthenticated)
			return
		}
		if r.ContentLength > maxBytes {
			writeJSONErrorCode(w, fmt.Sprintf("request body of %d bytes is over the limit of %d bytes", r.ContentLength, maxBytes),
				http.StatusRequestEntityTooLarge, codes.ResourceExhausted)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBytes)
		h.ServeHTTP(w, r)
	})
}

// The project's version, set by build.sh (-ldflags "-X main.version=...").
var version = "unknown"

// writeJSONError writes {"error", "message", "code"} (code: the gRPC code),
// like grpc-gateway's own error bodies, for errors the gateway makes itself
// (unknown path, wrong method, a bad ?states= value).
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
	writeJSONErrorCode(w, msg, httpCode, code)
}

// writeJSONErrorCode is writeJSONError with the gRPC code given.
func writeJSONErrorCode(w http.ResponseWriter, msg string, httpCode int, code codes.Code) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpCode)
	json.NewEncoder(w).Encode(map[string]interface{}{"error": msg, "message": msg, "code": code})
}

// writeJSON writes v (encoding/json) with code.
func writeJSON(w http.ResponseWriter, code int, v interface{}) {
	b, err := marshalNoHTMLEscape(v)
	if err != nil {
		writeJSONError(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

// marshalNoHTMLEscape is json.Marshal without escaping <, > and & (log lines
// and messages read better as they are; the JSON is as valid).
func marshalNoHTMLEscape(v interface{}) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// noCache makes browsers revalidate index.html and friends on every load, so
// a rebuilt dashboard shows at once (Vite's hashed asset names make this cheap).
func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

// newHandler returns the gateway's HTTP handler: the REST API under /v1/,
// proxied to the coordinator (one connection, closed when ctx ends), the
// gateway's own routes (routes.go, openapi.go), and the files of
// cfg.StaticDir at every other path. Errors: StaticDir has no index.html;
// the embedded OpenAPI description does not parse; the proxy cannot be set up.
func newHandler(ctx context.Context, cfg gatewayConfig) (http.Handler, error) {
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = time.Second
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = maxBodyBytes
	}
	runtime.OtherErrorHandler = func(w http.ResponseWriter, _ *http.Request, msg string, code int) {
		writeJSONError(w, msg, code)
	}
	gw := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, newGatewayMarshaler()))
	opts := append(append([]grpc.DialOption{}, cfg.DialOptions...),
		// Reconnect within about a second once the coordinator listens
		// (started after the gateway, restarted, a standby taking over):
		// gRPC's default backoff grows to 120 s between attempts, and every
		// call fails fast with the last dial error meanwhile.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithChainUnaryInterceptor(restHintsUnaryInterceptor),
		grpc.WithChainStreamInterceptor(restHintsStreamInterceptor))
	conn, err := grpc.DialContext(ctx, cfg.CoordinatorAddr, opts...)
	if err != nil {
		return nil, err
	}
	go func() {
		<-ctx.Done()
		conn.Close()
	}()
	if err := pb.RegisterCoordinatorHandler(ctx, gw, conn); err != nil {
		return nil, err
	}
	client := pb.NewCoordinatorClient(conn)

	mux := http.NewServeMux()
	mux.Handle("/v1/", refuseZeroSizes(acceptStateNames(gw)))
	own, err := withOpenAPIRoute(ownRoutes(gw, client, cfg))
	if err != nil {
		return nil, err
	}
	for _, r := range own {
		mux.Handle(r.Path, onlyMethod(r.Method, r.Handler))
	}
	if cfg.StaticDir != "" {
		if st, err := os.Stat(filepath.Join(cfg.StaticDir, "index.html")); err != nil || st.IsDir() {
			return nil, fmt.Errorf("-static-dir %s: no index.html there (build the dashboard: cmake --build build --target trainctl-web, into build/web)", cfg.StaticDir)
		}
		mux.Handle("/", noCache(http.FileServer(http.Dir(cfg.StaticDir))))
	} else {
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			writeJSONError(w, "not found: the REST API is under /v1/ (described at /v1/openapi.json)", http.StatusNotFound)
		})
	}
	return limitRequests(mux, cfg.MaxBodyBytes, cfg.RequireAuth), nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "HTTP address to serve on (port 0: a free port)")
	coordinator := flag.String("coordinator", "127.0.0.1:50051", "gRPC address of trainctl-coordinator")
	tlsCA := flag.String("tls-ca", "", "PEM CA certificate to verify a TLS coordinator with (default: plaintext)")
	tlsCert := flag.String("tls-cert", "", "PEM certificate to serve HTTPS with (with -tls-key; default: HTTP)")
	tlsKey := flag.String("tls-key", "", "PEM private key of -tls-cert")
	staticDir := flag.String("static-dir", "", "directory of static files (the web dashboard: build/web, from cmake --build build --target trainctl-web) to serve outside /v1/; empty: none")
	readyTimeout := flag.Duration("ready-timeout", time.Second, "how long /readyz waits for the coordinator to answer before it says 503")
	requireAuth := flag.Bool("require-auth", false, "refuse /v1/ requests without an Authorization header (401) before reading their body; set when the coordinator runs with --tokens-file")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("trainctl-gateway " + version)
		return
	}
	if (*tlsCert == "") != (*tlsKey == "") {
		log.Fatalf("trainctl-gateway: -tls-cert and -tls-key go together")
	}
	if *readyTimeout <= 0 {
		log.Fatalf("trainctl-gateway: -ready-timeout must be positive, got %v", *readyTimeout)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	opts := []grpc.DialOption{grpc.WithInsecure()}
	if *tlsCA != "" {
		creds, err := credentials.NewClientTLSFromFile(*tlsCA, "")
		if err != nil {
			log.Fatalf("trainctl-gateway: -tls-ca: %v", err)
		}
		opts = []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	}
	handler, err := newHandler(ctx, gatewayConfig{
		CoordinatorAddr: *coordinator,
		StaticDir:       *staticDir,
		DialOptions:     opts,
		ReadyTimeout:    *readyTimeout,
		RequireAuth:     *requireAuth,
	})
	if err != nil {
		log.Fatalf("trainctl-gateway: %v", err)
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("trainctl-gateway: listen on %s: %v", *listen, err)
	}
	// Same convention as trainctl-coordinator: tests read the port here.
	fmt.Printf("listening on port %d\n", ln.Addr().(*net.TCPAddr).Port)
	os.Stdout.Sync()
	log.Printf("trainctl-gateway: serving /v1/ on %s, coordinator %s, static files %q", ln.Addr(), *coordinator, *staticDir)

	srv := &http.Server{Handler: handler}
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
